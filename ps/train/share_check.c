/* What a share may be (ps/train/update.h, "What a share may be"): the gradient limit, the
 * clip norm and the default norm rule, each checked on a chunk just before it is summed, and
 * the accepted pushes' norms the rule keeps. ps/train/update.c, which owns the step, calls
 * in here; nothing here calls it back. */
#include "ps/train/share_check.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pst_update_set_norm_factor(pst_update *u, double factor) {
  if (!(factor == 0 || (factor > 1 && factor <= 1e30))) return -EINVAL;
  u->norm_factor = factor;
  return 0;
}

/* The trained parameters of this ps's part (its model-state ranges left out). */
static size_t trained_count(const pst_update *u) {
  size_t n = u->store->n;
  for (int r = 0; r < u->opt->n_state; r++) n -= u->opt->state_end[r] - u->opt->state_off[r];
  return n;
}

/* The bound on a share's squared norm for the pushes that start now (0: none). */
double pst_norm_sq_bound(const pst_update *u) {
  if (u->norm_factor <= 0) return 0;
  if (u->norm_count < PST_NORM_WARMUP) {
    /* The warm-up's ceiling: a worker gradient of RMS PST_NORM_WARMUP_RMS, as a share (1/N). */
    double share = PST_NORM_WARMUP_RMS / (double)u->workers;
    return share * share * (double)trained_count(u);
  }
  double b = u->norm_factor * u->norm_median;
  return b * b;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Worker w's push, every chunk checked, was accepted: its norm joins the history. */
void pst_norm_note(pst_update *u, int w) {
  if (u->push_checked[w] != u->n_chunks || !(u->push_sq[w] > 0)) return;
  double norm = sqrt(u->push_sq[w]);
  if (u->norm_count < PST_NORM_WARMUP) {
    double rms = norm * (double)u->workers / sqrt((double)trained_count(u));
    if (rms > u->warm_rms_max) u->warm_rms_max = rms;
  } else if (norm / u->norm_median > u->norm_ratio_max) {
    u->norm_ratio_max = norm / u->norm_median;
  }
  u->norm_hist[u->norm_count % PST_NORM_WINDOW] = norm;
  u->norm_count++;
  uint32_t n = u->norm_count < PST_NORM_WINDOW ? u->norm_count : PST_NORM_WINDOW;
  double sorted[PST_NORM_WINDOW];
  memcpy(sorted, u->norm_hist, n * sizeof *sorted);
  qsort(sorted, n, sizeof *sorted, cmp_double);
  u->norm_median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

int pst_update_set_limits(pst_update *u, double grad_limit, double clip_norm) {
  if (!(grad_limit > 0 && grad_limit <= 1e30) || !(clip_norm >= 0 && isfinite(clip_norm)))
    return -EINVAL;
  u->grad_limit = (float)grad_limit;
  memcpy(&u->limit_bits, &u->grad_limit, sizeof u->limit_bits);
  u->clip_norm = (float)clip_norm;
  /* A worker clips its batch-mean gradient to the norm; what it pushes is that over N
   * (update.h's gradient scale). Its float arithmetic and this double sum differ by far less
   * than the slack. */
  double share = clip_norm / (double)u->workers * (1.0 + 1e-3);
  u->clip_sq = clip_norm > 0 ? share * share : 0;
  return 0;
}

/* The largest |x| of the chunk, as its float's bits (the sign cleared): for non-negative
 * floats the bits order as the values do, and a NaN's or an infinity's are above any finite
 * value's, so one integer max per value, which GCC vectorises, checks both the limit and
 * finiteness. */
static uint32_t max_abs_bits(const float *x, size_t n) {
  uint32_t m = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t b;
    memcpy(&b, &x[i], sizeof b);
    b &= 0x7fffffffu;
    m = b > m ? b : m;
  }
  return m;
}

/* The sum of x[i]^2 in double, over eight partial sums that the compiler can keep in vector
 * registers (a single running sum is a chain of dependent additions it may not reorder):
 * the norm rule runs this over every pushed value by default, so it must cost little. */
static double sum_sq(const float *x, size_t n) {
  double p[8] = {0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; k++) p[k] += (double)x[i + k] * (double)x[i + k];
  double sq = 0;
  for (; i < n; i++) sq += (double)x[i] * (double)x[i];
  for (int k = 0; k < 8; k++) sq += p[k];
  return sq;
}

/* The squared norm of chunk c's share over the trained parameters (the optimizer's
 * model-state ranges left out). */
static double trained_sq(const pst_update *u, uint32_t c, const float *x, uint32_t len) {
  size_t off = u->chunk_off[c], end = off + len, at = off;
  const pst_optimizer *o = u->opt;
  double sq = 0;
  for (int r = 0; at < end; r++) {
    /* [at, stop) is trained: up to state range r, or to the chunk's end past the last. */
    size_t stop = end;
    if (r < o->n_state) {
      if (o->state_end[r] <= at) continue;
      if (o->state_off[r] < stop) stop = o->state_off[r] > at ? o->state_off[r] : at;
    }
    if (stop > at) sq += sum_sq(x + (at - off), stop - at);
    if (r >= o->n_state) break;
    at = o->state_end[r] < end ? o->state_end[r] : end; /* past the state range */
  }
  return sq;
}

/* Whether worker w's chunk c may be summed (update.h's rules); reject_why says why not. Run
 * once per chunk, just before it is summed, while it is still in cache from the socket. */
int pst_share_ok(pst_update *u, int w, uint32_t c, const float *x, uint32_t len) {
  uint32_t m = max_abs_bits(x, len);
  if (m > u->limit_bits) {
    float v;
    memcpy(&v, &m, sizeof v);
    if (m >= 0x7f800000u)
      snprintf(u->reject_why, sizeof u->reject_why,
               "non-finite values (NaN or infinity) in a gradient chunk");
    else
      snprintf(u->reject_why, sizeof u->reject_why,
               "a gradient value of magnitude %g, over the limit of %g (--grad-limit)", v,
               u->grad_limit);
    return 0;
  }
  if (u->clip_sq > 0 || u->norm_factor > 0) {
    u->push_sq[w] += trained_sq(u, c, x, len);
    if (u->clip_sq > 0 && u->push_sq[w] > u->clip_sq) {
      snprintf(u->reject_why, sizeof u->reject_why,
               "a gradient of norm %g or more, over --clip-norm %g",
               sqrt(u->push_sq[w]) * (double)u->workers, u->clip_norm);
      return 0;
    }
    /* The bound was fixed when the push began (pst_update_offer), so that the median moving
     * mid-push (another worker's push accepted) does not change it. */
    if (u->norm_factor > 0 && u->push_sq[w] > u->push_bound[w]) {
      u->norm_rejected++;
      if (u->norm_count < PST_NORM_WARMUP)
        snprintf(u->reject_why, sizeof u->reject_why,
                 "a gradient of RMS %g or more per parameter, over %g during the warm-up "
                 "(--grad-norm-factor)", sqrt(u->push_sq[w] / (double)trained_count(u)) *
                 (double)u->workers, PST_NORM_WARMUP_RMS);
      else
        snprintf(u->reject_why, sizeof u->reject_why,
                 "a gradient of norm %g or more, over %g times the running median %g "
                 "(--grad-norm-factor)", sqrt(u->push_sq[w]) * (double)u->workers,
                 u->norm_factor, u->norm_median * (double)u->workers);
      return 0;
    }
  }
  u->push_checked[w]++;
  return 1;
}

int pst_update_check_limits(double grad_limit, double clip_norm, char *err, size_t errlen) {
  if (!(grad_limit > 0 && grad_limit <= 1e30) || !(clip_norm >= 0 && clip_norm <= 1e30)) {
    snprintf(err, errlen, "--grad-limit must be in (0, 1e30] and --clip-norm in [0, 1e30]");
    return -EINVAL;
  }
  return 0;
}
