/* Bias add and bias gradient, shared by dense and conv2d: in both layouts ([B, out] and
 * NHWC [B*H*W, Cout]) the bias index is the innermost one, so a bias is a row vector added
 * to every row of a [rows, cols] matrix, and its gradient is the column sum of dy. */
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/reduce.cuh"

/* y[rows, cols] += bias[cols]; one-dimensional grid-stride loop (any size). */
__global__ static void bias_add_kernel(float *y, const float *bias, size_t total, int cols) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x)
    y[i] += bias[i % (size_t)cols];
}

int pst_cuda_bias_add(pst_cuda *c, float *y, const float *bias, size_t rows, int cols) {
  size_t total = rows * (size_t)cols;
  if (total == 0) return 0;
  bias_add_kernel<<<pst_cuda_blocks(total), PST_CUDA_THREADS, 0, c->stream>>>(y, bias, total,
                                                                               cols);
  CUDA_CHECK_LAUNCH();
  return 0;
}

namespace {

/* db[col] = the column sum, rounded once to float. */
struct sum_dy {
  const float *dy;
  __device__ void operator()(size_t i, int, double *acc) const { acc[0] += dy[i]; }
};

struct store_bias_grad {
  float *db;
  __device__ void operator()(int col, const double *s) const { db[col] = (float)s[0]; }
};

}  // namespace

/* The column sum of reduce.cuh: in double, in a fixed order (reproducible run to run,
 * unlike atomics), for any number of rows. */
int pst_cuda_bias_grad(pst_cuda *c, const float *dy, float *db, size_t rows, int cols) {
  if (cols <= 0) return 0;
  if (rows == 0) {
    /* cudaMemsetAsync: a size_t byte count, on the backend's stream. */
    CUDA_CHECK(cudaMemsetAsync(db, 0, (size_t)cols * sizeof(float), c->stream));
    return 0;
  }
  return pst_colsum<1>(c, sum_dy{dy}, store_bias_grad{db}, rows, cols);
}
