/* Tests for ps/train/optim.c: known values, a double-precision reference, and the guarantee that
 * range-by-range and in-place application give the same bits as one whole-vector update. */
#include "common/fpenv.h"
#include "ps/train/optim.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/check.h"

static int close_to(double got, double want) {
  return fabs(got - want) <= 1e-6 * fabs(want) + 1e-7;
}

static pst_opt_config make_cfg(pst_opt_kind kind, float lr, float wd) {
  pst_opt_config c;
  pst_opt_defaults(&c);
  c.kind = kind;
  c.lr = lr;
  c.weight_decay = wd;
  return c;
}

static void test_basics(void) {
  pst_opt_config c;
  pst_opt_defaults(&c);
  CHECK(c.kind == PST_OPT_ADAM && c.lr == 1e-3f && c.momentum == 0.9f && c.beta1 == 0.9f &&
        c.beta2 == 0.999f && c.eps == 1e-8f && c.weight_decay == 0.0f);
  pst_opt_kind k = PST_OPT_ADAM;
  CHECK(pst_opt_kind_parse("sgd", &k) == 0 && k == PST_OPT_SGD);
  CHECK(pst_opt_kind_parse("momentum", &k) == 0 && k == PST_OPT_MOMENTUM);
  CHECK(pst_opt_kind_parse("adam", &k) == 0 && k == PST_OPT_ADAM);
  CHECK(pst_opt_kind_parse("Adam", &k) == -EINVAL);
  CHECK(pst_opt_kind_parse("", &k) == -EINVAL);
  CHECK(pst_opt_kind_parse(NULL, &k) == -EINVAL);
  CHECK(strcmp(pst_opt_kind_name(PST_OPT_SGD), "sgd") == 0);
  CHECK(strcmp(pst_opt_kind_name(PST_OPT_MOMENTUM), "momentum") == 0);
  CHECK(strcmp(pst_opt_kind_name(PST_OPT_ADAM), "adam") == 0);
  CHECK(pst_opt_slots(PST_OPT_SGD) == 0 && pst_opt_slots(PST_OPT_MOMENTUM) == 1 &&
        pst_opt_slots(PST_OPT_ADAM) == 2);

  pst_optimizer o;
  CHECK(pst_opt_init(&o, &c, 1000) == 0);
  int zero = o.slot1[0] != NULL && o.slot2[0] != NULL && o.slot1[1] != NULL &&
             o.slot2[1] != NULL && o.t == 0;
  for (size_t i = 0; zero && i < 1000; i++)
    zero = o.slot1[0][i] == 0.0f && o.slot2[0][i] == 0.0f && o.slot1[1][i] == 0.0f &&
           o.slot2[1][i] == 0.0f;
  CHECK(zero);
  pst_opt_begin_step(&o);
  CHECK(o.t == 1 && o.bc1 == (float)(1.0 - (double)0.9f) && o.bc2 == (float)(1.0 - (double)0.999f));
  pst_opt_begin_step(&o);
  CHECK(o.t == 2 && close_to(o.bc1, 0.19) && close_to(o.bc2, 1.0 - 0.999 * 0.999));
  pst_opt_free(&o);
  CHECK(o.slot1[0] == NULL && o.slot2[0] == NULL);
  pst_opt_free(&o); /* twice is harmless */

  c.kind = PST_OPT_SGD;
  CHECK(pst_opt_init(&o, &c, 10) == 0 && o.slot1[0] == NULL && o.slot2[0] == NULL);
  pst_opt_free(&o);
  c.kind = PST_OPT_MOMENTUM;
  CHECK(pst_opt_init(&o, &c, 10) == 0 && o.slot1[0] != NULL && o.slot2[0] == NULL);
  pst_opt_free(&o);
  CHECK(pst_opt_init(&o, &c, 0) == 0);
  pst_opt_free(&o);
  CHECK(pst_opt_init(&o, &c, SIZE_MAX / 2) == -ENOMEM && o.slot1[0] == NULL);
  c.kind = (pst_opt_kind)7;
  CHECK(pst_opt_init(&o, &c, 10) == -EINVAL);
}

/* Three steps on four weights, against values worked out in double precision (the first
 * step by hand: SGD moves w by lr * g, Adam by lr * sign(g)). The gradients are passed
 * doubled with gscale 0.5, which is exact. */
