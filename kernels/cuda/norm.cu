/* Batch normalisation as plain CUDA kernels, with the formulas of backend.h and the
 * arithmetic of the CPU backend (kernels/cpu_norm.c): per-channel sums in double, exact
 * two-pass statistics (the mean, then the squared deviations from it), and one element-wise
 * multiply-add pass in double rounded once to float.
 *
 * Why not cuDNN: its batch-norm functions see x[rows, C] as an NCHW tensor of N = rows and
 * H = W = 1, and in that layout they refuse shapes every model here reaches. On an H100
 * (cuDNN 9, 2026-11-26) cudnnBatchNormalizationForwardInference returned
 * CUDNN_STATUS_NOT_SUPPORTED for 86528 x 4; the cuDNN API reference gives no limit on N for
 * these functions, and PyTorch (aten/src/ATen/native/Normalization.cpp, the choice of a
 * batch-norm backend) keeps cuDNN for spatial batch norm only while N <= 65535 in
 * evaluation, N <= 880801 in training and the tensor has fewer than 2^31 - 1 elements ("some
 * cuDNN kernels have 32-bit indexing limitations"). Evaluation of mobilenetv2 at batch 64
 * has 64 * 32 * 32 = 65536 rows, one too many. Presenting the rows as H or W instead would
 * meet other undocumented limits, and with one row cuDNN's unbiased variance is 0/0. These
 * kernels have no limit but memory: rows up to 2^31 - 1 (the interface's int), channels up
 * to 2^31 - 1, rows * C up to 2^40 (check()).
 *
 * Statistics: reduce.cuh's column sums, fixed order, so a result is the same run to run.
 * With one row the squared deviation is exactly 0 (the row minus its own mean, in double),
 * so the variance is 0 and the moving variance's change is (0 - moving) * k, as on the CPU.
 *
 * Per channel the kernels keep up to three doubles in c->bn_coef ([3C]): the training
 * forward's mean, scale and shift (y = x * scale + shift), inference's scale and shift, and
 * backward's g, bx and c0 (dx = g * dy + bx * x + c0). */
#include <math.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/norm_kernels.cuh"
#include "kernels/cuda/reduce.cuh"

namespace {

int check(pst_cuda *c, int rows, int channels, float eps, const char *op) {
  PST_CUDA_REQUIRE(rows > 0 && channels > 0 && eps > 0.0f &&
                       (size_t)rows * (size_t)channels <= ((size_t)1 << 40),
                   "%s: %s: bad shape %d x %d or eps %g", c->name, op, rows, channels,
                   (double)eps);
  return 0;
}

/* The per-channel doubles: n of them per channel, in c->bn_coef. */
int coef(pst_cuda *c, int channels, int n, double **out) {
  int rc = pst_cuda_buffer_reserve(c, &c->bn_coef, (size_t)n * (size_t)channels * sizeof(double),
                                   "batchnorm per-channel coefficients");
  *out = (double *)c->bn_coef.p;
  return rc;
}

}  // namespace

int pst_cuda_batchnorm_forward_train(pst_backend *b, const float *x, const float *gamma,
                                     const float *beta, float *y, int rows, int channels,
                                     float eps, const float *moving, float k, float *saved,
                                     float *dmoving) {
  pst_cuda *c = pst_cuda_of(b);
  int rc = check(c, rows, channels, eps, "batchnorm_forward_train");
  if (rc != 0) return rc;
  PST_CUDA_REQUIRE(x && gamma && beta && y && saved, "%s: batchnorm_forward_train: NULL tensor",
                   c->name);
  PST_CUDA_ENTER(c);
  double *mean;
  if ((rc = coef(c, channels, 3, &mean)) != 0) return rc;
  double *scale = mean + channels, *shift = scale + channels;
  const size_t n = (size_t)rows, total = n * (size_t)channels;
  if ((rc = pst_colsum<1>(c, sum_x{x}, store_mean{mean, rows}, n, channels)) != 0) return rc;
  finish_statistics fin = {gamma, beta, moving, mean,     scale, shift,
                           saved, dmoving, rows, channels, eps,  k};
  if ((rc = pst_colsum<1>(c, squared_deviation{x, mean}, fin, n, channels)) != 0) return rc;
  bn_affine_kernel<<<pst_cuda_blocks(total), PST_CUDA_THREADS, 0, c->stream>>>(x, scale, shift, y,
                                                                              total, channels);
  CUDA_CHECK_LAUNCH();
  return 0;
}

int pst_cuda_batchnorm_forward_infer(pst_backend *b, const float *x, const float *gamma,
                                     const float *beta, const float *moving, float *y, int rows,
                                     int channels, float eps) {
  pst_cuda *c = pst_cuda_of(b);
  int rc = check(c, rows, channels, eps, "batchnorm_forward_infer");
  if (rc != 0) return rc;
  PST_CUDA_REQUIRE(x && gamma && beta && moving && y, "%s: batchnorm_forward_infer: NULL tensor",
                   c->name);
  PST_CUDA_ENTER(c);
  double *scale;
  if ((rc = coef(c, channels, 2, &scale)) != 0) return rc;
  double *shift = scale + channels;
  bn_infer_coef_kernel<<<pst_cuda_blocks((size_t)channels), PST_CUDA_THREADS, 0, c->stream>>>(
      gamma, beta, moving, scale, shift, channels, eps);
  CUDA_CHECK_LAUNCH();
  const size_t total = (size_t)rows * (size_t)channels;
  bn_affine_kernel<<<pst_cuda_blocks(total), PST_CUDA_THREADS, 0, c->stream>>>(x, scale, shift, y,
                                                                              total, channels);
  CUDA_CHECK_LAUNCH();
  return 0;
}

int pst_cuda_batchnorm_backward(pst_backend *b, const float *x, const float *gamma,
                                const float *saved, const float *dy, float *dx, float *dgamma,
                                float *dbeta, int rows, int channels, float eps) {
  pst_cuda *c = pst_cuda_of(b);
  int rc = check(c, rows, channels, eps, "batchnorm_backward");
  if (rc != 0) return rc;
  PST_CUDA_REQUIRE(x && gamma && saved && dy && dgamma && dbeta,
                   "%s: batchnorm_backward: NULL tensor", c->name);
  PST_CUDA_ENTER(c);
  double *g;
  if ((rc = coef(c, channels, 3, &g)) != 0) return rc;
  double *bx = g + channels, *c0 = bx + channels;
  finish_backward fin = {gamma, saved, dgamma, dbeta, dx ? g : nullptr, bx, c0, rows, channels};
  if ((rc = pst_colsum<2>(c, backward_terms{x, dy, saved, channels}, fin, (size_t)rows,
                          channels)) != 0)
    return rc;
  if (dx == NULL) return 0; /* a first layer: only the parameters' gradients */
  const size_t total = (size_t)rows * (size_t)channels;
  bn_dx_kernel<<<pst_cuda_blocks(total), PST_CUDA_THREADS, 0, c->stream>>>(x, dy, g, bx, c0, dx,
                                                                          total, channels);
  CUDA_CHECK_LAUNCH();
  return 0;
}
