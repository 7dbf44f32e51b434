/* How much of a gradient a step applies: non-finite shares and shares over the gradient
 * limit refused, results that would not be finite kept back, --clip-norm, and the learning
 * rate's scalings (--staleness-lr, --lr-schedule). The ordering and membership rules are in
 * ps/train/update_test.c. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ps/train/test_update.h"
#include "ps/train/update.h"

#include "common/check.h"

/* Non-finite gradients are refused before they touch anything: a sync share with a NaN
 * leaves the step (which goes on with the others), an async push with an infinity in its
 * second chunk ends with what it had applied. */
static void test_non_finite(void) {
  pst_store s;
  pst_optimizer o;
  pst_update u;
  setup(&s, &o, &u, PST_MODE_SYNC);
  int pub = 0;
  static float bad[N];
  memcpy(bad, grads[1], sizeof bad);
  bad[CHUNK + 7] = __builtin_nanf("");
  CHECK(offer_range(&u, 0, 0, 0, u.n_chunks, PST_OFFER_TAKEN, &pub));
  CHECK(pst_update_offer(&u, 1, 0, 0, pst_update_chunk_flags(&u, 0), bad, &pub) == PST_OFFER_TAKEN);
  CHECK(pst_update_offer(&u, 1, 0, 1, pst_update_chunk_flags(&u, 1), bad + CHUNK, &pub) == PST_OFFER_REJECTED && !pub);
  CHECK(offer_range(&u, 2, 0, 0, u.n_chunks, PST_OFFER_TAKEN, &pub));
  CHECK(pub && s.version == 1 && u.partial_steps == 1);
  int finite = 1;
  for (int i = 0; i < N; i++) finite = finite && pst_store_front(&s)[i] == pst_store_front(&s)[i];
  CHECK(finite);
  teardown(&s, &o, &u);
  setup(&s, &o, &u, PST_MODE_ASYNC);
  bad[CHUNK + 7] = __builtin_inff();
  CHECK(pst_update_offer(&u, 1, 0, 0, pst_update_chunk_flags(&u, 0), bad, &pub) == PST_OFFER_TAKEN);
  CHECK(pst_update_offer(&u, 1, 0, 1, pst_update_chunk_flags(&u, 1), bad + CHUNK, &pub) == PST_OFFER_REJECTED);
  CHECK(pub && s.version == 1 && u.owner == -1);
  CHECK(pst_store_front(&s)[CHUNK + 7] == (float)((CHUNK + 7) % 17) * 0.1f);
  teardown(&s, &o, &u);
}

/* Issue 23: what a share may be. A value over the gradient limit (3e38 is finite) is
 * rejected like a NaN, with the reason, and changes nothing; one at the limit is taken. Adam's
 * state stays finite after a step of shares at the limit from every worker. */