static void test_known_values(void) {
  static const float w0[4] = {1.0f, -0.5f, 0.25f, 2.0f};
  static const float grads[3][4] = {
      {0.1f, -0.2f, 0.3f, 0.0f}, {0.05f, 0.1f, -0.3f, 1.0f}, {-0.2f, 0.0f, 0.1f, 0.5f}};
  struct {
    pst_opt_kind kind;
    float lr, wd;
    double want[3][4];
  } cases[] = {
      {PST_OPT_SGD, 0.1f, 0.0f,
       {{0.99, -0.48, 0.22, 2}, {0.985, -0.49, 0.25, 1.9}, {1.005, -0.49, 0.24, 1.85}}},
      {PST_OPT_SGD, 0.1f, 0.01f,
       {{0.989, -0.4795, 0.21975, 1.998},
        {0.983011, -0.4890205, 0.24953025, 1.896002},
        {1.00202799, -0.488531479, 0.23928072, 1.844106}}},
      {PST_OPT_MOMENTUM, 0.1f, 0.0f,
       {{0.99, -0.48, 0.22, 2}, {0.976, -0.472, 0.223, 1.9}, {0.9834, -0.4648, 0.2157, 1.76}}},
      {PST_OPT_MOMENTUM, 0.1f, 0.01f,
       {{0.989, -0.4795, 0.21975, 1.998},
        {0.973111, -0.4705705, 0.22230525, 1.894202},
        {0.977837789, -0.462063379, 0.21438267, 1.7488896}}},
      {PST_OPT_ADAM, 0.01f, 0.0f,
       {{0.990000001, -0.49, 0.24, 2},
        {0.980678206, -0.48733663, 0.240526316, 1.99255863},
        {0.982741776, -0.485277837, 0.239455712, 1.98455622}}},
      {PST_OPT_ADAM, 0.01f, 0.1f,
       {{0.99, -0.49, 0.24, 1.99},
        {0.980180494, -0.484922888, 0.239711952, 1.98155802},
        {0.975575028, -0.479873539, 0.23771335, 1.97271719}}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    pst_opt_config c = make_cfg(cases[k].kind, cases[k].lr, cases[k].wd);
    pst_optimizer o;
    CHECK(pst_opt_init(&o, &c, 4) == 0);
    float w[4];
    memcpy(w, w0, sizeof w);
    int ok = 1;
    for (int s = 0; s < 3; s++) {
      float g2[4];
      for (int i = 0; i < 4; i++) g2[i] = 2.0f * grads[s][i];
      pst_opt_begin_step(&o);
      pst_opt_apply(&o, w, w, g2, 0.5f, 0, 4);
      for (int i = 0; i < 4; i++) {
        if (!close_to(w[i], cases[k].want[s][i])) {
          fprintf(stderr, "  %s wd=%g step %d w[%d] = %.9g, want %.9g\n",
                  pst_opt_kind_name(cases[k].kind), cases[k].wd, s + 1, i, w[i],
                  cases[k].want[s][i]);
          ok = 0;
        }
      }
    }
    CHECK(ok);
    pst_opt_free(&o);
  }
}

/* A deterministic pseudo-random float in [-1, 1). */
static float frand(uint64_t *state) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(*state >> 40) / (double)(1ull << 23) - 1.0);
}

/* Many steps on many weights against the formulas of optim.h evaluated in double. */
static void test_reference(void) {
  enum { N = 1000, STEPS = 25 };
  static float w[N], g[N];
  static double rw[N], rm[N], rv[N];
  for (int kind = PST_OPT_SGD; kind <= PST_OPT_ADAM; kind++) {
    pst_opt_config c = make_cfg((pst_opt_kind)kind, kind == PST_OPT_ADAM ? 1e-3f : 0.05f, 1e-2f);
    pst_optimizer o;
    CHECK(pst_opt_init(&o, &c, N) == 0);
    uint64_t seed = 12345 + (uint64_t)kind;
    for (int i = 0; i < N; i++) rw[i] = w[i] = frand(&seed);
    memset(rm, 0, sizeof rm);
    memset(rv, 0, sizeof rv);
    double worst = 0;
    for (int t = 1; t <= STEPS; t++) {
      for (int i = 0; i < N; i++) g[i] = frand(&seed) * (i % 3 == 0 ? 1e-3f : 1.0f);
      pst_opt_begin_step(&o);
      pst_opt_apply(&o, w, w, g, 0.25f, 0, N);
      double b1 = c.beta1, b2 = c.beta2;
      for (int i = 0; i < N; i++) {
        double gi = (double)g[i] * 0.25 + (double)c.weight_decay * rw[i];
        if (kind == PST_OPT_SGD) {
          rw[i] -= (double)c.lr * gi;
        } else if (kind == PST_OPT_MOMENTUM) {
          rm[i] = (double)c.momentum * rm[i] + gi;
          rw[i] -= (double)c.lr * rm[i];
        } else {
          rm[i] = b1 * rm[i] + (1 - b1) * gi;
          rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
          rw[i] -= (double)c.lr * (rm[i] / (1 - pow(b1, t))) /
                   (sqrt(rv[i] / (1 - pow(b2, t))) + (double)c.eps);
        }
        double e = fabs((double)w[i] - rw[i]);
        if (e > worst) worst = e;
      }
    }
    printf("%s: worst |float - double| after %d steps: %.3g\n",
           pst_opt_kind_name((pst_opt_kind)kind), STEPS, worst);
    CHECK(worst < 2e-6);
    pst_opt_free(&o);
  }
}

