/* The update rules without sockets: sync sums are bit-identical whatever the arrival
 * order, a chunk offered out of worker order waits, a busy back buffer holds the step,
 * chunks become final (and may be streamed) in order, and async applies one push at a time
 * and records staleness. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/train/par.h"
#include "ps/train/test_update.h"
#include "ps/train/update.h"

#include "common/check.h"

/* desc_mask: the workers whose pushes come last chunk first. */
static uint64_t run_sync_step_dirs(int reverse, unsigned desc_mask);
static uint64_t run_sync_step(int reverse) { return run_sync_step_dirs(reverse, 0); }

/* Offers every chunk of every worker, the workers in order or (reverse) in reverse order in
 * each round, retrying refused chunks like the server's kick. */
static uint64_t run_sync_step_dirs(int reverse, unsigned desc_mask) {
  pst_store s;
  pst_optimizer o;
  pst_update u;
  setup(&s, &o, &u, PST_MODE_SYNC);
  uint32_t next[W] = {0};
  int published = 0, rounds = 0;
  while (!published && rounds++ < 1000) {
    for (int k = 0; k < W; k++) {
      int w = reverse ? W - 1 - k : k;
      while (next[w] < u.n_chunks) {
        int pub = 0, desc = (desc_mask >> w) & 1;
        uint32_t c = desc ? u.n_chunks - 1 - next[w] : next[w];
        int rc = pst_update_offer(&u, w, 0, c, pst_update_chunk_flags(&u, next[w]),
                                  grads[w] + (size_t)c * CHUNK, &pub);
        CHECK(rc >= 0);
        if (rc != PST_OFFER_TAKEN) break;
        next[w]++;
        published |= pub;
      }
    }
  }
  CHECK(published && s.version == 1);
  uint64_t sum = pst_store_checksum(&s);
  /* SGD with lr 1: w1 = w0 - sum of gradients, summed in worker order. */
  int exact = 1;
  for (int i = 0; i < N; i++) {
    float g = grads[0][i];
    g += grads[1][i];
    g += grads[2][i];
    float expect = (float)(i % 17) * 0.1f - g;
    if (pst_store_front(&s)[i] != expect) exact = 0;
  }
  CHECK(exact);
  teardown(&s, &o, &u);
  return sum;
}

static void test_sync_order(void) {
  srand(3);
  for (int w = 0; w < W; w++)
    for (int i = 0; i < N; i++) grads[w][i] = (float)rand() / RAND_MAX * 1e-3f * (w + 1);
  CHECK(run_sync_step(0) == run_sync_step(1));
  /* Pushes that come last chunk first (a worker pushing each layer as its backward pass
   * ends), from some workers or all: the same sums in worker order, the same bits. */
  uint64_t want = run_sync_step(0);
  for (unsigned mask = 1; mask < (1u << W); mask++) {
    CHECK(run_sync_step_dirs(0, mask) == want);
    CHECK(run_sync_step_dirs(1, mask) == want);
  }
}

/* Async pushes in either direction: a descending push is applied chunk by chunk from the
 * top, the same result as the ascending one; a chunk out of its direction is an error; a
 * descending push whose worker is lost keeps the chunks it applied (the top ones) and
 * carries the rest over; backup workers' slots go to the first chunk of a push, whichever
 * chunk that is. */
