/* Inverted dropout as one CUDA kernel. The mask is kernels/dropout_mask.h's pure function
 * of (seed, element index), the very code the CPU backend runs, so both backends drop the
 * same cells bit for bit and backward recomputes the mask rather than storing it. Its CPU
 * reference is cpu_act.c (dropout_apply). */
#include "kernels/cuda/cuda_internal.h"
#include "kernels/dropout_mask.h"

/* y = x * keep / (1 - rate); forward and backward are this same map. */
__global__ static void dropout_kernel(const float *x, float *y, size_t n, uint32_t threshold,
                                      float scale, uint64_t seed) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    y[i] = pst_dropout_keep(seed, i, threshold) ? x[i] * scale : 0.0f;
}

static int dropout_apply(pst_backend *b, const char *op, const float *x, float *y, size_t n,
                         float rate, uint64_t seed) {
  pst_cuda *c = pst_cuda_of(b);
  PST_CUDA_REQUIRE(rate >= 0.0f && rate < 1.0f, "%s: %s: rate %g outside [0, 1)", c->name, op,
                   (double)rate);
  if (n == 0) return 0;
  PST_CUDA_REQUIRE(x && y, "%s: %s: NULL tensor", c->name, op);
  PST_CUDA_ENTER(c);
  /* The scale is computed in float on the host, as cpu_act.c does, so both multiply by the
   * same number. */
  const float scale = 1.0f / (1.0f - rate);
  dropout_kernel<<<pst_cuda_blocks(n), PST_CUDA_THREADS, 0, c->stream>>>(
      x, y, n, pst_dropout_threshold(rate), scale, seed);
  CUDA_CHECK_LAUNCH();
  return 0;
}

int pst_cuda_dropout_forward(pst_backend *b, const float *x, float *y, size_t n, float rate,
                             uint64_t seed) {
  return dropout_apply(b, "dropout_forward", x, y, n, rate, seed);
}

int pst_cuda_dropout_backward(pst_backend *b, const float *dy, float *dx, size_t n, float rate,
                              uint64_t seed) {
  return dropout_apply(b, "dropout_backward", dy, dx, n, rate, seed);
}
