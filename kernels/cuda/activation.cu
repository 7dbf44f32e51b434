/* ReLU, ReLU6 and softmax cross-entropy as CUDA kernels. The element-wise ones are
 * one-dimensional grid-stride loops over size_t indices (pst_cuda_blocks): any size. */
#include <limits.h>
#include <math.h>

#include "kernels/cuda/cuda_internal.h"

__global__ static void relu_forward_kernel(const float *x, float *y, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float v = x[i];
    y[i] = v > 0.0f ? v : 0.0f;
  }
}

__global__ static void relu_backward_kernel(const float *y, const float *dy, float *dx,
                                            size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

int pst_cuda_relu_forward(pst_backend *b, const float *x, float *y, size_t n) {
  pst_cuda *c = pst_cuda_of(b);
  if (n == 0) return 0;
  PST_CUDA_REQUIRE(x && y, "%s: relu_forward: NULL tensor", c->name);
  PST_CUDA_ENTER(c);
  relu_forward_kernel<<<pst_cuda_blocks(n), PST_CUDA_THREADS, 0, c->stream>>>(x, y, n);
  CUDA_CHECK_LAUNCH();
  return 0;
}

int pst_cuda_relu_backward(pst_backend *b, const float *y, const float *dy, float *dx, size_t n) {
  pst_cuda *c = pst_cuda_of(b);
  if (n == 0) return 0;
  PST_CUDA_REQUIRE(y && dy && dx, "%s: relu_backward: NULL tensor", c->name);
  PST_CUDA_ENTER(c);
  relu_backward_kernel<<<pst_cuda_blocks(n), PST_CUDA_THREADS, 0, c->stream>>>(y, dy, dx, n);
  CUDA_CHECK_LAUNCH();
  return 0;
}

__global__ static void relu6_forward_kernel(const float *x, float *y, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float v = x[i] > 0.0f ? x[i] : 0.0f;
    y[i] = v < 6.0f ? v : 6.0f;
  }
}

__global__ static void relu6_backward_kernel(const float *y, const float *dy, float *dx,
                                             size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dx[i] = (y[i] > 0.0f && y[i] < 6.0f) ? dy[i] : 0.0f;
}

int pst_cuda_relu6_forward(pst_backend *b, const float *x, float *y, size_t n) {
  pst_cuda *c = pst_cuda_of(b);
  if (n == 0) return 0;
  PST_CUDA_REQUIRE(x && y, "%s: relu6_forward: NULL tensor", c->name);
  PST_CUDA_ENTER(c);
  relu6_forward_kernel<<<pst_cuda_blocks(n), PST_CUDA_THREADS, 0, c->stream>>>(x, y, n);
  CUDA_CHECK_LAUNCH();
  return 0;
}

int pst_cuda_relu6_backward(pst_backend *b, const float *y, const float *dy, float *dx, size_t n) {
  pst_cuda *c = pst_cuda_of(b);
  if (n == 0) return 0;
  PST_CUDA_REQUIRE(y && dy && dx, "%s: relu6_backward: NULL tensor", c->name);
  PST_CUDA_ENTER(c);
  relu6_backward_kernel<<<pst_cuda_blocks(n), PST_CUDA_THREADS, 0, c->stream>>>(y, dy, dx, n);
  CUDA_CHECK_LAUNCH();
  return 0;
}

/* Softmax cross-entropy in one block: each of its 8 warps takes rows warp, warp + 8, ...; the 32
 * lanes share a row's classes. Per-row losses are added per warp, then the warps' sums in
 * warp order, so the result does not depend on scheduling. A few hundred rows of ten
 * classes are far too little work to be worth a grid-wide reduction. */
#define XENT_THREADS 256
#define XENT_WARPS (XENT_THREADS / 32)
#define FULL_MASK 0xffffffffu