static void test_push_directions(void) {
  pst_store s;
  pst_optimizer o;
  pst_update u;
  uint64_t asc_sum;
  int pub = 0;
  setup(&s, &o, &u, PST_MODE_ASYNC);
  CHECK(offer_range(&u, 1, 0, 0, u.n_chunks, PST_OFFER_TAKEN, &pub) && pub);
  asc_sum = pst_store_checksum(&s);
  teardown(&s, &o, &u);

  setup(&s, &o, &u, PST_MODE_ASYNC);
  uint32_t n = u.n_chunks;
  pub = 0;
  /* The connection checks a push's order (ps/net/push_order.h); here a chunk comes once a
   * push, and a push begins with its first frame. */
  CHECK(pst_update_offer(&u, 1, 0, 3, 0, grads[1] + 3 * CHUNK, &pub) == -EPROTO);
  CHECK(pst_update_offer(&u, 1, 0, n - 1, pst_update_chunk_flags(&u, 0), grads[1] + (size_t)(n - 1) * CHUNK,
                         &pub) == PST_OFFER_TAKEN && !pub);
  /* Another worker waits; a chunk twice is an error. */
  CHECK(pst_update_offer(&u, 2, 0, 0, pst_update_chunk_flags(&u, 0), grads[2], &pub) == PST_OFFER_LATER);
  CHECK(pst_update_offer(&u, 1, 0, n - 1, pst_update_chunk_flags(&u, 1), grads[1] + (size_t)(n - 1) * CHUNK,
                         &pub) == -EPROTO);
  for (uint32_t k = 1; k < n; k++) {
    uint32_t c = n - 1 - k;
    CHECK(pst_update_offer(&u, 1, 0, c, pst_update_chunk_flags(&u, k), grads[1] + (size_t)c * CHUNK, &pub) ==
          PST_OFFER_TAKEN);
  }
  CHECK(pub && s.version == 1 && u.pushes == 1 && pst_store_checksum(&s) == asc_sum);
  /* Worker 2 pushes descending and is lost after two chunks. */
  pub = 0;
  for (uint32_t k = 0; k < 2; k++) {
    uint32_t c = n - 1 - k;
    CHECK(pst_update_offer(&u, 2, 1, c, pst_update_chunk_flags(&u, k), grads[2] + (size_t)c * CHUNK, &pub) ==
          PST_OFFER_TAKEN);
  }
  float before_lo = pst_store_front(&s)[5], before_hi = pst_store_front(&s)[(n - 1) * CHUNK];
  pst_update_set_member(&u, 2, 0, &pub);
  CHECK(pub && s.version == 2 && u.owner == -1);
  CHECK(pst_store_front(&s)[5] == before_lo); /* carried over */
  CHECK(pst_store_front(&s)[(size_t)(n - 1) * CHUNK] == before_hi - 3.0f * grads[2][(n - 1) * CHUNK]);
  teardown(&s, &o, &u);

  /* Backup workers (N = 3, K = 1): worker 2's descending push takes slot 0 with its first
   * chunk, worker 0's ascending one slot 1; worker 1 comes too late. The same bits as when
   * worker 2 pushes ascending. */
  uint64_t sums[2];
  for (int desc = 0; desc < 2; desc++) {
    setup(&s, &o, &u, PST_MODE_SYNC);
    CHECK(pst_update_set_backup(&u, 1) == 0);
    for (int w = 0; w < W; w++) pst_update_set_member(&u, w, 1, &pub);
    pub = 0;
    uint32_t c2 = desc ? n - 1 : 0;
    CHECK(pst_update_offer(&u, 2, 0, c2, PST_CHUNK_FIRST, grads[2] + (size_t)c2 * CHUNK, &pub) ==
          PST_OFFER_TAKEN);
    /* Worker 0's first chunk takes slot 1 (summed now, or later once slot 0's is in). */
    CHECK(pst_update_offer(&u, 0, 0, 0, PST_CHUNK_FIRST, grads[0], &pub) >= 0 && u.slot_of[0] == 1);
    for (uint32_t k = 1; k < n; k++) {
      uint32_t c = desc ? n - 1 - k : k;
      CHECK(pst_update_offer(&u, 2, 0, c, pst_update_chunk_flags(&u, k), grads[2] + (size_t)c * CHUNK,
                             &pub) == PST_OFFER_TAKEN);
    }
    CHECK(!pub);
    CHECK(offer_range(&u, 0, 0, 0, n, PST_OFFER_TAKEN, &pub));
    CHECK(pub && s.version == 1);
    CHECK(pst_update_offer(&u, 1, 0, 0, PST_CHUNK_FIRST, grads[1], &pub) == PST_OFFER_DROPPED);
    sums[desc] = pst_store_checksum(&s);
    teardown(&s, &o, &u);
  }
  CHECK(sums[0] == sums[1]);
}

