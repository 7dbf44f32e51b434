/* Max and average pooling on the CPU, NHWC. The channel loop is innermost everywhere, so
 * that each window position is one contiguous run of C floats and the loops vectorise.
 * Shapes are copied into locals first (cpu_window_geom): the build has
 * -fno-strict-aliasing, so the compiler would otherwise reload every field after each
 * float store. */
#include <errno.h>
#include <string.h>

#include "kernels/cpu_internal.h"

/* Channels handled per pass of the backward loop (the stack buffer's size). */
#define CBLOCK 256

static inline void max_into(float *restrict yo, const float *restrict xp, int c) {
  for (int k = 0; k < c; k++) yo[k] = xp[k] > yo[k] ? xp[k] : yo[k];
}

/* The real (unpadded) rows [*h0, *h1) and columns [*w0, *w1) of output cell (oh, ow). */
static inline void window_cells(const cpu_window_geom *g, int oh, int ow, int *h0, int *h1, int *w0,
                                int *w1) {
  *h0 = oh * g->sh - g->pt;
  *h1 = *h0 + g->k_h;
  *w0 = ow * g->sw - g->pl;
  *w1 = *w0 + g->k_w;
  if (*h0 < 0) *h0 = 0;
  if (*h1 > g->in_h) *h1 = g->in_h;
  if (*w0 < 0) *w0 = 0;
  if (*w1 > g->in_w) *w1 = g->in_w;
}

int cpu_maxpool_forward(pst_backend *b, const pst_window_shape *s, const float *x, float *y) {
  (void)b;
  if (cpu_check_window(s, 0) != 0 || x == NULL || y == NULL) return -EINVAL;
  const cpu_window_geom g = cpu_window_geom_of(s);
  const size_t row = (size_t)g.in_w * g.c;
  float *yo = y;
  for (int n = 0; n < g.n; n++) {
    const float *xn = x + (size_t)n * g.in_h * row;
    for (int oh = 0; oh < g.out_h; oh++) {
      for (int ow = 0; ow < g.out_w; ow++, yo += g.c) {
        int h0, h1, w0, w1;
        window_cells(&g, oh, ow, &h0, &h1, &w0, &w1);
        /* Padding cells never win: the maximum is over real cells only. A window with
         * none (possible only with unusual strides) gives 0. */
        if (h0 >= h1 || w0 >= w1) {
          for (int k = 0; k < g.c; k++) yo[k] = 0.0f;
          continue;
        }
        const float *first = xn + h0 * row + (size_t)w0 * g.c;
        for (int k = 0; k < g.c; k++) yo[k] = first[k];
        for (int ih = h0; ih < h1; ih++)
          for (int iw = w0; iw < w1; iw++) max_into(yo, xn + ih * row + (size_t)iw * g.c, g.c);
      }
    }
  }
  return 0;
}

/* rem[c] is the gradient not yet routed: the first cell equal to the maximum takes all
 * of it and leaves 0 for later ties. Branch-free and alias-free, so that it vectorises
 * (a compare-and-branch version mispredicts on every other channel). With `assign`
 * the cell is written rather than added to: windows that do not overlap own their
 * cells, and dx then needs no zeroing pass beforehand. */
static inline void route(float *restrict dp, float *restrict rem, const float *restrict xp,
                         const float *restrict yo, int cn, int assign) {
  if (assign) {
    for (int c = 0; c < cn; c++) {
      int hit = xp[c] == yo[c];
      dp[c] = hit ? rem[c] : 0.0f;
      rem[c] = hit ? 0.0f : rem[c];
    }
  } else {
    for (int c = 0; c < cn; c++) {
      int hit = xp[c] == yo[c];
      dp[c] += hit ? rem[c] : 0.0f;
      rem[c] = hit ? 0.0f : rem[c];
    }
  }
}