static void test_grad_limit(void) {
  static float big[N], at[N];
  for (int i = 0; i < N; i++) {
    big[i] = 3e38f;
    at[i] = i % 2 ? 1e6f : -1e6f;
  }
  for (int m = 0; m < 2; m++) {
    pst_mode mode = m == 0 ? PST_MODE_SYNC : PST_MODE_ASYNC;
    pst_store s;
    pst_optimizer o;
    pst_update u;
    static float init[N];
    pst_opt_config cfg;
    pst_opt_defaults(&cfg); /* Adam */
    CHECK(pst_store_init(&s, N, init) == 0 && pst_opt_init(&o, &cfg, N) == 0);
    CHECK(pst_update_init(&u, mode, W, CHUNK, &s, &o) == 0);
    CHECK(u.grad_limit == 1e6f);
    int pub = 0;
    uint64_t before = pst_store_checksum(&s);
    CHECK(pst_update_offer(&u, 0, 0, 0, pst_update_chunk_flags(&u, 0), big, &pub) ==
          PST_OFFER_REJECTED);
    CHECK(strstr(u.reject_why, "over the limit") != NULL);
    CHECK(pst_store_checksum(&s) == before && s.version == 0);
    /* Every worker's whole push at the limit: taken, and the state is finite. */
    int published = 0;
    /* Sync: the step goes on without worker 0, whose share was refused (as without a lost
     * worker); async: worker 0 pushes again. */
    for (int w = mode == PST_MODE_SYNC ? 1 : 0; w < W; w++) {
      if (mode != PST_MODE_SYNC && w > 0) break;
      for (uint32_t c = 0; c < u.n_chunks; c++) {
        CHECK(pst_update_offer(&u, w, 0, c, pst_update_chunk_flags(&u, c),
                               at + (size_t)c * CHUNK, &pub) == PST_OFFER_TAKEN);
        published |= pub;
      }
    }
    CHECK(published && s.version == 1 && u.unsafe_chunks == 0);
    uint64_t t;
    const float *m1, *v1;
    pst_opt_state(&o, 0, &t, &m1, &v1);
    CHECK(pst_all_finite(pst_store_front(&s), N) && pst_all_finite(m1, N) && pst_all_finite(v1, N));
    /* A lower limit: a value just over it is rejected. */
    CHECK(pst_update_set_limits(&u, 10.0, 0) == 0);
    static float eleven[N];
    eleven[5] = 10.5f;
    CHECK(pst_update_offer(&u, 0, 1, 0, pst_update_chunk_flags(&u, 0), eleven, &pub) ==
          PST_OFFER_REJECTED);
    CHECK(pst_update_set_limits(&u, 0, 0) == -EINVAL && pst_update_set_limits(&u, 1, -1) == -EINVAL);
    teardown(&s, &o, &u);
  }
}

/* A step whose results would not be finite keeps the chunk's values and counts it; the
 * other chunks are updated as usual. With the limit raised to 1e30, Adam's second moment of
 * a 1e30 gradient, 1e-3 x 1e60, is infinite. */
static void test_unsafe_update(void) {
  for (int m = 0; m < 2; m++) {
    pst_mode mode = m == 0 ? PST_MODE_SYNC : PST_MODE_ASYNC;
    pst_store s;
    pst_optimizer o;
    pst_update u;
    static float init[N], g[N];
    for (int i = 0; i < N; i++) {
      init[i] = 1.0f;
      g[i] = i < CHUNK ? 1e30f : 0.5f; /* chunk 0's update overflows */
    }
    pst_opt_config cfg;
    pst_opt_defaults(&cfg); /* Adam */
    CHECK(pst_store_init(&s, N, init) == 0 && pst_opt_init(&o, &cfg, N) == 0);
    CHECK(pst_update_init(&u, mode, W, CHUNK, &s, &o) == 0);
    CHECK(pst_update_set_limits(&u, 1e30, 0) == 0);
    int published = 0, rc0 = -1;
    for (int w = 0; w < W; w++) {
      if (mode != PST_MODE_SYNC && w > 0) break;
      for (uint32_t c = 0; c < u.n_chunks; c++) {
        int pub = 0;
        int rc = pst_update_offer(&u, w, 0, c, pst_update_chunk_flags(&u, c),
                                  g + (size_t)c * CHUNK, &pub);
        if (c == 0 && w == (mode == PST_MODE_SYNC ? W - 1 : 0)) rc0 = rc;
        published |= pub;
        if (rc == PST_OFFER_REJECTED) break; /* async: the rest of the push goes */
      }
    }
    CHECK(published && s.version == 1 && u.unsafe_chunks == 1);
    uint64_t t;
    const float *m1, *v1;
    pst_opt_state(&o, 0, &t, &m1, &v1);
    const float *w1 = pst_store_front(&s);
    CHECK(pst_all_finite(w1, N) && pst_all_finite(m1, N) && pst_all_finite(v1, N));
    CHECK(w1[0] == 1.0f && w1[CHUNK - 1] == 1.0f && m1[0] == 0.0f && v1[0] == 0.0f); /* kept */
    if (mode == PST_MODE_SYNC) {
      CHECK(rc0 == PST_OFFER_TAKEN && w1[CHUNK] < 1.0f && u.last_unsafe == 0); /* the others stepped */
    } else {
      CHECK(rc0 == PST_OFFER_REJECTED && w1[CHUNK] == 1.0f); /* the push ended there */
      CHECK(strstr(u.reject_why, "non-finite") != NULL);
    }
    teardown(&s, &o, &u);
  }
}