static void test_sync_waits(void) {
  pst_store s;
  pst_optimizer o;
  pst_update u;
  setup(&s, &o, &u, PST_MODE_SYNC);
  int pub;
  /* Worker 1's chunk 0 must wait for worker 0's. */
  CHECK(pst_update_offer(&u, 1, 0, 0, pst_update_chunk_flags(&u, 0), grads[1], &pub) == PST_OFFER_LATER);
  /* A pull still being sent from the back buffer holds the step's first chunk. */
  s.refs[s.front ^ 1] = 1;
  CHECK(pst_update_offer(&u, 0, 0, 0, pst_update_chunk_flags(&u, 0), grads[0], &pub) == PST_OFFER_LATER);
  s.refs[s.front ^ 1] = 0;
  CHECK(pst_update_offer(&u, 0, 0, 0, pst_update_chunk_flags(&u, 0), grads[0], &pub) == PST_OFFER_TAKEN && !pub);
  CHECK(pst_update_offer(&u, 1, 0, 0, pst_update_chunk_flags(&u, 0), grads[1], &pub) == PST_OFFER_TAKEN);
  /* A gradient computed on another version is refused. */
  CHECK(pst_update_offer(&u, 2, 5, 0, pst_update_chunk_flags(&u, 0), grads[2], &pub) == -ESTALE);
  CHECK(pst_update_chunk_len(&u, u.n_chunks - 1) == N % CHUNK);
  teardown(&s, &o, &u);
}

/* What a streamed pull may send: chunk c is final once every worker's share of it is in, and
 * only a prefix of final chunks counts. A reply streaming the back buffer (early_refs) does
 * not hold the step, and publishing turns it into a reference on the new front buffer. */
static void test_sync_ready_prefix(void) {
  pst_store s;
  pst_optimizer o;
  pst_update u;
  setup(&s, &o, &u, PST_MODE_SYNC);
  int pub = 0;
  CHECK(pst_update_ready_chunks(&u) == 0);
  pst_store_hold streamed = pst_store_take(&s, 1); /* a pull of version 1 is being streamed */
  for (int w = 0; w < W - 1; w++)
    CHECK(pst_update_offer(&u, w, 0, 0, pst_update_chunk_flags(&u, 0), grads[w], &pub) == PST_OFFER_TAKEN);
  CHECK(pst_update_ready_chunks(&u) == 0); /* chunk 0 still lacks the last worker's share */
  /* Workers 0 and 1 push chunk 1 too: still not final. */
  for (int w = 0; w < W - 1; w++)
    CHECK(pst_update_offer(&u, w, 0, 1, pst_update_chunk_flags(&u, 1), grads[w] + CHUNK, &pub) == PST_OFFER_TAKEN);
  CHECK(pst_update_offer(&u, W - 1, 0, 0, pst_update_chunk_flags(&u, 0), grads[W - 1], &pub) == PST_OFFER_TAKEN);
  CHECK(pst_update_ready_chunks(&u) == 1);
  /* Final chunks hold the step's result: SGD, lr 1, initial weights minus the sum. */
  float g = grads[0][7];
  g += grads[1][7];
  g += grads[2][7];
  CHECK(pst_store_back(&s)[7] == (float)(7 % 17) * 0.1f - g);
  CHECK(pst_update_offer(&u, W - 1, 0, 1, pst_update_chunk_flags(&u, 1), grads[W - 1] + CHUNK, &pub) == PST_OFFER_TAKEN);
  CHECK(pst_update_ready_chunks(&u) == 2);
  int back = s.front ^ 1;
  for (uint32_t c = 2; c < u.n_chunks; c++)
    for (int w = 0; w < W; w++)
      CHECK(pst_update_offer(&u, w, 0, c, pst_update_chunk_flags(&u, c), grads[w] + (size_t)c * CHUNK, &pub) == PST_OFFER_TAKEN);
  CHECK(pub && s.version == 1 && s.front == back);
  /* Published: the streamed reply now holds the front buffer, and nothing is ready until
   * the next step has final chunks of its own. */
  CHECK(s.early_refs == 0 && s.refs[back] == 1 && !pst_store_back_busy(&s));
  CHECK(pst_update_ready_chunks(&u) == 0);
  pst_store_release(&s, &streamed);
  teardown(&s, &o, &u);
}

