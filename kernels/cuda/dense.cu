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

/* A dense layer in pieces of rows [r0, r1) of w (backend.h). NOT RUN ON A GPU: written to
 * the limits above and checked on the CPU only (the CPU backend's pieces: cpu_dense_test, net_layers_test);
 * gpu-check's parity test (cuda_parity_test) compares these with the CPU's on a GPU.
 * Row r0 of w starts at w + r0 * out, and column r0 of the row-major x [B, in] at x + r0 with
 * the same leading dimension in; so the pieces are the whole layer's products on
 * sub-matrices, with k (forward) or n (backward) = r1 - r0 <= in and the same leading
 * dimensions, which still meet every bound: in >= r1 - r0. */
static int check_rows(pst_cuda *c, const char *op, int batch, int in, int out, int r0, int r1) {
  int rc = check_dense(c, op, batch, in, out);
  if (rc != 0) return rc;
  PST_CUDA_REQUIRE(r0 >= 0 && r0 < r1 && r1 <= in, "%s: %s: bad rows [%d, %d) of %d", c->name, op,
                   r0, r1, in);
  return 0;
}

int pst_cuda_dense_forward_rows(pst_backend *b, const float *x, const float *w, const float *bias,
                                float *y, int batch, int in, int out, int r0, int r1) {
  pst_cuda *c = pst_cuda_of(b);
  int rc = check_rows(c, "dense_forward_rows", batch, in, out, r0, r1);
  if (rc != 0) return rc;
  PST_CUDA_REQUIRE(x && w && y, "%s: dense_forward_rows: NULL tensor", c->name);
  PST_CUDA_ENTER(c);
  const float one = 1.0f, zero = 0.0f;
  /* gemm(N, N, m = out, n = batch, k = r1 - r0): A = w's rows from r0, lda = out >= m;
   * B = x's columns from r0, ldb = in >= k; C = y, ldc = out >= m; beta 0 for the first
   * piece (y's old contents are never read then), 1 after. */
  CUBLAS_CHECK(cublasSgemm(c->cublas, CUBLAS_OP_N, CUBLAS_OP_N, out, batch, r1 - r0, &one,
                           w + (size_t)r0 * out, out, x + r0, in, r0 == 0 ? &zero : &one, y,
                           out));
  if (bias) return pst_cuda_bias_add(c, y, bias, (size_t)batch, out);
  return 0;
}

/* The backward pass over rows [r0, r1); the whole layer is rows 0 .. in, whose calls carry
 * the same arguments as the whole-layer code that ran on an H100 and an H200 before pieces
 * existed (this shared form has not run on a GPU); op names the entry in the refusals. */
static int backward_rows(pst_backend *b, const char *op, const float *x, const float *w,
                         const float *dy, float *dx, float *dw, float *db, int batch, int in,
                         int out, int r0, int r1) {
  pst_cuda *c = pst_cuda_of(b);
  int rc = check_rows(c, op, batch, in, out, r0, r1);
  if (rc != 0) return rc;
  PST_CUDA_REQUIRE(x && w && dy && dw, "%s: %s: NULL tensor", c->name, op);
  PST_CUDA_ENTER(c);
  const float one = 1.0f, zero = 0.0f;
  /* dw[r0:r1]^T (out x (r1 - r0)) = dy^T . x[:, r0:r1]: gemm(N, T, m = out, n = r1 - r0,
   * k = batch): lda = out >= m; B = x's columns from r0, op T, ldb = in >= n; C = dw's rows
   * from r0, ldc = out >= m. */
  CUBLAS_CHECK(cublasSgemm(c->cublas, CUBLAS_OP_N, CUBLAS_OP_T, out, r1 - r0, batch, &one, dy,
                           out, x + r0, in, &zero, dw + (size_t)r0 * out, out));
  if (db) {
    rc = pst_cuda_bias_grad(c, dy, db, (size_t)batch, out);
    if (rc != 0) return rc;
  }
  /* dx[:, r0:r1]^T ((r1 - r0) x B) = w[r0:r1] . dy^T: gemm(T, N, m = r1 - r0, n = batch,
   * k = out): A = w's rows from r0, op T, lda = out >= k; ldb = out >= k; C = dx's columns
   * from r0, ldc = in >= m. */
  if (dx)
    CUBLAS_CHECK(cublasSgemm(c->cublas, CUBLAS_OP_T, CUBLAS_OP_N, r1 - r0, batch, out, &one,
                             w + (size_t)r0 * out, out, dy, out, &zero, dx + r0, in));
  return 0;
}

int pst_cuda_dense_backward(pst_backend *b, const float *x, const float *w, const float *dy,
                            float *dx, float *dw, float *db, int batch, int in, int out) {
  return backward_rows(b, "dense_backward", x, w, dy, dx, dw, db, batch, in, out, 0, in);
}

int pst_cuda_dense_backward_rows(pst_backend *b, const float *x, const float *w, const float *dy,
                                 float *dx, float *dw, float *db, int batch, int in, int out,
                                 int r0, int r1) {
  return backward_rows(b, "dense_backward_rows", x, w, dy, dx, dw, db, batch, in, out, r0, r1);
}