/* --clip-norm: a push whose norm (over the trained parameters, times N) is over the clip norm
 * is rejected at the chunk that takes it over; the model-state ranges do not count. */
static void test_clip_norm(void) {
  pst_store s;
  pst_optimizer o;
  pst_update u;
  setup(&s, &o, &u, PST_MODE_ASYNC);
  /* State over [0, 500): its values do not count. */
  size_t soff = 0, scount = 500;
  CHECK(pst_opt_set_state(&o, &soff, &scount, 1) == 0);
  CHECK(pst_update_set_limits(&u, 1e6, 3.0) == 0);
  static float g[N];
  for (int i = 0; i < 500; i++) g[i] = 100.0f; /* state: left out */
  /* One value per chunk: chunk c holds 0.3 at its 600th float; over 11 chunks a norm of
   * 0.3 x sqrt(11) = 0.995 per share, times N = 3: 2.985, under 3. */
  for (uint32_t c = 0; c < 11; c++) g[c * CHUNK + 600 < N ? c * CHUNK + 600 : N - 1] = 0.3f;
  int pub = 0, published = 0;
  for (uint32_t c = 0; c < u.n_chunks; c++) {
    CHECK(pst_update_offer(&u, 0, 0, c, pst_update_chunk_flags(&u, c), g + (size_t)c * CHUNK,
                           &pub) == PST_OFFER_TAKEN);
    published |= pub;
  }
  CHECK(published && s.version == 1);
  /* The same push with one more value: over. */
  g[700] = 0.3f;
  int rejected_at = -1;
  for (uint32_t c = 0; c < u.n_chunks && rejected_at < 0; c++)
    if (pst_update_offer(&u, 1, 1, c, pst_update_chunk_flags(&u, c), g + (size_t)c * CHUNK,
                         &pub) == PST_OFFER_REJECTED)
      rejected_at = (int)c;
  CHECK(rejected_at == 10 && strstr(u.reject_why, "clip-norm") != NULL);
  teardown(&s, &o, &u);
}

/* The staleness-aware learning rate (async): a push of staleness s is applied with lr / (1 +
 * s); one of staleness 0 as without it; sync refuses it. SGD with lr 1, so each step is the
 * gradient (scaled by N) times that rate. */
static void test_staleness_lr(void) {
  pst_store s;
  pst_optimizer o;
  pst_update u;
  setup(&s, &o, &u, PST_MODE_SYNC);
  CHECK(pst_update_set_staleness_lr(&u, 1) == -EINVAL && pst_update_set_staleness_lr(&u, 0) == 0);
  teardown(&s, &o, &u);
  setup(&s, &o, &u, PST_MODE_ASYNC);
  CHECK(pst_update_set_staleness_lr(&u, 1) == 0);
  int pub = 0;
  float w0 = pst_store_front(&s)[5];
  CHECK(offer_range(&u, 0, 0, 0, u.n_chunks, PST_OFFER_TAKEN, &pub) && pub);
  float w1 = pst_store_front(&s)[5];
  CHECK(w1 == w0 - 3.0f * grads[0][5]); /* staleness 0: the full rate */
  /* Computed on version 0, applied at version 1: staleness 1, half the rate. */
  CHECK(offer_range(&u, 1, 0, 0, u.n_chunks, PST_OFFER_TAKEN, &pub) && pub);
  float lr = 1.0f * (1.0f / 2.0f);
  CHECK(pst_store_front(&s)[5] == w1 - lr * (3.0f * grads[1][5]));
  CHECK(u.staleness_max == 1);
  teardown(&s, &o, &u);
}

/* --lr-schedule cosine (pst_update_set_lr_decay): the share of the rate is exactly 1 without
 * a plan and at the first step, a half at mid-plan, falls at every step to a small positive
 * share at the last, and stays there past the plan. An async push applied at version v runs
 * at the share of v. */
