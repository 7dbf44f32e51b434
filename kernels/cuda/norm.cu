/* Batch normalisation through cuDNN (cudnnBatchNormalizationForwardTraining, ...Inference,
 * ...Backward in CUDNN_BATCHNORM_SPATIAL mode), with the formulas of backend.h.
 *
 * Layout: x is [rows, C] with the channels innermost (NHWC images as [B*H*W, C], flat
 * vectors [B, C]). cuDNN sees it as an NCHW tensor of N = rows, C, H = W = 1, whose strides
 * (C, 1, 1, 1) are exactly that layout; spatial mode then reduces each channel over N*H*W =
 * rows, as the CPU backend does.
 *
 * The moving statistics' change (dmoving) needs the batch mean and the biased variance.
 * cuDNN gives the mean and 1/sqrt(var + eps) as its saved values, and with an exponential
 * average factor of 1 its "running" outputs become the batch mean and the batch variance
 * with Bessel's correction (cuDNN's running variance is the unbiased one, as PyTorch relies
 * on); the kernel below takes the correction back out, var = unbiased * (rows - 1) / rows,
 * rather than recovering var from 1/sqrt(var + eps), which loses digits when var << eps.
 * The parity test (cuda_parity_test.c) compares dmoving with the CPU's on a GPU machine.
 *
 * cuDNN 9 marks these functions deprecated (in favour of its graph API) but keeps them;
 * they warn only with CUDNN_WARN_DEPRECATED, which this build does not define. */
#include "kernels/cuda/cuda_internal.h"

namespace {

/* The two descriptors of one call, destroyed on every path out. */
struct bn_descs {
  cudnnTensorDescriptor_t x = nullptr, bn = nullptr;
  ~bn_descs() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (bn) cudnnDestroyTensorDescriptor(bn);
  }
};

int make_descs(bn_descs *d, int rows, int channels) {
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&d->x));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&d->bn));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, rows,
                                         channels, 1, 1));
  CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(d->bn, d->x, CUDNN_BATCHNORM_SPATIAL));
  return 0;
}

int check(int rows, int channels, float eps, const char *op) {
  PST_CUDA_REQUIRE(rows > 0 && channels > 0 && eps > 0.0f &&
                       (size_t)rows * (size_t)channels <= ((size_t)1 << 40),
                   "%s: bad shape %d x %d or eps %g", op, rows, channels, (double)eps);
  return 0;
}

}  // namespace

/* dmoving = ((mean - moving_mean) * k, (var - moving_var) * k) from cuDNN's batch mean and
 * unbiased variance (run[0..C) and run[C..2C)). */
__global__ static void bn_moving_delta_kernel(const float *run, const float *moving, float *dmoving,
                                              int channels, int rows, float k) {
  double unbias = rows > 1 ? (double)(rows - 1) / rows : 0.0; /* one row: variance 0 */
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < channels; c += gridDim.x * blockDim.x) {
    dmoving[c] = (float)(((double)run[c] - moving[c]) * k);
    dmoving[channels + c] =
        (float)(((double)run[channels + c] * unbias - moving[channels + c]) * k);
  }
}

int pst_cuda_batchnorm_forward_train(pst_backend *b, const float *x, const float *gamma,
                                     const float *beta, float *y, int rows, int channels,
                                     float eps, const float *moving, float k, float *saved,
                                     float *dmoving) {
  pst_cuda *c = pst_cuda_of(b);
  PST_CUDA_ENTER(c);
  int rc = check(rows, channels, eps, "batchnorm_forward_train");
  if (rc != 0) return rc;
  bn_descs d;
  if ((rc = make_descs(&d, rows, channels)) != 0) return rc;
  size_t stat_bytes = 2 * (size_t)channels * sizeof(float);
  if ((rc = pst_cuda_buffer_reserve(c, &c->bn_stats, stat_bytes, "batchnorm statistics")) != 0)
    return rc;
  float *run = (float *)c->bn_stats.p;
  /* With factor 1 the running outputs are (1 - 1) * old + batch: zeroed first, so that
   * whatever the buffer held (a NaN times 0 is a NaN) cannot leak in. */
  CUDA_CHECK(cudaMemsetAsync(run, 0, stat_bytes, c->stream));
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      c->cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.x, x, d.x, y, d.bn, gamma, beta, 1.0,
      run, run + channels, (double)eps, saved, saved + channels));
  if (dmoving != NULL && moving != NULL) {
    bn_moving_delta_kernel<<<pst_cuda_blocks((size_t)channels), PST_CUDA_THREADS, 0,
                             c->stream>>>(run, moving, dmoving, channels, rows, k);
    CUDA_CHECK_LAUNCH();
  }
  return 0;
}

int pst_cuda_batchnorm_forward_infer(pst_backend *b, const float *x, const float *gamma,
                                     const float *beta, const float *moving, float *y, int rows,
                                     int channels, float eps) {
  pst_cuda *c = pst_cuda_of(b);
  PST_CUDA_ENTER(c);
  int rc = check(rows, channels, eps, "batchnorm_forward_infer");
  if (rc != 0) return rc;
  bn_descs d;
  if ((rc = make_descs(&d, rows, channels)) != 0) return rc;
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
      c->cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.x, x, d.x, y, d.bn, gamma, beta, moving,
      moving + channels, (double)eps));
  return 0;
}

int pst_cuda_batchnorm_backward(pst_backend *b, const float *x, const float *gamma,
                                const float *saved, const float *dy, float *dx, float *dgamma,
                                float *dbeta, int rows, int channels, float eps) {
  pst_cuda *c = pst_cuda_of(b);
  PST_CUDA_ENTER(c);
  int rc = check(rows, channels, eps, "batchnorm_backward");
  if (rc != 0) return rc;
  bn_descs d;
  if ((rc = make_descs(&d, rows, channels)) != 0) return rc;
  if (dx == NULL) {
    /* cuDNN always writes dx: a first layer's goes to scratch. */
    size_t bytes = (size_t)rows * (size_t)channels * sizeof(float);
    if ((rc = pst_cuda_buffer_reserve(c, &c->bn_dx, bytes, "batchnorm input gradient")) != 0)
      return rc;
    dx = (float *)c->bn_dx.p;
  }
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnBatchNormalizationBackward(
      c->cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, d.x, x, d.x, dy, d.x, dx, d.bn,
      gamma, dgamma, dbeta, (double)eps, saved, saved + channels));
  return 0;
}