static void test_async(void) {
  pst_store s;
  pst_optimizer o;
  pst_update u;
  setup(&s, &o, &u, PST_MODE_ASYNC);
  int pub = 0;
  CHECK(pst_update_offer(&u, 1, 0, 0, pst_update_chunk_flags(&u, 0), grads[1], &pub) == PST_OFFER_TAKEN);
  /* Another worker's push waits until this one is whole. */
  CHECK(pst_update_offer(&u, 2, 0, 0, pst_update_chunk_flags(&u, 0), grads[2], &pub) == PST_OFFER_LATER);
  for (uint32_t c = 1; c < u.n_chunks; c++)
    CHECK(pst_update_offer(&u, 1, 0, c, pst_update_chunk_flags(&u, c), grads[1] + (size_t)c * CHUNK, &pub) == PST_OFFER_TAKEN);
  CHECK(pub && s.version == 1);
  /* Worker 2's gradient was computed on version 0: staleness 1; scaled by N = 3. */
  for (uint32_t c = 0; c < u.n_chunks; c++)
    CHECK(pst_update_offer(&u, 2, 0, c, pst_update_chunk_flags(&u, c), grads[2] + (size_t)c * CHUNK, &pub) == PST_OFFER_TAKEN);
  CHECK(s.version == 2 && u.staleness_max == 1 && u.staleness_sum == 1 && u.pushes == 2);
  float expect = ((float)(5 % 17) * 0.1f - 3.0f * grads[1][5]) - 3.0f * grads[2][5];
  CHECK(pst_store_front(&s)[5] == expect);
  teardown(&s, &o, &u);
}

/* Model state (batchnorm's moving statistics) under Adam with weight decay: a sync step
 * adds the mean of the workers' pushed changes (each pushed as change / N), a step that lost
 * a worker the mean of those that came, async each push's change (scaled by N) as it
 * arrives; the ranges cross a chunk boundary and end the vector, and the optimizer still
 * trains everything else. */

static void test_model_state(void) {
  srand(5);
  for (int w = 0; w < W; w++)
    for (int i = 0; i < N; i++) grads[w][i] = ((float)rand() / RAND_MAX - 0.5f) * 1e-2f;
  static const size_t off[2] = {CHUNK - 3, N - 4}, cnt[2] = {8, 4};
  const size_t probe[4] = {CHUNK - 3, CHUNK + 4, N - 1, 5}; /* the last one trained */
  for (int mode = 0; mode < 3; mode++) {
    pst_store s;
    pst_optimizer o;
    pst_update u;
    static float init[N];
    for (int i = 0; i < N; i++) init[i] = (float)(i % 17) * 0.1f;
    pst_opt_config cfg;
    pst_opt_defaults(&cfg);
    cfg.lr = 0.01f;
    cfg.weight_decay = 0.1f;
    CHECK(pst_store_init(&s, N, init) == 0);
    CHECK(pst_opt_init(&o, &cfg, N) == 0);
    CHECK(pst_opt_set_state(&o, off, cnt, 2) == 0);
    CHECK(pst_update_init(&u, mode == 2 ? PST_MODE_ASYNC : PST_MODE_SYNC, W, CHUNK, &s, &o) == 0);
    int pub = 0;
    if (mode == 0) { /* sync, all three */
      for (int k = 0; k < W; k++) CHECK(offer_range(&u, k, 0, 0, u.n_chunks, PST_OFFER_TAKEN, &pub));
    } else if (mode == 1) { /* sync, worker 2 lost before its share */
      pst_update_set_member(&u, 2, 0, &pub);
      for (int k = 0; k < 2; k++) CHECK(offer_range(&u, k, 0, 0, u.n_chunks, PST_OFFER_TAKEN, &pub));
    } else { /* async: worker 1's push alone */
      CHECK(offer_range(&u, 1, 0, 0, u.n_chunks, PST_OFFER_TAKEN, &pub));
    }
    CHECK(pub && s.version == 1);
    const float *w = pst_store_front(&s);
    for (int p = 0; p < 4; p++) {
      size_t i = probe[p];
      float g = mode == 2 ? grads[1][i] : grads[0][i];
      if (mode != 2) g += grads[1][i];
      if (mode == 0) g += grads[2][i];
      float scale = mode == 0 ? 1.0f : mode == 1 ? 1.5f : 3.0f;
      float want = init[i] + g * scale;
      if (p < 3)
        CHECK(w[i] == want);
      else
        CHECK(w[i] != want && w[i] != init[i]); /* Adam moved it, and differently */
    }
    uint64_t t;
    const float *m1, *m2;
    pst_opt_state(&o, 0, &t, &m1, &m2);
    CHECK(t == 1 && m1[CHUNK] == 0.0f && m2[N - 1] == 0.0f && m1[5] != 0.0f);
    teardown(&s, &o, &u);
  }
}


