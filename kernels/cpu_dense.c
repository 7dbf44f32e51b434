/* Dense layers on the CPU: three OpenBLAS GEMMs and two small vector loops.
 * x [B, in], w [in, out], bias [out], y [B, out]. */
#include <cblas.h>
#include <errno.h>
#include <string.h>

#include "kernels/cpu_internal.h"

/* db[out] = the sum over the batch's rows of dy, row after row (the same order for whole
 * layers and pieces). */
static void bias_grad(const float *dy, float *db, int batch, int out) {
  memcpy(db, dy, (size_t)out * sizeof(float));
  for (int r = 1; r < batch; r++) {
    const float *d = dy + (size_t)r * out;
    for (int j = 0; j < out; j++) db[j] += d[j];
  }
}

int cpu_dense_forward(pst_backend *b, const float *x, const float *w, const float *bias, float *y,
                      int batch, int in, int out) {
  (void)b;
  if (batch <= 0 || in <= 0 || out <= 0 || x == NULL || w == NULL || y == NULL) return -EINVAL;
  /* Seeding y with the bias and letting the GEMM accumulate (beta = 1) costs one write
   * pass instead of a separate read-modify-write pass after it. */
  for (int r = 0; r < batch; r++) {
    float *yr = y + (size_t)r * out;
    if (bias != NULL)
      memcpy(yr, bias, (size_t)out * sizeof(float));
    else
      memset(yr, 0, (size_t)out * sizeof(float));
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, out, in, 1.0f, x, in, w, out,
              1.0f, y, out);
  return 0;
}

/* Rows [r0, r1) of w (backend.h): the same GEMMs on sub-matrices, x's columns r0.. taken with
 * its own leading dimension `in`, so nothing is copied. */
static int rows_ok(int batch, int in, int out, int r0, int r1) {
  return batch > 0 && in > 0 && out > 0 && r0 >= 0 && r0 < r1 && r1 <= in;
}

int cpu_dense_forward_rows(pst_backend *b, const float *x, const float *w, const float *bias,
                           float *y, int batch, int in, int out, int r0, int r1) {
  (void)b;
  if (!rows_ok(batch, in, out, r0, r1) || x == NULL || w == NULL || y == NULL) return -EINVAL;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, out, r1 - r0, 1.0f, x + r0, in,
              w + (size_t)r0 * out, out, r0 == 0 ? 0.0f : 1.0f, y, out);
  if (bias != NULL)
    for (int r = 0; r < batch; r++) {
      float *yr = y + (size_t)r * out;
      for (int j = 0; j < out; j++) yr[j] += bias[j];
    }
  return 0;
}

int cpu_dense_backward_rows(pst_backend *b, const float *x, const float *w, const float *dy,
                            float *dx, float *dw, float *db, int batch, int in, int out, int r0,
                            int r1) {
  (void)b;
  if (!rows_ok(batch, in, out, r0, r1) || x == NULL || w == NULL || dy == NULL) return -EINVAL;
  if (dw != NULL)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1 - r0, out, batch, 1.0f, x + r0, in,
                dy, out, 0.0f, dw + (size_t)r0 * out, out);
  if (db != NULL) bias_grad(dy, db, batch, out);
  if (dx != NULL)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, r1 - r0, out, 1.0f, dy, out,
                w + (size_t)r0 * out, out, 0.0f, dx + r0, in);
  return 0;
}

/* The whole layer is its one piece: the same GEMMs with the same arguments (x + 0, the
 * leading dimensions in and out, r1 - r0 = in), so the same bits. */
int cpu_dense_backward(pst_backend *b, const float *x, const float *w, const float *dy, float *dx,
                       float *dw, float *db, int batch, int in, int out) {
  return cpu_dense_backward_rows(b, x, w, dy, dx, dw, db, batch, in, out, 0, in);
}
