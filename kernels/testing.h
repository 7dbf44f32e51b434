/* Small helpers shared by the kernels tests: checks with a pass/fail tally, seeded
 * random fills and a finite-difference gradient checker. Header-only, test use only. */
#ifndef PSTRAIN_KERNELS_TESTING_H
#define PSTRAIN_KERNELS_TESTING_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int t_passed, t_failed;

#define CHECK(cond)                                                             \
  do {                                                                          \
    if (cond) {                                                                 \
      t_passed++;                                                               \
    } else {                                                                    \
      t_failed++;                                                               \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                           \
  } while (0)

/* Prints the summary line and gives the exit status. */
static inline int t_summary(void) {
  printf("%d passed, %d failed\n", t_passed, t_failed);
  return t_failed == 0 ? 0 : 1;
}

static inline uint64_t t_rand64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static inline double t_uniform(uint64_t *s, double lo, double hi) {
  return lo + (hi - lo) * ((double)(t_rand64(s) >> 11) * (1.0 / 9007199254740992.0));
}

static inline void t_fill(float *p, size_t n, uint64_t seed, double lo, double hi) {
  uint64_t s = seed;
  for (size_t i = 0; i < n; i++) p[i] = (float)t_uniform(&s, lo, hi);
}

/* Values at least 0.05 away from zero, for ReLU inputs whose kink must not be crossed
 * by a finite-difference step. */
static inline void t_fill_away_from_zero(float *p, size_t n, uint64_t seed) {
  uint64_t s = seed;
  for (size_t i = 0; i < n; i++) {
    double v = t_uniform(&s, 0.05, 1.0);
    p[i] = (float)(t_rand64(&s) & 1 ? v : -v);
  }
}

static inline int t_close(double a, double b, double rtol, double atol) {
  return fabs(a - b) <= atol + rtol * fmax(fabs(a), fabs(b));
}

/* Checks analytic gradients g[n] of loss(ctx) with respect to p[n] by central
 * differences. A mismatch at eps = 1e-2 is retried at 1e-3 and 1e-4, so that a step
 * which happens to cross a ReLU or max kink does not fail the check (float arithmetic
 * rules out much smaller steps). Returns the number of entries that fail all three. */
static inline int t_gradcheck(const char *what, float *p, const float *g, size_t n,
                              double (*loss)(void *ctx), void *ctx) {
  static const double eps[3] = {1e-2, 1e-3, 1e-4};
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    float saved = p[i];
    double num = 0.0;
    int ok = 0;
    for (int e = 0; e < 3 && !ok; e++) {
      p[i] = (float)(saved + eps[e]);
      double lp = loss(ctx);
      p[i] = (float)(saved - eps[e]);
      double lm = loss(ctx);
      p[i] = saved;
      double h = (double)(float)(saved + eps[e]) - (double)(float)(saved - eps[e]);
      num = (lp - lm) / h;
      ok = t_close(num, g[i], 2e-2, 2e-3);
    }
    if (!ok) {
      if (bad < 5)
        fprintf(stderr, "  %s[%zu]: analytic %.6g, numeric %.6g\n", what, i, (double)g[i], num);
      bad++;
    }
  }
  return bad;
}

#endif