/* Range by range (chunks of awkward sizes, in reverse order), in place and out of place, all
 * equal to one whole-vector in-place update, bit for bit, over several steps. */
static void test_ranges_bitwise(void) {
  enum { N = 4099, STEPS = 6 };
  static const size_t chunk_sizes[] = {1, 3, 7, 8, 13, 64, 1000, N};
  /* With model-state ranges too, which cut the chunks at other places. */
  static const size_t st_off[] = {0, 5, 1000, 4090}, st_cnt[] = {2, 12, 33, 9};
  for (int with_state = 0; with_state < 2; with_state++)
  for (int kind = PST_OPT_SGD; kind <= PST_OPT_ADAM; kind++) {
    pst_opt_config c = make_cfg((pst_opt_kind)kind, 0.01f, 1e-3f);
    for (size_t cs = 0; cs < sizeof chunk_sizes / sizeof chunk_sizes[0]; cs++) {
      size_t chunk = chunk_sizes[cs];
      pst_optimizer whole, inpl, oop;
      CHECK(pst_opt_init(&whole, &c, N) == 0);
      CHECK(pst_opt_init(&inpl, &c, N) == 0);
      CHECK(pst_opt_init(&oop, &c, N) == 0);
      if (with_state) {
        CHECK(pst_opt_set_state(&whole, st_off, st_cnt, 4) == 0);
        CHECK(pst_opt_set_state(&inpl, st_off, st_cnt, 4) == 0);
        CHECK(pst_opt_set_state(&oop, st_off, st_cnt, 4) == 0);
      }
      float *ww = malloc(N * sizeof(float)), *wi = malloc(N * sizeof(float));
      /* Out of place alternates between two buffers, the ps's double buffering. */
      float *wa = malloc(N * sizeof(float)), *wb = malloc(N * sizeof(float));
      float *g = malloc(N * sizeof(float));
      uint64_t seed = 99;
      for (int i = 0; i < N; i++) ww[i] = wi[i] = wa[i] = wb[i] = frand(&seed);
      float first = ww[0];
      for (int s = 0; s < STEPS; s++) {
        for (int i = 0; i < N; i++) g[i] = frand(&seed);
        pst_opt_begin_step(&whole);
        pst_opt_begin_step(&inpl);
        pst_opt_begin_step(&oop);
        pst_opt_apply(&whole, ww, ww, g, 0.5f, 0, N);
        size_t nchunks = (N + chunk - 1) / chunk;
        for (size_t k = nchunks; k-- > 0;) {
          size_t off = k * chunk, cnt = off + chunk > N ? N - off : chunk;
          pst_opt_apply(&inpl, wi, wi, g + off, 0.5f, off, cnt);
          pst_opt_apply(&oop, wa, wb, g + off, 0.5f, off, cnt);
        }
        float *t = wa;
        wa = wb;
        wb = t;
      }
      int same = memcmp(ww, wi, N * sizeof(float)) == 0 && memcmp(ww, wa, N * sizeof(float)) == 0;
      if (kind != PST_OPT_SGD)
        same = same && memcmp(whole.slot1[whole.t & 1], inpl.slot1[inpl.t & 1], N * sizeof(float)) == 0 &&
               memcmp(whole.slot1[whole.t & 1], oop.slot1[oop.t & 1], N * sizeof(float)) == 0;
      if (kind == PST_OPT_ADAM)
        same = same && memcmp(whole.slot2[whole.t & 1], inpl.slot2[inpl.t & 1], N * sizeof(float)) == 0 &&
               memcmp(whole.slot2[whole.t & 1], oop.slot2[oop.t & 1], N * sizeof(float)) == 0;
      if (!same) fprintf(stderr, "  %s chunk %zu differs\n", pst_opt_kind_name(c.kind), chunk);
      CHECK(same);
      /* The weights did move. */
      CHECK(ww[0] != first);
      free(ww);
      free(wi);
      free(wa);
      free(wb);
      free(g);
      pst_opt_free(&whole);
      pst_opt_free(&inpl);
      pst_opt_free(&oop);
    }
  }
}

