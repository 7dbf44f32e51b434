/* conv2d on the CPU: im2col + OpenBLAS sgemm, NHWC activations, OHWI weights.
 *
 * With OHWI weights, W is already the matrix [Cout, K] with K = KH*KW*Cin, and an NHWC
 * im2col row (one output pixel) is K floats in the same (kh, kw, cin) order. Each column
 * row gets one more entry, a constant 1, and W one more column, the bias, so that
 *   forward   Y[M, Cout]     = col[M, K+1] . [W | bias]^T     (M = output pixels)
 *   weights   [dW | db]      = dY^T . col                     (db comes for free)
 *   input     dcol[M, K]     = dY . W, then col2im adds dcol back into dx.
 * Folding the bias into the GEMMs saves a pass over Y and one over dY, which for small
 * kernels cost as much as the GEMMs themselves. The batch is processed in chunks of
 * whole samples so that the column buffer stays in cache between being written and
 * being read. A 1x1 stride-1 unpadded convolution needs no im2col at all: x itself is
 * the column matrix. */
#include <cblas.h>
#include <errno.h>
#include <string.h>

#include "kernels/cpu_internal.h"

/* Column-buffer floats per chunk (512 KiB): big enough for efficient GEMMs, small
 * enough to stay in L2. */
#define CHUNK_FLOATS (128 * 1024)

/* Short copies as plain loops (the build keeps GCC from turning them back into libc
 * calls): im2col segments are often a handful of floats (Cin = 1), where a memcpy call,
 * or even a general vectorised loop with its prologue, costs more than the copy. The
 * small sizes get loops of constant length, which the compiler unrolls completely. */
#define COPY_CASE(N)                                \
  case N:                                           \
    for (int k = 0; k < N; k++) dst[k] = src[k];    \
    return;

static inline void copy_f(float *restrict dst, const float *restrict src, int n) {
  switch (n) {
    COPY_CASE(1)
    COPY_CASE(2)
    COPY_CASE(3)
    COPY_CASE(4)
    COPY_CASE(5)
    COPY_CASE(6)
    COPY_CASE(7)
    COPY_CASE(8)
    default:
      for (int k = 0; k < n; k++) dst[k] = src[k];
  }
}

static inline void zero_f(float *dst, int n) {
  for (int k = 0; k < n; k++) dst[k] = 0.0f;
}

static inline void add_f(float *restrict dst, const float *restrict src, int n) {
  for (int k = 0; k < n; k++) dst[k] += src[k];
}

/* The range [j0, j1) of kernel columns that fall inside the input for output column ow. */
static inline void valid_cols(const pst_window_shape *s, int ow, int *iw0, int *j0, int *j1) {
  *iw0 = ow * s->stride_w - s->pad_left;
  *j0 = *iw0 < 0 ? -*iw0 : 0;
  int end = s->in_w - *iw0;
  *j1 = end < s->k_w ? end : s->k_w;
  if (*j1 < *j0) *j1 = *j0;
}

/* col[(n - n0) * OH * OW + oh * OW + ow, (i, j, c)] = x[n, oh*sh - pt + i, ow*sw - pl + j, c]
 * for samples n0 .. n0 + nb - 1, zeros where the window hangs over the edge; rows are
 * K + 1 long, the last entry 1 (the bias input). The shape is copied into locals first:
 * the build has -fno-strict-aliasing, so the compiler would otherwise reload every field
 * after each float store. */