static void test_lr_decay(void) {
  for (int w = 0; w < W; w++)
    for (int i = 0; i < N; i++) grads[w][i] = (float)((i * 7 + w) % 13) * 1e-3f;
  pst_store s;
  pst_optimizer o;
  pst_update u;
  setup(&s, &o, &u, PST_MODE_ASYNC);
  CHECK(pst_update_lr_decay_at(&u, 0) == 1.0f && pst_update_lr_decay_at(&u, 12345) == 1.0f);
  pst_update_set_lr_decay(&u, 10);
  CHECK(pst_update_lr_decay_at(&u, 0) == 1.0f);
  CHECK(pst_update_lr_decay_at(&u, 5) > 0.4999f && pst_update_lr_decay_at(&u, 5) < 0.5001f);
  float prev = 1.0f;
  for (uint64_t v = 1; v < 10; v++) {
    float d = pst_update_lr_decay_at(&u, v);
    CHECK(d < prev && d > 0.0f);
    prev = d;
  }
  CHECK(prev < 0.03f && pst_update_lr_decay_at(&u, 10) == prev &&
        pst_update_lr_decay_at(&u, 1000) == prev);
  int pub = 0;
  float w0 = pst_store_front(&s)[5];
  CHECK(offer_range(&u, 0, 0, 0, u.n_chunks, PST_OFFER_TAKEN, &pub) && pub);
  float w1 = pst_store_front(&s)[5];
  CHECK(w1 == w0 - 3.0f * grads[0][5]); /* version 0: the whole rate */
  CHECK(offer_range(&u, 1, 1, 0, u.n_chunks, PST_OFFER_TAKEN, &pub) && pub);
  float d1 = pst_update_lr_decay_at(&u, 1);
  CHECK(d1 < 1.0f && pst_store_front(&s)[5] == w1 - d1 * (3.0f * grads[1][5]));
  teardown(&s, &o, &u);
}

/* Offers worker w's whole push of g computed on `version`, chunk after chunk, until one is
 * not taken: PST_OFFER_TAKEN when all were, else what the first one not taken got. */
static int push_all(pst_update *u, int w, uint64_t version, const float *g, int *published) {
  for (uint32_t c = 0; c < u->n_chunks; c++) {
    int pub = 0;
    int rc = pst_update_offer(u, w, version, c, pst_update_chunk_flags(u, c),
                              g + pst_update_chunk_off(u, c), &pub);
    *published |= pub;
    if (rc != PST_OFFER_TAKEN) return rc;
  }
  return PST_OFFER_TAKEN;
}

/* An honest-looking gradient: small values of every sign, scaled by k (its norm is k times
 * the same base's). */
static void honest(float *g, int w, float k) {
  for (int i = 0; i < N; i++) g[i] = k * (float)((i * 7 + w * 5) % 13 - 6) * 1e-3f;
}

/* Issue 43: a push over F times the running median of accepted pushes' norms is rejected by
 * default in pstrain-ps; before the median exists (the warm-up), one over an RMS of 1 per
 * parameter (as a worker's gradient, N times the share) is. In sync, a poisoner pushing 10
 * everywhere at the very first step is rejected at its first chunk and the step goes on
 * with the others; honest pushes whose norms vary 6-fold are all taken; after the warm-up a
 * push under the warm-up's ceiling but 20 times the median is rejected, the same one at 5
 * times is taken; async as sync. */