__global__ static void __launch_bounds__(XENT_THREADS)
    softmax_xent_kernel(const float *logits, const int32_t *labels, float *dlogits, int batch,
                        int classes, float scale, pst_cuda_xent_stats *stats) {
  __shared__ double sh_loss[XENT_WARPS];
  __shared__ int sh_correct[XENT_WARPS];
  __shared__ int sh_bad[XENT_WARPS];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  double loss = 0.0;
  int correct = 0, bad = 0;
  for (int r = warp; r < batch; r += XENT_WARPS) {
    const float *row = logits + (size_t)r * (size_t)classes;
    /* Maximum and the index of its first occurrence, as the CPU backend's argmax. */
    float m = -INFINITY;
    int mi = INT_MAX;
    for (int j = lane; j < classes; j += 32) {
      float v = row[j];
      if (v > m) {
        m = v;
        mi = j;
      }
    }
    for (int off = 16; off > 0; off >>= 1) {
      float om = __shfl_xor_sync(FULL_MASK, m, off);
      int oi = __shfl_xor_sync(FULL_MASK, mi, off);
      if (om > m || (om == m && oi < mi)) {
        m = om;
        mi = oi;
      }
    }
    float s = 0.0f;
    for (int j = lane; j < classes; j += 32) s += expf(row[j] - m);
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(FULL_MASK, s, off);
    const int label = labels[r];
    const int ok = label >= 0 && label < classes;
    if (lane == 0) {
      if (ok) {
        loss += (double)logf(s) - (double)(row[label] - m);
        correct += mi == label;
      } else {
        bad++;
      }
    }
    /* Every lane has read what it needs of the row before any lane overwrites it, so
     * dlogits may alias logits. */
    __syncwarp();
    if (dlogits) {
      float *drow = dlogits + (size_t)r * (size_t)classes;
      const float inv = 1.0f / s;
      for (int j = lane; j < classes; j += 32) {
        float p = expf(row[j] - m) * inv;
        drow[j] = (p - (j == label ? 1.0f : 0.0f)) * scale;
      }
    }
  }
  if (lane == 0) {
    sh_loss[warp] = loss;
    sh_correct[warp] = correct;
    sh_bad[warp] = bad;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double l = 0.0;
    int cnt = 0, nbad = 0;
    for (int i = 0; i < XENT_WARPS; i++) {
      l += sh_loss[i];
      cnt += sh_correct[i];
      nbad += sh_bad[i];
    }
    stats->loss_sum = l;
    stats->correct = cnt;
    stats->bad_labels = nbad;
  }
}

int pst_cuda_softmax_xent(pst_backend *b, const float *logits, const int32_t *labels,
                          float *dlogits, int batch, int classes, float scale, double *loss_sum,
                          int *correct) {
  pst_cuda *c = pst_cuda_of(b);
  PST_CUDA_REQUIRE(batch > 0 && classes > 0, "%s: softmax_xent: bad sizes batch=%d classes=%d",
                   c->name, batch, classes);
  PST_CUDA_REQUIRE(logits && labels, "%s: softmax_xent: NULL tensor", c->name);
  PST_CUDA_ENTER(c);
  /* One block of XENT_THREADS (<= 1024) whose warps take the rows in turn: any batch, and
   * a single block so that the loss is summed in one fixed order. */
  softmax_xent_kernel<<<1, XENT_THREADS, 0, c->stream>>>(logits, labels, dlogits, batch, classes,
                                                         scale, c->d_stats);
  CUDA_CHECK_LAUNCH();
  /* The one small download, to pinned memory: the host outputs need the stream drained up
   * to here (cudaMemcpyAsync then cudaStreamSynchronize, which is also where a fault of an
   * earlier kernel of this step would surface). */
  CUDA_CHECK(cudaMemcpyAsync(c->h_stats, c->d_stats, sizeof *c->h_stats, cudaMemcpyDeviceToHost,
                             c->stream));
  CUDA_CHECK(cudaStreamSynchronize(c->stream));
  PST_CUDA_REQUIRE(c->h_stats->bad_labels == 0,
                   "%s: softmax_xent: %d of %d labels are outside [0, %d)", c->name,
                   c->h_stats->bad_labels, batch, classes);
  if (loss_sum) *loss_sum = c->h_stats->loss_sum;
  if (correct) *correct = c->h_stats->correct;
  return 0;
}
