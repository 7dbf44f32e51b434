/* Batch norm's device code (kernels/cuda/norm.cu has the entry points and says why these
 * are plain kernels): the column sums' contributions and per-channel epilogues
 * (reduce.cuh), and the element-wise passes. Apart from norm.cu so that it compiles without
 * nvcc too: emulated_kernels_test runs it on the CPU (kernels/cuda/emulate.h). */
#ifndef PSTRAIN_KERNELS_CUDA_NORM_KERNELS_CUH
#define PSTRAIN_KERNELS_CUDA_NORM_KERNELS_CUH

#include <math.h>
#include <stddef.h>

namespace {

/* ---- contributions and epilogues of the column sums ---- */

struct sum_x {
  const float *x;
  __device__ void operator()(size_t i, int, double *acc) const { acc[0] += x[i]; }
};

struct squared_deviation {
  const float *x;
  const double *mean;
  __device__ void operator()(size_t i, int ch, double *acc) const {
    double d = (double)x[i] - mean[ch];
    acc[0] += d * d;
  }
};

/* mean[c] = sum / rows, as the CPU divides. */
struct store_mean {
  double *mean;
  int rows;
  __device__ void operator()(int ch, const double *s) const { mean[ch] = s[0] / rows; }
};

/* From the squared deviations: the saved mean and inverse standard deviation, the moving
 * statistics' change, and y = x * scale + shift's coefficients (cpu_norm.c, line for line). */
struct finish_statistics {
  const float *gamma, *beta, *moving;
  double *mean, *scale, *shift; /* mean[C] in, scale[C] and shift[C] out */
  float *saved, *dmoving;
  int rows, channels;
  float eps, k;
  __device__ void operator()(int ch, const double *s) const {
    double m = mean[ch], var = s[0] / rows, is = 1.0 / sqrt(var + (double)eps);
    saved[ch] = (float)m;
    saved[channels + ch] = (float)is;
    if (dmoving != nullptr && moving != nullptr) {
      dmoving[ch] = (float)((m - moving[ch]) * k);
      dmoving[channels + ch] = (float)((var - moving[channels + ch]) * k);
    }
    scale[ch] = (double)gamma[ch] * is;
    shift[ch] = (double)beta[ch] - m * scale[ch];
  }
};

/* Backward's two sums per channel: sum of dy, and of dy * xhat with xhat from the saved
 * float mean and inverse standard deviation, as the CPU computes it. */
struct backward_terms {
  const float *x, *dy, *saved;
  int channels;
  __device__ void operator()(size_t i, int ch, double *acc) const {
    acc[0] += dy[i];
    acc[1] += (double)dy[i] * (((double)x[i] - saved[ch]) * saved[channels + ch]);
  }
};

/* dbeta, dgamma, and dx = g * dy + bx * x + c0's coefficients (cpu_norm.c's expansion of
 * backend.h's formula). */
struct finish_backward {
  const float *gamma, *saved;
  float *dgamma, *dbeta;
  double *g, *bx, *c0; /* [C] each; NULL when there is no dx */
  int rows, channels;
  __device__ void operator()(int ch, const double *s) const {
    dbeta[ch] = (float)s[0];
    dgamma[ch] = (float)s[1];
    if (g == nullptr) return;
    const double inv = saved[channels + ch];
    const double gg = (double)gamma[ch] * inv;
    const double b = -gg * inv * s[1] / rows;
    g[ch] = gg;
    bx[ch] = b;
    c0[ch] = -gg * s[0] / rows - b * (double)saved[ch];
  }
};

}  // namespace

/* ---- element-wise passes (one-dimensional grid, grid-stride: any size) ---- */

/* y[r, c] = x[r, c] * scale[c] + shift[c], in double, rounded once. */
__global__ static void bn_affine_kernel(const float *x, const double *scale, const double *shift,
                                        float *y, size_t total, int channels) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    const int ch = (int)(i % (size_t)channels);
    y[i] = (float)((double)x[i] * scale[ch] + shift[ch]);
  }
}

/* dx[r, c] = g[c] * dy[r, c] + bx[c] * x[r, c] + c0[c]. */
__global__ static void bn_dx_kernel(const float *x, const float *dy, const double *g,
                                    const double *bx, const double *c0, float *dx, size_t total,
                                    int channels) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    const int ch = (int)(i % (size_t)channels);
    dx[i] = (float)(g[ch] * dy[i] + bx[ch] * x[i] + c0[ch]);
  }
}

/* Inference: scale = gamma / sqrt(moving var + eps), shift = beta - moving mean * scale. */
__global__ static void bn_infer_coef_kernel(const float *gamma, const float *beta,
                                            const float *moving, double *scale, double *shift,
                                            int channels, float eps) {
  for (long long ch = (long long)blockIdx.x * blockDim.x + threadIdx.x; ch < channels;
       ch += (long long)gridDim.x * blockDim.x) {
    scale[ch] = (double)gamma[ch] / sqrt((double)moving[channels + ch] + (double)eps);
    shift[ch] = (double)beta[ch] - (double)moving[ch] * scale[ch];
  }
}

#endif