static void im2col(const pst_window_shape *s, const float *x, int n0, int nb, float *col) {
  const int in_h = s->in_h, in_w = s->in_w, cin = s->in_c, k_h = s->k_h, k_w = s->k_w;
  const int sh = s->stride_h, sw = s->stride_w, pt = s->pad_top, pl = s->pad_left;
  const int out_h = s->out_h, out_w = s->out_w;
  const int kwc = k_w * cin, K = k_h * kwc, ld = K + 1;
  const size_t in_row = (size_t)in_w * cin;
  float *row = col;
  for (int n = n0; n < n0 + nb; n++) {
    const float *xn = x + (size_t)n * in_h * in_row;
    for (int oh = 0; oh < out_h; oh++) {
      const int ih0 = oh * sh - pt;
      const int rows_inside = ih0 >= 0 && ih0 + k_h <= in_h;
      for (int ow = 0; ow < out_w; ow++, row += ld) {
        const int iw0 = ow * sw - pl;
        row[K] = 1.0f;
        if (rows_inside && iw0 >= 0 && iw0 + k_w <= in_w) {
          /* The window lies inside the image: k_h contiguous runs of k_w * cin. */
          const float *src = xn + ih0 * in_row + (size_t)iw0 * cin;
          for (int i = 0; i < k_h; i++) copy_f(row + i * kwc, src + i * in_row, kwc);
          continue;
        }
        const int j0 = iw0 < 0 ? -iw0 : 0;
        int j1 = in_w - iw0 < k_w ? in_w - iw0 : k_w;
        if (j1 < j0) j1 = j0;
        for (int i = 0; i < k_h; i++) {
          const int ih = ih0 + i;
          float *dst = row + i * kwc;
          if (ih < 0 || ih >= in_h) {
            zero_f(dst, kwc);
            continue;
          }
          zero_f(dst, j0 * cin);
          copy_f(dst + j0 * cin, xn + ih * in_row + (size_t)(iw0 + j0) * cin, (j1 - j0) * cin);
          zero_f(dst + j1 * cin, (k_w - j1) * cin);
        }
      }
    }
  }
}

/* The adjoint of im2col (without the bias entry, rows K long): adds every column entry
 * back into dx, which the caller zeroed. */
static void col2im(const pst_window_shape *s, const float *col, int n0, int nb, float *dx) {
  const int cin = s->in_c, kwc = s->k_w * cin, K = s->k_h * kwc;
  const float *row = col;
  for (int n = n0; n < n0 + nb; n++) {
    float *dn = dx + (size_t)n * s->in_h * s->in_w * cin;
    for (int oh = 0; oh < s->out_h; oh++) {
      for (int ow = 0; ow < s->out_w; ow++, row += K) {
        int iw0, j0, j1;
        valid_cols(s, ow, &iw0, &j0, &j1);
        for (int i = 0; i < s->k_h; i++) {
          int ih = oh * s->stride_h - s->pad_top + i;
          if (ih < 0 || ih >= s->in_h) continue;
          add_f(dn + ((size_t)ih * s->in_w + iw0 + j0) * cin, row + i * kwc + j0 * cin,
                (j1 - j0) * cin);
        }
      }
    }
  }
}

/* 1x1, stride 1, no padding: the input is the column matrix. */
static int is_pointwise(const pst_window_shape *s) {
  return s->k_h == 1 && s->k_w == 1 && s->stride_h == 1 && s->stride_w == 1 && s->pad_top == 0 &&
         s->pad_left == 0 && s->out_h == s->in_h && s->out_w == s->in_w;
}

/* Samples per chunk so that a chunk's column buffer holds about CHUNK_FLOATS. */
static int chunk_samples(const pst_window_shape *s, size_t ld) {
  size_t per = (size_t)s->out_h * s->out_w * ld;
  size_t nb = per >= CHUNK_FLOATS ? 1 : CHUNK_FLOATS / per;
  return nb > (size_t)s->n ? s->n : (int)nb;
}

/* The pointwise case: one GEMM each way over the whole batch, bias handled apart. */
static void pointwise_forward(const pst_window_shape *s, const float *x, const float *w,
                              const float *bias, float *y) {
  const int cout = s->out_c, K = s->in_c;
  const size_t M = (size_t)s->n * s->out_h * s->out_w;
  for (size_t r = 0; r < M; r++) {
    if (bias != NULL)
      copy_f(y + r * cout, bias, cout);
    else
      zero_f(y + r * cout, cout);
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, cout, K, 1.0f, x, K, w, K, 1.0f, y,
              cout);
}

static void pointwise_backward(const pst_window_shape *s, const float *x, const float *w,
                               const float *dy, float *dx, float *dw, float *db) {
  const int cout = s->out_c, K = s->in_c;
  const size_t M = (size_t)s->n * s->out_h * s->out_w;
  if (db != NULL) {
    zero_f(db, cout);
    for (size_t r = 0; r < M; r++) add_f(db, dy + r * cout, cout);
  }
  if (dw != NULL)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cout, K, (int)M, 1.0f, dy, cout, x, K,
                0.0f, dw, K);
  if (dx != NULL)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, K, cout, 1.0f, dy, cout, w, K,
                0.0f, dx, K);
}

