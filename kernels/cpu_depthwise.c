/* Depthwise convolution (depth multiplier 1) on the CPU, NHWC, as direct loops.
 *
 * There is no GEMM to hand this to: each output channel reads one input channel, so the
 * work is KH*KW multiply-adds per output value. The filters [C, KH, KW] are first
 * transposed into [KH, KW, C] scratch, so that every inner loop runs over C contiguous
 * floats of x, y and the filter alike and vectorises; the weight gradient is accumulated
 * in that order and transposed back. Shapes are copied into locals first
 * (cpu_window_geom). */
#include <errno.h>
#include <string.h>

#include "kernels/cpu_internal.h"

/* wt[KH, KW, C] = w[C, KH, KW] (taps = KH*KW). */
static void to_taps_last(const float *w, float *wt, int c, size_t taps) {
  for (int k = 0; k < c; k++)
    for (size_t t = 0; t < taps; t++) wt[t * c + k] = w[k * taps + t];
}

int cpu_depthwise_conv2d_forward(pst_backend *b, const pst_window_shape *s, const float *x,
                                 const float *w, const float *bias, float *y) {
  if (cpu_check_window(s, 0) != 0 || x == NULL || w == NULL || y == NULL) return -EINVAL;
  const cpu_window_geom g = cpu_window_geom_of(s);
  const size_t taps = (size_t)g.k_h * g.k_w;
  float *wt = cpu_scratch(b, CPU_SCRATCH_DW, taps * g.c);
  if (wt == NULL) return -ENOMEM;
  to_taps_last(w, wt, g.c, taps);
  const size_t row = (size_t)g.in_w * g.c;
  float *yo = y;
  for (int n = 0; n < g.n; n++) {
    const float *xn = x + (size_t)n * g.in_h * row;
    for (int oh = 0; oh < g.out_h; oh++) {
      for (int ow = 0; ow < g.out_w; ow++, yo += g.c) {
        for (int c = 0; c < g.c; c++) yo[c] = bias != NULL ? bias[c] : 0.0f;
        for (int i = 0; i < g.k_h; i++) {
          const int ih = oh * g.sh - g.pt + i;
          if (ih < 0 || ih >= g.in_h) continue;
          for (int j = 0; j < g.k_w; j++) {
            const int iw = ow * g.sw - g.pl + j;
            if (iw < 0 || iw >= g.in_w) continue;
            const float *restrict xp = xn + ih * row + (size_t)iw * g.c;
            const float *restrict wp = wt + ((size_t)i * g.k_w + j) * g.c;
            float *restrict yp = yo;
            for (int c = 0; c < g.c; c++) yp[c] += xp[c] * wp[c];
          }
        }
      }
    }
  }
  return 0;
}

int cpu_depthwise_conv2d_backward(pst_backend *b, const pst_window_shape *s, const float *x,
                                  const float *w, const float *dy, float *dx, float *dw,
                                  float *db) {
  if (cpu_check_window(s, 0) != 0 || x == NULL || w == NULL || dy == NULL || dw == NULL)
    return -EINVAL;
  const cpu_window_geom g = cpu_window_geom_of(s);
  const size_t taps = (size_t)g.k_h * g.k_w;
  /* One scratch holds both the transposed filters [KH, KW, C] and their gradient. */
  float *wt = cpu_scratch(b, CPU_SCRATCH_DW, 2 * taps * g.c);
  if (wt == NULL) return -ENOMEM;
  float *dwt = wt + taps * g.c;
  to_taps_last(w, wt, g.c, taps);
  memset(dwt, 0, taps * g.c * sizeof(float));
  if (db != NULL) memset(db, 0, (size_t)g.c * sizeof(float));
  const size_t row = (size_t)g.in_w * g.c;
  if (dx != NULL) memset(dx, 0, (size_t)g.n * g.in_h * row * sizeof(float));
  const float *dyo = dy;
  for (int n = 0; n < g.n; n++) {
    const float *xn = x + (size_t)n * g.in_h * row;
    float *dxn = dx != NULL ? dx + (size_t)n * g.in_h * row : NULL;
    for (int oh = 0; oh < g.out_h; oh++) {
      for (int ow = 0; ow < g.out_w; ow++, dyo += g.c) {
        if (db != NULL)
          for (int c = 0; c < g.c; c++) db[c] += dyo[c];
        for (int i = 0; i < g.k_h; i++) {
          const int ih = oh * g.sh - g.pt + i;
          if (ih < 0 || ih >= g.in_h) continue;
          for (int j = 0; j < g.k_w; j++) {
            const int iw = ow * g.sw - g.pl + j;
            if (iw < 0 || iw >= g.in_w) continue;
            const size_t p = ih * row + (size_t)iw * g.c;
            const size_t t = ((size_t)i * g.k_w + j) * g.c;
            const float *restrict xp = xn + p;
            const float *restrict dyp = dyo;
            float *restrict dwp = dwt + t;
            for (int c = 0; c < g.c; c++) dwp[c] += xp[c] * dyp[c];
            if (dxn != NULL) {
              const float *restrict wp = wt + t;
              float *restrict dxp = dxn + p;
              for (int c = 0; c < g.c; c++) dxp[c] += wp[c] * dyp[c];
            }
          }
        }
      }
    }
  }
  for (int c = 0; c < g.c; c++)
    for (size_t t = 0; t < taps; t++) dw[c * taps + t] = dwt[t * g.c + c];
  return 0;
}