/* A worker lost mid-step (continue): the chunks that waited only for it are applied with the
 * shares they got, scaled to their mean (N/m); the step completes with the others; its late
 * push is dropped and counted; back as a member it takes part from the next step. */
static void test_sync_worker_lost(void) {
  pst_store s;
  pst_optimizer o;
  pst_update u;
  setup(&s, &o, &u, PST_MODE_SYNC);
  int pub = 0;
  CHECK(offer_range(&u, 0, 0, 0, 3, PST_OFFER_TAKEN, &pub));
  CHECK(offer_range(&u, 1, 0, 0, 3, PST_OFFER_TAKEN, &pub));
  CHECK(offer_range(&u, 2, 0, 0, 1, PST_OFFER_TAKEN, &pub) && !pub);
  CHECK(pst_update_ready_chunks(&u) == 1);
  pst_update_set_member(&u, 2, 0, &pub);
  CHECK(!pub && pst_update_ready_chunks(&u) == 3 && u.members == W - 1);
  CHECK(offer_range(&u, 0, 0, 3, u.n_chunks, PST_OFFER_TAKEN, &pub));
  CHECK(!pub);
  CHECK(offer_range(&u, 1, 0, 3, u.n_chunks, PST_OFFER_TAKEN, &pub));
  CHECK(pub && s.version == 1 && u.partial_steps == 1);
  float *w = pst_store_front(&s);
  float g3 = grads[0][5];
  g3 += grads[1][5];
  g3 += grads[2][5];
  float g2 = grads[0][CHUNK + 5];
  g2 += grads[1][CHUNK + 5];
  CHECK(w[5] == (float)(5 % 17) * 0.1f - g3);
  CHECK(w[CHUNK + 5] == (float)((CHUNK + 5) % 17) * 0.1f - g2 * 1.5f);
  /* Its push for version 0 arrives late: dropped and counted, whatever the chunk. */
  uint64_t dropped = u.dropped;
  CHECK(offer_range(&u, 2, 0, 1, 2, PST_OFFER_DROPPED, &pub) && u.dropped == dropped + 1);
  /* Back before step 2 opens: one of its shares again. */
  pst_update_set_member(&u, 2, 1, &pub);
  pub = 0;
  for (int k = 0; k < W; k++) CHECK(offer_range(&u, k, 1, 0, u.n_chunks, PST_OFFER_TAKEN, &pub));
  CHECK(pub && s.version == 2 && u.partial_steps == 1);
  /* Joining after a step opened: dropped for that step. */
  pst_update_set_member(&u, 1, 0, &pub);
  CHECK(offer_range(&u, 0, 2, 0, 1, PST_OFFER_TAKEN, &pub));
  pst_update_set_member(&u, 1, 1, &pub);
  CHECK(offer_range(&u, 1, 2, 0, 1, PST_OFFER_DROPPED, &pub));
  teardown(&s, &o, &u);
}

/* Every worker of a step lost before any share came: the step is taken back (the optimizer's
 * step count too); one lost after a share came completes with what it has. */
