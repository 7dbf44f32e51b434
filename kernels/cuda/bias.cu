/* Bias add and bias gradient, shared by dense and conv2d: in both layouts ([B, out] and
 * NHWC [B*H*W, Cout]) the bias index is the innermost one, so a bias is a row vector added
 * to every row of a [rows, cols] matrix, and its gradient is the column sum of dy. */
#include "kernels/cuda/cuda_internal.h"

/* y[rows, cols] += bias[cols] */
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

/* The column sum runs in two passes so that its order of additions is fixed (results are
 * reproducible run to run, unlike atomics): pass 1 gives each block 32 columns and one
 * chunk of rows, 8 rows in flight per column with the 32 lanes of a warp reading 32
 * adjacent floats; pass 2 adds the per-chunk partial sums of each column in chunk order. */
#define BG_COLS 32
#define BG_LANES 8
#define BG_MAX_CHUNKS 64
#define BG_MIN_ROWS_PER_CHUNK 256

__global__ static void bias_grad_partial_kernel(const float *dy, float *part, size_t rows,
                                                int cols, size_t rows_per_chunk) {
  __shared__ float sh[BG_LANES][BG_COLS + 1];
  int col = blockIdx.x * BG_COLS + threadIdx.x;
  size_t r0 = (size_t)blockIdx.y * rows_per_chunk;
  size_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float acc = 0.0f;
  if (col < cols)
    for (size_t r = r0 + threadIdx.y; r < r1; r += BG_LANES) acc += dy[r * (size_t)cols + col];
  sh[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float s = 0.0f;
    for (int i = 0; i < BG_LANES; i++) s += sh[i][threadIdx.x];
    part[(size_t)blockIdx.y * cols + col] = s;
  }
}

__global__ static void bias_grad_final_kernel(const float *part, float *db, int chunks,
                                              int cols) {
  for (int col = blockIdx.x * blockDim.x + threadIdx.x; col < cols;
       col += gridDim.x * blockDim.x) {
    float s = 0.0f;
    for (int k = 0; k < chunks; k++) s += part[(size_t)k * cols + col];
    db[col] = s;
  }
}

int pst_cuda_bias_grad(pst_cuda *c, const float *dy, float *db, size_t rows, int cols) {
  if (cols <= 0) return 0;
  if (rows == 0) {
    CUDA_CHECK(cudaMemsetAsync(db, 0, (size_t)cols * sizeof(float), c->stream));
    return 0;
  }
  size_t chunks = (rows + BG_MIN_ROWS_PER_CHUNK - 1) / BG_MIN_ROWS_PER_CHUNK;
  if (chunks > BG_MAX_CHUNKS) chunks = BG_MAX_CHUNKS;
  size_t rows_per_chunk = (rows + chunks - 1) / chunks;
  float *part = db;
  if (chunks > 1) {
    int rc = pst_cuda_buffer_reserve(c, &c->reduce, chunks * (size_t)cols * sizeof(float),
                                     "bias-gradient partial sums");
    if (rc != 0) return rc;
    part = (float *)c->reduce.p;
  }
  dim3 grid((unsigned)((cols + BG_COLS - 1) / BG_COLS), (unsigned)chunks);
  dim3 block(BG_COLS, BG_LANES);
  bias_grad_partial_kernel<<<grid, block, 0, c->stream>>>(dy, part, rows, cols, rows_per_chunk);
  CUDA_CHECK_LAUNCH();
  if (chunks > 1) {
    bias_grad_final_kernel<<<pst_cuda_blocks((size_t)cols), PST_CUDA_THREADS, 0, c->stream>>>(
        part, db, (int)chunks, cols);
    CUDA_CHECK_LAUNCH();
  }
  return 0;
}
