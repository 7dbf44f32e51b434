/* Stage plans (plan.h): --stages balanced, and the memory figures (--place is parsed in
 * flags.c). */
#include "kernels/pipeline/plan.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/net_stage.h"

/* The CPU backend's scratch for a convolution (kernels/cpu_conv.c: a chunk of samples'
 * im2col columns of about 128 Ki floats, its gradient, the augmented weights; each grown
 * by half again) and depthwise filters, at `rows` samples: the largest of the stage's. */
static size_t workspace_bytes(const pst_model *m, int lo, int hi, int rows) {
  size_t most = 0;
  for (int i = lo; i < hi; i++) {
    const pst_layer *L = &m->layers[i];
    size_t floats = 0;
    if (L->kind == PST_LAYER_CONV2D) {
      size_t K = (size_t)L->k_h * L->k_w * L->in_c, ld = K + 1;
      size_t pix = (size_t)L->out_h * L->out_w, per = pix * ld;
      size_t nb = per >= 128 * 1024 ? 1 : 128 * 1024 / per;
      if (nb > (size_t)rows) nb = (size_t)rows;
      floats = nb * pix * ld + nb * pix * K + (size_t)L->out_c * ld;
    } else if (L->kind == PST_LAYER_DEPTHWISE_CONV2D) {
      floats = 2 * (size_t)L->k_h * L->k_w * L->out_c;
    }
    floats += floats / 2;
    if (floats * sizeof(float) > most) most = floats * sizeof(float);
  }
  return most;
}

int pst_plan_stage_need(const pst_model *m, int lo, int hi, int max_batch, int slots, int host_memory,
                  pst_plan_need *need) {
  pst_stage_need n;
  int rc = pst_net_stage_need(m, lo, hi, max_batch, slots, host_memory, &n);
  if (rc != 0) return rc;
  need->weights = n.weights;
  need->gradients = n.gradients;
  need->activations = n.activations;
  need->workspace = workspace_bytes(m, lo, hi, (max_batch + slots - 1) / slots);
  need->total = n.total + need->workspace;
  return 0;
}

int pst_plan_balance(const pst_model *m, const double *cost, int n, size_t cap, int max_batch,
                     int slots, int host_memory, pst_stage_plan *plan) {
  int L = m->n_layers - 1; /* layers 1 .. L */
  if (n < 1 || n > L || n > PST_PIPE_MAX_STAGES) return -EINVAL;
  /* Prefix sums of the cost; fits[a][b]: layers [a, b) fit one device. */
  double *pre = calloc((size_t)L + 2, sizeof *pre);
  unsigned char *fits = calloc((size_t)(L + 2) * (L + 2), 1);
  /* best[k][b]: the least slowest stage cutting layers [1, b) into k stages; cut[k][b] where
   * the last of them starts. */
  double *best = malloc(sizeof(double) * (size_t)(n + 1) * (L + 2));
  int *cut = malloc(sizeof(int) * (size_t)(n + 1) * (L + 2));
  int rc = pre && fits && best && cut ? 0 : -ENOMEM;
  for (int i = 1; rc == 0 && i <= L; i++) pre[i + 1] = pre[i] + (cost ? cost[i] : 1.0);
  for (int a = 1; rc == 0 && a <= L; a++)
    for (int b = a + 1; b <= L + 1; b++) {
      pst_plan_need need;
      if (cap == 0) {
        fits[a * (L + 2) + b] = 1;
        continue;
      }
      rc = pst_plan_stage_need(m, a, b, max_batch, slots, host_memory, &need);
      if (rc != 0) break;
      fits[a * (L + 2) + b] = need.total <= cap;
      if (!fits[a * (L + 2) + b]) break; /* longer ranges from a need more */
    }
  const double inf = 1e300;
#define BEST(k, b) best[(size_t)(k) * (L + 2) + (b)]
#define CUT(k, b) cut[(size_t)(k) * (L + 2) + (b)]
  for (int k = 0; rc == 0 && k <= n; k++)
    for (int b = 0; b <= L + 1; b++) BEST(k, b) = inf;
  if (rc == 0) BEST(0, 1) = 0.0;
  for (int k = 1; rc == 0 && k <= n; k++)
    for (int b = k + 1; b <= L + 1; b++)
      for (int a = k; a < b; a++) {
        if (BEST(k - 1, a) >= inf || !fits[a * (L + 2) + b]) continue;
        double c = pre[b] - pre[a], worst = c > BEST(k - 1, a) ? c : BEST(k - 1, a);
        if (worst < BEST(k, b)) {
          BEST(k, b) = worst;
          CUT(k, b) = a;
        }
      }
  if (rc == 0 && BEST(n, L + 1) >= inf) rc = -ENOSPC;
  if (rc == 0) {
    memset(plan, 0, sizeof *plan);
    plan->n = n;
    plan->lo[n] = L + 1;
    for (int k = n, b = L + 1; k >= 1; k--) {
      plan->lo[k - 1] = CUT(k, b);
      b = CUT(k, b);
    }
  }
#undef BEST
#undef CUT
  free(pre);
  free(fits);
  free(best);
  free(cut);
  return rc;
}
