/* Dense layers through cuBLAS (FP32 SGEMM, no TF32).
 *
 * cuBLAS is column-major while our matrices are row-major. A row-major M[r, c] has the
 * same bytes as the column-major M^T (c x r, leading dimension c), so each product is
 * computed transposed with the operands swapped:
 *   y = x.w      (row-major)  <=>  y^T  = w^T . x^T          gemm(N, N, out, B, in)
 *   dw = x^T.dy  (row-major)  <=>  dw^T = dy^T . x           gemm(N, T, out, in, B)
 *   dx = dy.w^T  (row-major)  <=>  dx^T = w . dy^T           gemm(T, N, in, B, out)
 * where the column-major views are: x^T (in x B, ld in), w^T (out x in, ld out),
 * dy^T and y^T (out x B, ld out).
 *
 * Limits (cuBLAS reference, cublas<t>gemm, the 32-bit API): m, n, k and the leading
 * dimensions are ints >= 0, each below 2^31 (batch, in and out are ints, checked positive);
 * lda >= max(1, m) for op N and >= max(1, k) for op T, ldb >= max(1, k) for op N and
 * >= max(1, n) for op T, ldc >= max(1, m), which the views above meet exactly (noted at each
 * call); no alignment is required (cudaMalloc's 256-byte alignment lets cuBLAS pick its
 * vectorised kernels); FP32 in and out with CUBLAS_DEFAULT_MATH, so no TF32; the handle's
 * default workspace, on the backend's stream. */
#include "kernels/cuda/cuda_internal.h"

static int check_dense(pst_cuda *c, const char *op, int batch, int in, int out) {
  PST_CUDA_REQUIRE(batch > 0 && in > 0 && out > 0, "%s: %s: bad sizes batch=%d in=%d out=%d",
                   c->name, op, batch, in, out);
  return 0;
}

int pst_cuda_dense_forward(pst_backend *b, const float *x, const float *w, const float *bias,
                           float *y, int batch, int in, int out) {
  pst_cuda *c = pst_cuda_of(b);
  int rc = check_dense(c, "dense_forward", batch, in, out);
  if (rc != 0) return rc;
  PST_CUDA_REQUIRE(x && w && y, "%s: dense_forward: NULL tensor", c->name);
  PST_CUDA_ENTER(c);
  const float one = 1.0f, zero = 0.0f;
  /* gemm(N, N, m = out, n = batch, k = in): lda = out >= m, ldb = in >= k, ldc = out >= m. */
  CUBLAS_CHECK(cublasSgemm(c->cublas, CUBLAS_OP_N, CUBLAS_OP_N, out, batch, in, &one, w, out, x,
                           in, &zero, y, out));
  if (bias) return pst_cuda_bias_add(c, y, bias, (size_t)batch, out);
  return 0;
}

int pst_cuda_dense_backward(pst_backend *b, const float *x, const float *w, const float *dy,
                            float *dx, float *dw, float *db, int batch, int in, int out) {
  pst_cuda *c = pst_cuda_of(b);
  int rc = check_dense(c, "dense_backward", batch, in, out);
  if (rc != 0) return rc;
  PST_CUDA_REQUIRE(x && w && dy && dw, "%s: dense_backward: NULL tensor", c->name);
  PST_CUDA_ENTER(c);
  const float one = 1.0f, zero = 0.0f;
  /* gemm(N, T, m = out, n = in, k = batch): lda = out >= m, ldb = in >= n, ldc = out >= m. */
  CUBLAS_CHECK(cublasSgemm(c->cublas, CUBLAS_OP_N, CUBLAS_OP_T, out, in, batch, &one, dy, out, x,
                           in, &zero, dw, out));
  if (db) {
    rc = pst_cuda_bias_grad(c, dy, db, (size_t)batch, out);
    if (rc != 0) return rc;
  }
  /* gemm(T, N, m = in, n = batch, k = out): lda = out >= k, ldb = out >= k, ldc = in >= m. */
  if (dx)
    CUBLAS_CHECK(cublasSgemm(c->cublas, CUBLAS_OP_T, CUBLAS_OP_N, in, batch, out, &one, w, out,
                             dy, out, &zero, dx, in));
  return 0;
}