static void test_sync_all_lost(void) {
  pst_store s;
  pst_optimizer o;
  pst_update u;
  setup(&s, &o, &u, PST_MODE_SYNC);
  int pub = 0;
  s.refs[s.front ^ 1] = 0;
  CHECK(pst_update_direct(&u, 0, 0, 0) != NULL && u.step_open && o.t == 1);
  for (int k = 0; k < W; k++) pst_update_set_member(&u, k, 0, &pub);
  CHECK(!pub && !u.step_open && o.t == 0 && s.version == 0);
  for (int k = 1; k < W; k++) pst_update_set_member(&u, k, 1, &pub);
  CHECK(offer_range(&u, 1, 0, 0, 2, PST_OFFER_TAKEN, &pub));
  pst_update_set_member(&u, 2, 0, &pub);
  CHECK(!pub);
  pst_update_set_member(&u, 1, 0, &pub);
  /* Chunks 0-1 had worker 1's share (scaled by 3); the rest kept their values. */
  CHECK(pub && s.version == 1);
  CHECK(pst_store_front(&s)[7] == (float)(7 % 17) * 0.1f - grads[1][7] * 3.0f);
  CHECK(pst_store_front(&s)[2 * CHUNK + 7] == (float)((2 * CHUNK + 7) % 17) * 0.1f);
  teardown(&s, &o, &u);
}

/* --on-worker-loss wait: the lost worker stays in the step, and its replacement resends the
 * whole step: chunks that already hold that slot's share are read and not summed twice. */
static void test_sync_replacement(void) {
  pst_store s;
  pst_optimizer o;
  pst_update u;
  setup(&s, &o, &u, PST_MODE_SYNC);
  int pub = 0;
  CHECK(offer_range(&u, 0, 0, 0, u.n_chunks, PST_OFFER_TAKEN, &pub));
  CHECK(offer_range(&u, 1, 0, 0, 2, PST_OFFER_TAKEN, &pub));
  CHECK(offer_range(&u, 1, 0, 0, u.n_chunks, PST_OFFER_TAKEN, &pub));
  CHECK(offer_range(&u, 2, 0, 0, u.n_chunks, PST_OFFER_TAKEN, &pub));
  CHECK(pub && s.version == 1 && u.partial_steps == 0);
  float g = grads[0][CHUNK + 3];
  g += grads[1][CHUNK + 3];
  g += grads[2][CHUNK + 3];
  CHECK(pst_store_front(&s)[CHUNK + 3] == (float)((CHUNK + 3) % 17) * 0.1f - g);
  teardown(&s, &o, &u);
}

/* An async push whose worker is lost halfway: the chunks it sent are applied, the rest of
 * the weights carried over, and the version published, so the next push can go on. */
static void test_async_owner_lost(void) {
  pst_store s;
  pst_optimizer o;
  pst_update u;
  setup(&s, &o, &u, PST_MODE_ASYNC);
  int pub = 0;
  CHECK(offer_range(&u, 1, 0, 0, 2, PST_OFFER_TAKEN, &pub));
  CHECK(pst_update_offer(&u, 2, 0, 0, pst_update_chunk_flags(&u, 0), grads[2], &pub) == PST_OFFER_LATER);
  pst_update_set_member(&u, 1, 0, &pub);
  CHECK(pub && s.version == 1 && u.owner == -1);
  CHECK(pst_store_front(&s)[3] == (float)(3 % 17) * 0.1f - 3.0f * grads[1][3]);
  CHECK(pst_store_front(&s)[2 * CHUNK + 3] == (float)((2 * CHUNK + 3) % 17) * 0.1f);
  CHECK(offer_range(&u, 2, 0, 0, u.n_chunks, PST_OFFER_TAKEN, &pub) && s.version == 2);
  teardown(&s, &o, &u);
}

/* The element-wise loops on helper threads (ps/train/par.h) give the same bits as on the loop's
 * thread alone: a sync step of 3 shares and an async push, Adam, over chunks large enough to
 * be split (a thread per PS_PAR_MIN floats), with 1, 2, 3 and 5 threads. */
#define BIG (5 * PS_PAR_MIN + 1234) /* 2 chunks of 144,384 floats and a short one (40,146) */
#define BIG_CHUNK (2 * PS_PAR_MIN + 13 * 1024)