/* Model-state ranges: the pushed value is added, scaled, with no learning rate, weight
 * decay or optimizer state; the other entries get exactly the optimizer's update. */
static void test_state_ranges(void) {
  enum { N = 100 };
  for (int kind = PST_OPT_SGD; kind <= PST_OPT_ADAM; kind++) {
    pst_opt_config c = make_cfg((pst_opt_kind)kind, 0.1f, 0.5f);
    pst_optimizer plain, st;
    CHECK(pst_opt_init(&plain, &c, N) == 0 && pst_opt_init(&st, &c, N) == 0);
    size_t off[2] = {10, 90}, cnt[2] = {20, 50}; /* the second clipped to [90, 100) */
    CHECK(pst_opt_set_state(&st, off, cnt, 2) == 0 && st.n_state == 2 && st.state_end[1] == N);
    float wp[N], ws[N], before[N], g[N];
    uint64_t seed = 5;
    for (int i = 0; i < N; i++) wp[i] = ws[i] = frand(&seed);
    for (int step = 0; step < 3; step++) {
      for (int i = 0; i < N; i++) g[i] = frand(&seed);
      memcpy(before, ws, sizeof ws);
      pst_opt_begin_step(&plain);
      pst_opt_begin_step(&st);
      pst_opt_apply(&plain, wp, wp, g, 0.25f, 0, N);
      pst_opt_apply(&st, ws, ws, g, 0.25f, 0, N);
      int ok = 1;
      for (int i = 0; i < N; i++) {
        int state = (i >= 10 && i < 30) || i >= 90;
        ok &= state ? ws[i] == before[i] + g[i] * 0.25f : ws[i] == wp[i];
        if (state && st.slot1[0]) ok &= st.slot1[st.t & 1][i] == 0.0f;
        if (state && st.slot2[0]) ok &= st.slot2[st.t & 1][i] == 0.0f;
      }
      CHECK(ok);
    }
    pst_opt_free(&plain);
    pst_opt_free(&st);
  }
  pst_opt_config c = make_cfg(PST_OPT_SGD, 0.1f, 0.0f);
  pst_optimizer o;
  CHECK(pst_opt_init(&o, &c, 10) == 0);
  size_t off[2] = {4, 2}, cnt[2] = {2, 1};
  CHECK(pst_opt_set_state(&o, off, cnt, 2) == -EINVAL); /* unsorted */
  off[1] = 5;
  CHECK(pst_opt_set_state(&o, off, cnt, 2) == -EINVAL); /* overlapping */
  CHECK(pst_opt_set_state(&o, off, cnt, PST_OPT_MAX_STATE + 1) == -EINVAL);
  CHECK(pst_opt_set_state(&o, off, cnt, 1) == 0 && o.n_state == 1);
  CHECK(pst_opt_set_state(&o, off, cnt, 0) == 0 && o.n_state == 0);
  pst_opt_free(&o);
}