int cpu_maxpool_backward(pst_backend *b, const pst_window_shape *s, const float *x, const float *y,
                         const float *dy, float *dx) {
  (void)b;
  if (cpu_check_window(s, 0) != 0 || x == NULL || y == NULL || dy == NULL || dx == NULL)
    return -EINVAL;
  const cpu_window_geom g = cpu_window_geom_of(s);
  const size_t row = (size_t)g.in_w * g.c;
  /* Windows tile the input without overlap or padding (the usual 2x2 stride 2): each
   * covered cell is written exactly once, and only the uncovered edge is zeroed. */
  const int tiled = g.sh == g.k_h && g.sw == g.k_w && g.pt == 0 && g.pl == 0 &&
                    g.out_h * g.k_h <= g.in_h && g.out_w * g.k_w <= g.in_w;
  if (!tiled) memset(dx, 0, (size_t)g.n * g.in_h * row * sizeof(float));
  float rem[CBLOCK];
  const float *yo = y, *dyo = dy;
  for (int n = 0; n < g.n; n++) {
    const float *xn = x + (size_t)n * g.in_h * row;
    float *dn = dx + (size_t)n * g.in_h * row;
    if (tiled) {
      const int cov_h = g.out_h * g.k_h, cov_w = g.out_w * g.k_w;
      memset(dn + (size_t)cov_h * row, 0, (size_t)(g.in_h - cov_h) * row * sizeof(float));
      for (int ih = 0; ih < cov_h && cov_w < g.in_w; ih++)
        memset(dn + ih * row + (size_t)cov_w * g.c, 0,
               (size_t)(g.in_w - cov_w) * g.c * sizeof(float));
    }
    for (int oh = 0; oh < g.out_h; oh++) {
      int h0 = oh * g.sh - g.pt, h1 = h0 + g.k_h;
      if (h0 < 0) h0 = 0;
      if (h1 > g.in_h) h1 = g.in_h;
      for (int ow = 0; ow < g.out_w; ow++, yo += g.c, dyo += g.c) {
        int w0 = ow * g.sw - g.pl, w1 = w0 + g.k_w;
        if (w0 < 0) w0 = 0;
        if (w1 > g.in_w) w1 = g.in_w;
        for (int c0 = 0; c0 < g.c; c0 += CBLOCK) {
          const int cn = g.c - c0 < CBLOCK ? g.c - c0 : CBLOCK;
          for (int k = 0; k < cn; k++) rem[k] = dyo[c0 + k];
          for (int ih = h0; ih < h1; ih++) {
            for (int iw = w0; iw < w1; iw++) {
              const size_t p = ih * row + (size_t)iw * g.c + c0;
              route(dn + p, rem, xn + p, yo + c0, cn, tiled);
            }
          }
        }
      }
    }
  }
  return 0;
}

int cpu_avgpool_forward(pst_backend *b, const pst_window_shape *s, const float *x, float *y) {
  (void)b;
  if (cpu_check_window(s, 0) != 0 || x == NULL || y == NULL) return -EINVAL;
  const cpu_window_geom g = cpu_window_geom_of(s);
  const size_t row = (size_t)g.in_w * g.c;
  float *yo = y;
  for (int n = 0; n < g.n; n++) {
    const float *xn = x + (size_t)n * g.in_h * row;
    for (int oh = 0; oh < g.out_h; oh++) {
      for (int ow = 0; ow < g.out_w; ow++, yo += g.c) {
        int h0, h1, w0, w1;
        window_cells(&g, oh, ow, &h0, &h1, &w0, &w1);
        for (int k = 0; k < g.c; k++) yo[k] = 0.0f;
        /* Padding cells are left out of the divisor too (a window with no real cell,
         * possible only with unusual strides, gives 0). */
        const int cells = (h1 - h0) * (w1 - w0);
        if (cells <= 0) continue;
        for (int ih = h0; ih < h1; ih++)
          for (int iw = w0; iw < w1; iw++) {
            const float *restrict xp = xn + ih * row + (size_t)iw * g.c;
            for (int k = 0; k < g.c; k++) yo[k] += xp[k];
          }
        const float inv = 1.0f / (float)cells;
        for (int k = 0; k < g.c; k++) yo[k] *= inv;
      }
    }
  }
  return 0;
}

int cpu_avgpool_backward(pst_backend *b, const pst_window_shape *s, const float *dy, float *dx) {
  (void)b;
  if (cpu_check_window(s, 0) != 0 || dy == NULL || dx == NULL) return -EINVAL;
  const cpu_window_geom g = cpu_window_geom_of(s);
  const size_t row = (size_t)g.in_w * g.c;
  memset(dx, 0, (size_t)g.n * g.in_h * row * sizeof(float));
  const float *dyo = dy;
  for (int n = 0; n < g.n; n++) {
    float *dn = dx + (size_t)n * g.in_h * row;
    for (int oh = 0; oh < g.out_h; oh++) {
      for (int ow = 0; ow < g.out_w; ow++, dyo += g.c) {
        int h0, h1, w0, w1;
        window_cells(&g, oh, ow, &h0, &h1, &w0, &w1);
        const int cells = (h1 - h0) * (w1 - w0);
        if (cells <= 0) continue;
        const float inv = 1.0f / (float)cells;
        for (int ih = h0; ih < h1; ih++)
          for (int iw = w0; iw < w1; iw++) {
            float *restrict dp = dn + ih * row + (size_t)iw * g.c;
            for (int k = 0; k < g.c; k++) dp[k] += dyo[k] * inv;
          }
      }
    }
  }
  return 0;
}