static uint64_t big_run(pst_mode mode, int threads, float (*g)[BIG], float *out) {
  static float init[BIG];
  for (int i = 0; i < (int)BIG; i++) init[i] = (float)(i % 23) * 0.01f - 0.1f;
  pst_store s;
  pst_optimizer o;
  pst_update u;
  pst_opt_config cfg;
  pst_opt_defaults(&cfg); /* Adam */
  CHECK(pst_store_init(&s, BIG, init) == 0 && pst_opt_init(&o, &cfg, BIG) == 0);
  CHECK(pst_update_init(&u, mode, W, BIG_CHUNK, &s, &o) == 0);
  ps_par *par = NULL;
  if (threads > 1) CHECK(ps_par_create(threads, &par) == 0);
  pst_update_set_par(&u, par);
  CHECK(u.n_chunks == 3);
  int published = 0;
  for (int step = 0; step < 2; step++) {
    for (int w = 0; w < W; w++) {
      if (mode != PST_MODE_SYNC && w > 0) break; /* async: one push per step */
      for (uint32_t c = 0; c < u.n_chunks; c++) {
        int pub = 0;
        CHECK(pst_update_offer(&u, w, (uint64_t)step, c, pst_update_chunk_flags(&u, c), g[w] + (size_t)c * BIG_CHUNK, &pub) ==
              PST_OFFER_TAKEN);
        published += pub;
      }
    }
  }
  CHECK(published == 2 && s.version == 2);
  memcpy(out, pst_store_front(&s), sizeof(float) * BIG);
  uint64_t sum = pst_store_checksum(&s);
  ps_par_free(par);
  pst_update_free(&u);
  pst_opt_free(&o);
  pst_store_free(&s);
  return sum;
}

static void test_threads_same_bits(void) {
  static float g[W][BIG], one[BIG], many[BIG];
  srand(11);
  for (int w = 0; w < W; w++)
    for (int i = 0; i < (int)BIG; i++) g[w][i] = ((float)rand() / RAND_MAX - 0.5f) * 1e-2f;
  for (int m = 0; m < 2; m++) {
    pst_mode mode = m == 0 ? PST_MODE_SYNC : PST_MODE_ASYNC;
    uint64_t want = big_run(mode, 1, g, one);
    static const int counts[] = {2, 3, 5};
    for (int k = 0; k < 3; k++) {
      CHECK(big_run(mode, counts[k], g, many) == want);
      CHECK(memcmp(one, many, sizeof one) == 0);
    }
  }
}

/* ps_par_for covers [0, n) exactly once, in ranges on 16-element boundaries. */
static int *g_hits;
static int g_misaligned; /* set from the helpers: CHECK's counters are the main thread's */
static void mark(void *ctx, size_t b, size_t e) {
  (void)ctx;
  if (b % 16 != 0) __atomic_store_n(&g_misaligned, 1, __ATOMIC_RELAXED);
  for (size_t i = b; i < e; i++) __atomic_add_fetch(&g_hits[i], 1, __ATOMIC_RELAXED);
}

static void test_par_ranges(void) {
  static const size_t sizes[] = {0,          1,          17, PS_PAR_MIN - 1, PS_PAR_MIN,
                                 PS_PAR_MIN + 5, 2 * PS_PAR_MIN + 5, 1000003};
  for (int t = 1; t <= 7; t += 2) {
    ps_par *p = NULL;
    CHECK(ps_par_create(t, &p) == 0 && ps_par_threads(p) == t);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      size_t n = sizes[k];
      g_hits = calloc(n + 1, sizeof *g_hits);
      ps_par_for(p, n, mark, NULL);
      int once = 1;
      for (size_t i = 0; i < n; i++) once &= g_hits[i] == 1;
      CHECK(once && g_hits[n] == 0 && !__atomic_load_n(&g_misaligned, __ATOMIC_RELAXED));
      free(g_hits);
    }
    ps_par_free(p);
  }
}

/* Chunks of any sizes (pst_update_set_chunks: along the model's layers, issue 26): the bad
 * layouts are refused; with uneven chunks a sync step (workers in either order, pushes in
 * either direction) and an async push end with the bits of chunks of one size, since every
 * sum and pass is element-wise. */