/* A range past the end is clipped to the vector instead of writing out of bounds. */
static void test_clipping(void) {
  pst_opt_config c = make_cfg(PST_OPT_SGD, 1.0f, 0.0f);
  pst_optimizer o;
  CHECK(pst_opt_init(&o, &c, 4) == 0);
  float w[6] = {0, 0, 0, 0, 42, 42}, g[6] = {1, 1, 1, 1, 1, 1};
  pst_opt_begin_step(&o);
  pst_opt_apply(&o, w, w, g, 1.0f, 2, 4);
  CHECK(w[0] == 0 && w[1] == 0 && w[2] == -1 && w[3] == -1 && w[4] == 42 && w[5] == 42);
  pst_opt_apply(&o, w, w, g, 1.0f, 4, 1);
  pst_opt_apply(&o, w, w, g, 1.0f, SIZE_MAX, SIZE_MAX);
  CHECK(w[4] == 42);
  pst_opt_free(&o);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Throughput, for information: the ps applies one step per round. */
static void bench(void) {
  enum { N = 4 << 20, REPS = 5 };
  float *w = aligned_alloc(64, N * sizeof(float)), *g = aligned_alloc(64, N * sizeof(float));
  uint64_t seed = 5;
  for (int i = 0; i < N; i++) w[i] = frand(&seed), g[i] = frand(&seed);
  for (int kind = PST_OPT_SGD; kind <= PST_OPT_ADAM; kind++) {
    pst_opt_config c = make_cfg((pst_opt_kind)kind, 1e-4f, 0.0f);
    pst_optimizer o;
    if (pst_opt_init(&o, &c, N) != 0) continue;
    pst_opt_begin_step(&o);
    pst_opt_apply(&o, w, w, g, 1.0f, 0, N); /* faults the pages in */
    double t0 = now_s();
    for (int r = 0; r < REPS; r++) {
      pst_opt_begin_step(&o);
      pst_opt_apply(&o, w, w, g, 1.0f, 0, N);
    }
    double dt = (now_s() - t0) / REPS;
    printf("%s: %.2f ms per step of %d parameters (%.2f ns/parameter)\n",
           pst_opt_kind_name(c.kind), dt * 1e3, N, dt * 1e9 / N);
    pst_opt_free(&o);
  }
  free(w);
  free(g);
}

/* A half-applied step leaves the state before it whole (pst_opt_state), and that state,
 * restored into a fresh optimizer, goes on to the same bits as the run that never stopped:
 * what a checkpoint taken mid-step and a resumed ps rely on. */
static void test_state_restore(void) {
  enum { N = 333, STEPS = 7, CUT = 4 };
  for (int kind = PST_OPT_SGD; kind <= PST_OPT_ADAM; kind++) {
    pst_opt_config c = make_cfg((pst_opt_kind)kind, 0.01f, 1e-3f);
    pst_optimizer a, b;
    CHECK(pst_opt_init(&a, &c, N) == 0 && pst_opt_init(&b, &c, N) == 0);
    static float wa[2][N], wb[2][N], g[N], keep1[N], keep2[N], keepw[N];
    uint64_t seed = 99 + (uint64_t)kind, t_saved = 0;
    for (int i = 0; i < N; i++) wa[0][i] = frand(&seed);
    int cur = 0;
    for (int t = 1; t <= STEPS; t++) {
      for (int i = 0; i < N; i++) g[i] = frand(&seed);
      pst_opt_begin_step(&a);
      pst_opt_apply(&a, wa[cur], wa[cur ^ 1], g, 0.5f, 0, N / 2); /* half the step */
      if (t == CUT) {
        const float *s1, *s2;
        pst_opt_state(&a, 1, &t_saved, &s1, &s2);
        CHECK(t_saved == (uint64_t)(t - 1));
        if (s1) memcpy(keep1, s1, sizeof keep1);
        if (s2) memcpy(keep2, s2, sizeof keep2);
        memcpy(keepw, wa[cur], sizeof keepw);
      }
      pst_opt_apply(&a, wa[cur], wa[cur ^ 1], g + N / 2, 0.5f, N / 2, N - N / 2);
      cur ^= 1;
    }
    /* Replay from the saved state with the same gradients. */
    pst_opt_restore(&b, t_saved, kind >= PST_OPT_MOMENTUM ? keep1 : NULL,
                    kind == PST_OPT_ADAM ? keep2 : NULL);
    memcpy(wb[0], keepw, sizeof keepw);
    seed = 99 + (uint64_t)kind;
    for (int i = 0; i < N; i++) (void)frand(&seed);
    int bc = 0;
    for (int t = 1; t <= STEPS; t++) {
      for (int i = 0; i < N; i++) g[i] = frand(&seed);
      if (t < CUT) continue;
      pst_opt_begin_step(&b);
      pst_opt_apply(&b, wb[bc], wb[bc ^ 1], g, 0.5f, 0, N);
      bc ^= 1;
    }
    CHECK(b.t == a.t && memcmp(wa[cur], wb[bc], sizeof wa[0]) == 0);
    pst_opt_free(&a);
    pst_opt_free(&b);
  }
}

/* By its bits: with DAZ on, a comparison reads a denormal as zero. */
static int is_denormal(float v) {
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  return (u & 0x7f800000u) == 0 && (u & 0x007fffffu) != 0;
}

static int count_denormals(const float *p, size_t n) {
  int k = 0;
  for (size_t i = 0; p && i < n; i++) k += is_denormal(p[i]);
  return k;
}

/* With denormals flushed (common/fpenv.h, as the ps runs), a step leaves none in the weights
 * or the state, whether they were planted there (DAZ reads them as zero) or a step would make
 * them from small normal values (FTZ), for every optimizer. Planted: every other parameter
 * has a zero gradient and denormal weights and state; the rest start at 1.2e-38, which the
 * decay by beta1, beta2 or momentum takes below FLT_MIN. */
static void test_denormals_flushed(void) {
  enum { N = 96 };
  CHECK(pst_fp_flush_denormals() == 0 && pst_fp_flushing());
  for (int kind = PST_OPT_SGD; kind <= PST_OPT_ADAM; kind++) {
    pst_opt_config c = make_cfg((pst_opt_kind)kind, 1e-3f, 1e-4f);
    pst_optimizer o;
    CHECK(pst_opt_init(&o, &c, N) == 0);
    static float w[2][N], g[N], plant[N];
    for (int i = 0; i < N; i++) {
      plant[i] = (i & 1) ? 1e-39f : 1.2e-38f;
      w[0][i] = (i & 1) ? 1e-40f : 0.5f;
      g[i] = 0.0f;
    }
    int planted = count_denormals(plant, N) + count_denormals(w[0], N);
    CHECK(planted == N); /* the constants really are denormal */
    for (int b = 0; b < 2; b++) {
      if (o.slot1[b]) memcpy(o.slot1[b], plant, sizeof plant);
      if (o.slot2[b]) memcpy(o.slot2[b], plant, sizeof plant);
    }
    int cur = 0;
    for (int t = 0; t < 3; t++) {
      pst_opt_begin_step(&o);
      pst_opt_apply(&o, w[cur], w[cur ^ 1], g, 1.0f, 0, N);
      cur ^= 1;
      /* The state the step wrote (the other buffer still holds the one before it). */
      uint64_t done;
      const float *s1, *s2;
      pst_opt_state(&o, 0, &done, &s1, &s2);
      int left = count_denormals(w[cur], N) + count_denormals(s1, N) + count_denormals(s2, N);
      if (left)
        fprintf(stderr, "%s: %d denormals after step %d\n", pst_opt_kind_name(c.kind), left,
                t + 1);
      CHECK(left == 0);
    }
    pst_opt_free(&o);
  }
}

/* A step's learning rate scaled (pst_opt_begin_step_lr, the staleness-aware learning rate):
 * for every optimizer the step is the one of a learning rate that much smaller, bit for bit,
 * the model state's changes unscaled; a scale of 1 is pst_opt_begin_step; a cancelled step's
 * scale does not outlive it. */
static void test_lr_scale(void) {
  enum { M = 37 };
  float w0[M], g[M], a[M], b[M];
  for (int i = 0; i < M; i++) {
    w0[i] = 0.1f * (float)(i % 7) - 0.3f;
    g[i] = 0.01f * (float)((i * 5) % 11) - 0.05f;
  }
  const size_t st_off[1] = {30}, st_n[1] = {4};
  for (int k = PST_OPT_SGD; k <= PST_OPT_ADAM; k++) {
    pst_optimizer o1, o2;
    pst_opt_config c1 = make_cfg((pst_opt_kind)k, 0.01f, 0.001f), c2 = c1;
    c2.lr = c1.lr * 0.25f;
    CHECK(pst_opt_init(&o1, &c1, M) == 0 && pst_opt_init(&o2, &c2, M) == 0);
    CHECK(pst_opt_set_state(&o1, st_off, st_n, 1) == 0 && pst_opt_set_state(&o2, st_off, st_n, 1) == 0);
    for (int step = 0; step < 3; step++) {
      pst_opt_begin_step_lr(&o1, 0.25f);
      pst_opt_begin_step(&o2);
      pst_opt_apply(&o1, w0, a, g, 1.0f, 0, M);
      pst_opt_apply(&o2, w0, b, g, 1.0f, 0, M);
      CHECK(memcmp(a, b, sizeof a) == 0);
      /* The state's change is added as it is (w += g). */
      CHECK(a[31] == w0[31] + g[31]);
      memcpy(w0, a, sizeof w0);
    }
    pst_opt_begin_step_lr(&o1, 0.5f);
    pst_opt_cancel_step(&o1);
    CHECK(o1.lr_scale == 1.0f);
    pst_opt_free(&o1);
    pst_opt_free(&o2);
  }
}

int main(void) {
  test_lr_scale();
  test_basics();
  test_state_restore();
  test_known_values();
  test_reference();
  test_ranges_bitwise();
  test_state_ranges();
  test_clipping();
  test_denormals_flushed();
  bench();
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
