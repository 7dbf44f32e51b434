/* Elementwise activations and the softmax cross-entropy loss on the CPU. */
#include <errno.h>
#include <math.h>

#include "kernels/cpu_internal.h"
#include "kernels/dropout_mask.h"

int cpu_relu_forward(pst_backend *b, const float *x, float *y, size_t n) {
  (void)b;
  if (n > 0 && (x == NULL || y == NULL)) return -EINVAL;
  /* Written as a select rather than fmaxf so that NaN handling does not stop the
   * compiler from vectorising; NaN inputs become 0. */
  for (size_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
  return 0;
}

int cpu_relu_backward(pst_backend *b, const float *y, const float *dy, float *dx, size_t n) {
  (void)b;
  if (n > 0 && (y == NULL || dy == NULL || dx == NULL)) return -EINVAL;
  for (size_t i = 0; i < n; i++) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
  return 0;
}

int cpu_relu6_forward(pst_backend *b, const float *x, float *y, size_t n) {
  (void)b;
  if (n > 0 && (x == NULL || y == NULL)) return -EINVAL;
  for (size_t i = 0; i < n; i++) {
    float v = x[i] > 0.0f ? x[i] : 0.0f;
    y[i] = v < 6.0f ? v : 6.0f;
  }
  return 0;
}

int cpu_relu6_backward(pst_backend *b, const float *y, const float *dy, float *dx, size_t n) {
  (void)b;
  if (n > 0 && (y == NULL || dy == NULL || dx == NULL)) return -EINVAL;
  for (size_t i = 0; i < n; i++) dx[i] = (y[i] > 0.0f && y[i] < 6.0f) ? dy[i] : 0.0f;
  return 0;
}

/* Forward and backward are the same map (multiply by the scaled mask), so one loop serves
 * both. */
static int dropout_apply(const float *x, float *y, size_t n, float rate, uint64_t seed) {
  if ((n > 0 && (x == NULL || y == NULL)) || !(rate >= 0.0f && rate < 1.0f)) return -EINVAL;
  const uint32_t threshold = pst_dropout_threshold(rate);
  const float scale = 1.0f / (1.0f - rate);
  for (size_t i = 0; i < n; i++) y[i] = pst_dropout_keep(seed, i, threshold) ? x[i] * scale : 0.0f;
  return 0;
}

int cpu_dropout_forward(pst_backend *b, const float *x, float *y, size_t n, float rate,
                        uint64_t seed) {
  (void)b;
  return dropout_apply(x, y, n, rate, seed);
}

int cpu_dropout_backward(pst_backend *b, const float *dy, float *dx, size_t n, float rate,
                         uint64_t seed) {
  (void)b;
  return dropout_apply(dy, dx, n, rate, seed);
}

int cpu_softmax_xent(pst_backend *b, const float *logits, const int32_t *labels, float *dlogits,
                     int batch, int classes, float scale, double *loss_sum, int *correct) {
  (void)b;
  if (batch <= 0 || classes <= 0 || logits == NULL || labels == NULL) return -EINVAL;
  for (int r = 0; r < batch; r++)
    if (labels[r] < 0 || labels[r] >= classes) return -EINVAL;
  double loss = 0.0;
  int right = 0;
  for (int r = 0; r < batch; r++) {
    const float *l = logits + (size_t)r * classes;
    int label = labels[r];
    /* Subtracting the row maximum keeps every exp() in (0, 1]: no overflow whatever the
     * logits, and the log of the sum is at least 0. */
    int arg = 0;
    float max = l[0];
    for (int c = 1; c < classes; c++)
      if (l[c] > max) {
        max = l[c];
        arg = c;
      }
    double sum = 0.0;
    for (int c = 0; c < classes; c++) sum += exp((double)l[c] - max);
    double lse = log(sum);
    loss += lse - ((double)l[label] - max);
    right += arg == label;
    if (dlogits != NULL) {
      float *d = dlogits + (size_t)r * classes;
      for (int c = 0; c < classes; c++) {
        double p = exp((double)l[c] - max - lse);
        d[c] = (float)((p - (c == label ? 1.0 : 0.0)) * scale);
      }
    }
  }
  if (loss_sum != NULL) *loss_sum = loss;
  if (correct != NULL) *correct = right;
  return 0;
}