static void test_norm_factor(void) {
  static float ten[N], g[N];
  for (int i = 0; i < N; i++) ten[i] = 10.0f;
  for (int m = 0; m < 2; m++) {
    pst_mode mode = m == 0 ? PST_MODE_SYNC : PST_MODE_ASYNC;
    pst_store s;
    pst_optimizer o;
    pst_update u;
    setup(&s, &o, &u, mode);
    CHECK(u.norm_factor == 0); /* off in the module; pstrain-ps turns it on */
    CHECK(pst_update_set_norm_factor(&u, 1.0) == -EINVAL &&
          pst_update_set_norm_factor(&u, -2) == -EINVAL &&
          pst_update_set_norm_factor(&u, PST_NORM_FACTOR_DEFAULT) == 0);
    int pub = 0;
    uint64_t v = 0;
    /* The warm-up: the poisoner first. */
    uint64_t before = pst_store_checksum(&s);
    CHECK(pst_update_offer(&u, 0, v, 0, pst_update_chunk_flags(&u, 0), ten, &pub) ==
          PST_OFFER_REJECTED);
    CHECK(strstr(u.reject_why, "warm-up") != NULL && u.norm_rejected == 1);
    CHECK(pst_store_checksum(&s) == before && s.version == 0);
    /* Honest pushes of norms varying from 0.5 to 3 times the base (ratios to the median up to
     * about 3, like the measured honest jobs'): all taken, in and after the warm-up. */
    static const float scales[] = {1.0f, 3.0f, 0.5f, 1.5f, 2.0f, 0.7f, 1.2f, 2.5f};
    for (int step = 0; step < 8; step++)
      for (int w = mode == PST_MODE_SYNC && step == 0 ? 1 : 0; w < W; w++) {
        honest(g, w, scales[(step + w) % 8]);
        pub = 0;
        CHECK(push_all(&u, w, v, g, &pub) == PST_OFFER_TAKEN);
        if (mode == PST_MODE_SYNC ? w == W - 1 : 1) CHECK(pub && s.version == ++v);
      }
    CHECK(u.norm_count >= PST_NORM_WARMUP && u.norm_median > 0 && u.norm_rejected == 1);
    CHECK(u.norm_ratio_max > 1 && u.norm_ratio_max < 10);
    /* After the warm-up: 20 times the base's norm (an RMS of about 0.1 per parameter as a
     * worker's gradient, under the warm-up's ceiling) is rejected, 5 times is taken. */
    honest(g, 0, 20.0f);
    pub = 0;
    before = pst_store_checksum(&s);
    CHECK(push_all(&u, 0, v, g, &pub) == PST_OFFER_REJECTED);
    CHECK(strstr(u.reject_why, "running median") != NULL && u.norm_rejected == 2);
    if (mode == PST_MODE_ASYNC) CHECK(pst_store_checksum(&s) != before || pub); /* ended */
    /* All 10 everywhere: rejected at its first chunk. */
    uint64_t v2 = s.version;
    pub = 0;
    if (mode == PST_MODE_SYNC) {
      /* Worker 0 left this step; the others complete it. */
      for (int w = 1; w < W; w++) {
        honest(g, w, 1.0f);
        CHECK(push_all(&u, w, v, g, &pub) == PST_OFFER_TAKEN);
      }
      CHECK(pub && s.version == v + 1);
      v2 = ++v;
    }
    /* Five times the base is taken (in sync worker 0 first: it opens the step). */
    honest(g, 0, 5.0f);
    CHECK(push_all(&u, 0, v2, g, &pub) == PST_OFFER_TAKEN);
    CHECK(pst_update_offer(&u, 1, s.version, 0, pst_update_chunk_flags(&u, 0), ten, &pub) ==
          PST_OFFER_REJECTED && u.norm_rejected == 3);
    /* Off: the same poison is taken. */
    CHECK(pst_update_set_norm_factor(&u, 0) == 0);
    CHECK(push_all(&u, 2, s.version, ten, &pub) == PST_OFFER_TAKEN);
    teardown(&s, &o, &u);
  }
}

/* A share of no values (by samples, a worker given no samples) says nothing of the scale:
 * it is taken and left out of the median. */
static void test_norm_zero_share(void) {
  pst_store s;
  pst_optimizer o;
  pst_update u;
  setup(&s, &o, &u, PST_MODE_ASYNC);
  CHECK(pst_update_set_norm_factor(&u, 4) == 0);
  static float zero[N];
  int pub = 0;
  for (int k = 0; k < 3; k++) CHECK(push_all(&u, 0, s.version, zero, &pub) == PST_OFFER_TAKEN);
  CHECK(u.norm_count == 0);
  teardown(&s, &o, &u);
}

int main(void) {
  test_norm_factor();
  test_norm_zero_share();
  test_lr_decay();
  test_staleness_lr();
  test_grad_limit();
  test_unsafe_update();
  test_clip_norm();
  test_non_finite();
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