static uint64_t uneven_step(pst_mode mode, int reverse, unsigned desc_mask) {
  static const size_t starts[] = {0, 3, 1003, 1004, 1500, 2000, 2999, 3999, 4999, 5999,
                                  6999, 7999, 8999, 9999, N};
  const size_t n = sizeof starts / sizeof starts[0] - 1;
  pst_store s;
  pst_optimizer o;
  pst_update u;
  setup(&s, &o, &u, mode);
  CHECK(pst_update_set_chunks(&u, starts, n) == 0 && u.n_chunks == n);
  CHECK(pst_update_chunk_off(&u, 2) == 1003 && pst_update_chunk_len(&u, 2) == 1);
  uint32_t next[W] = {0};
  int published = 0, rounds = 0, workers = mode == PST_MODE_SYNC ? W : 1;
  while (s.version == 0 && rounds++ < 1000) {
    for (int k = 0; k < workers; k++) {
      int w = reverse ? W - 1 - k : k;
      while (next[w] < u.n_chunks) {
        int pub = 0, desc = (desc_mask >> w) & 1;
        uint32_t c = desc ? u.n_chunks - 1 - next[w] : next[w];
        int rc = pst_update_offer(&u, w, 0, c, pst_update_chunk_flags(&u, next[w]),
                                  grads[w] + starts[c], &pub);
        CHECK(rc >= 0);
        if (rc != PST_OFFER_TAKEN) break;
        next[w]++;
        published |= pub;
      }
    }
  }
  CHECK(published && s.version == 1);
  uint64_t sum = pst_store_checksum(&s);
  teardown(&s, &o, &u);
  return sum;
}

static void test_uneven_chunks(void) {
  pst_store s;
  pst_optimizer o;
  pst_update u;
  setup(&s, &o, &u, PST_MODE_SYNC);
  const size_t over[] = {0, CHUNK + 1, N}, gap[] = {0, 0, N}, short_[] = {0, 500, N - 1},
               late[] = {1, 500, N};
  CHECK(pst_update_set_chunks(&u, over, 2) == -EINVAL);
  CHECK(pst_update_set_chunks(&u, gap, 2) == -EINVAL);
  CHECK(pst_update_set_chunks(&u, short_, 2) == -EINVAL);
  CHECK(pst_update_set_chunks(&u, late, 2) == -EINVAL);
  CHECK(u.n_chunks == (N + CHUNK - 1) / CHUNK); /* unchanged */
  int pub = 0;
  CHECK(pst_update_offer(&u, 0, 0, 0, pst_update_chunk_flags(&u, 0), grads[0], &pub) ==
        PST_OFFER_TAKEN);
  const size_t fine[] = {0, 500, 1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000,
                         N};
  CHECK(pst_update_set_chunks(&u, fine, 12) == -EINVAL); /* a step is open */
  teardown(&s, &o, &u);
  uint64_t want = run_sync_step(0);
  for (unsigned mask = 0; mask < (1u << W); mask += 3) {
    CHECK(uneven_step(PST_MODE_SYNC, 0, mask) == want);
    CHECK(uneven_step(PST_MODE_SYNC, 1, mask) == want);
  }
  /* Async: one push, either direction, as with chunks of one size. */
  setup(&s, &o, &u, PST_MODE_ASYNC);
  CHECK(offer_range(&u, 0, 0, 0, u.n_chunks, PST_OFFER_TAKEN, &pub) && pub);
  uint64_t async_want = pst_store_checksum(&s);
  teardown(&s, &o, &u);
  CHECK(uneven_step(PST_MODE_ASYNC, 0, 0) == async_want);
  CHECK(uneven_step(PST_MODE_ASYNC, 0, 1) == async_want);
}

int main(void) {
  /* Gradients that are not zero for the tests that use them as they are (test_sync_order
   * and test_model_state draw their own). */
  for (int w = 0; w < W; w++)
    for (int i = 0; i < N; i++) grads[w][i] = (float)((i * 7 + w) % 13) * 1e-3f;
  test_sync_worker_lost();
  test_sync_all_lost();
  test_sync_replacement();
  test_async_owner_lost();
  test_sync_order();
  test_uneven_chunks();
  test_push_directions();
  test_sync_waits();
  test_sync_ready_prefix();
  test_async();
  test_threads_same_bits();
  test_par_ranges();
  test_model_state();
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