int cpu_conv2d_forward(pst_backend *b, const pst_window_shape *s, const float *x, const float *w,
                       const float *bias, float *y) {
  if (cpu_check_window(s, 1) != 0 || x == NULL || w == NULL || y == NULL) return -EINVAL;
  if (is_pointwise(s)) {
    pointwise_forward(s, x, w, bias, y);
    return 0;
  }
  const int cout = s->out_c, K = s->k_h * s->k_w * s->in_c, ld = K + 1;
  const size_t pix = (size_t)s->out_h * s->out_w;
  int nb = chunk_samples(s, (size_t)ld);
  float *col = cpu_scratch(b, CPU_SCRATCH_COL, (size_t)nb * pix * ld);
  float *waug = cpu_scratch(b, CPU_SCRATCH_WAUG, (size_t)cout * ld);
  if (col == NULL || waug == NULL) return -ENOMEM;
  for (int o = 0; o < cout; o++) {
    copy_f(waug + (size_t)o * ld, w + (size_t)o * K, K);
    waug[(size_t)o * ld + K] = bias != NULL ? bias[o] : 0.0f;
  }
  for (int n0 = 0; n0 < s->n; n0 += nb) {
    int cnt = s->n - n0 < nb ? s->n - n0 : nb;
    im2col(s, x, n0, cnt, col);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(cnt * pix), cout, ld, 1.0f, col,
                ld, waug, ld, 0.0f, y + (size_t)n0 * pix * cout, cout);
  }
  return 0;
}

int cpu_conv2d_backward(pst_backend *b, const pst_window_shape *s, const float *x, const float *w,
                        const float *dy, float *dx, float *dw, float *db) {
  if (cpu_check_window(s, 1) != 0 || x == NULL || w == NULL || dy == NULL) return -EINVAL;
  if (is_pointwise(s)) {
    pointwise_backward(s, x, w, dy, dx, dw, db);
    return 0;
  }
  const int cout = s->out_c, K = s->k_h * s->k_w * s->in_c, ld = K + 1;
  const size_t pix = (size_t)s->out_h * s->out_w;
  const size_t in_size = (size_t)s->in_h * s->in_w * s->in_c;
  /* [dW | db] is computed whenever either is wanted: the extra column is nearly free. */
  int want_w = dw != NULL || db != NULL;
  int nb = chunk_samples(s, (size_t)ld);
  float *col = want_w ? cpu_scratch(b, CPU_SCRATCH_COL, (size_t)nb * pix * ld) : NULL;
  float *dwaug = want_w ? cpu_scratch(b, CPU_SCRATCH_WAUG, (size_t)cout * ld) : NULL;
  float *dcol = dx != NULL ? cpu_scratch(b, CPU_SCRATCH_DCOL, (size_t)nb * pix * K) : NULL;
  if ((want_w && (col == NULL || dwaug == NULL)) || (dx != NULL && dcol == NULL)) return -ENOMEM;

  for (int n0 = 0; n0 < s->n; n0 += nb) {
    int cnt = s->n - n0 < nb ? s->n - n0 : nb;
    const int M = (int)(cnt * pix);
    const float *dyc = dy + (size_t)n0 * pix * cout;
    if (want_w) {
      im2col(s, x, n0, cnt, col);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cout, ld, M, 1.0f, dyc, cout, col, ld,
                  n0 == 0 ? 0.0f : 1.0f, dwaug, ld);
    }
    if (dx != NULL) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, cout, 1.0f, dyc, cout, w, K,
                  0.0f, dcol, K);
      memset(dx + (size_t)n0 * in_size, 0, (size_t)cnt * in_size * sizeof(float));
      col2im(s, dcol, n0, cnt, dx);
    }
  }
  for (int o = 0; want_w && o < cout; o++) {
    if (dw != NULL) copy_f(dw + (size_t)o * K, dwaug + (size_t)o * ld, K);
    if (db != NULL) db[o] = dwaug[(size_t)o * ld + K];
  }
  return 0;
}
