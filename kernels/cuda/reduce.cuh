/* Per-column sums over the rows of a [rows, cols] matrix with the columns innermost (the
 * layout of every [B*H*W, C] activation), in double and in a fixed order: the batch-norm
 * statistics and gradients (norm.cu) and the bias gradient (bias.cu). Plain kernels, so
 * that no library limit on the number of rows applies: rows may be anything a size_t holds,
 * cols anything an int holds.
 *
 * Two passes and no atomics, so the order of the additions depends on the shape alone and a
 * result is the same run to run:
 *   1. pst_colsum_partial, on a grid of column tiles (x) by row chunks (y): a block of
 *      PST_COLSUM_THREADS threads covers `tile` adjacent columns (a power of two up to 32,
 *      so that a warp reads 32 adjacent floats) with PST_COLSUM_THREADS / tile threads on
 *      the rows of its chunk, each thread summing every (threads / tile)-th row of it; the
 *      block then adds its threads' sums in a fixed tree and writes one partial sum per
 *      column and chunk.
 *   2. pst_colsum_final, one thread per column: adds the chunks' partial sums in chunk
 *      order and hands the column's K sums to an epilogue (the operation's own per-column
 *      arithmetic: a mean, an inverse standard deviation, a gradient).
 * A functor gives each element's K contributions: K = 1 for a plain sum, 2 for the two sums
 * of batch norm's backward pass, which then read x and dy once.
 *
 * Launch limits (CUDA C++ Programming Guide, technical specifications per compute
 * capability): blocks of PST_COLSUM_THREADS = 256 threads (<= 1024); grid x = ceil(cols /
 * tile) <= cols <= 2^31 - 1; grid y = chunks <= PST_COLSUM_MAX_CHUNKS = 1024 (<= 65535);
 * K * 256 doubles of shared memory (4 KiB for K = 2, below the 48 KiB any block may have
 * without opting in). The final pass is one-dimensional with a grid-stride loop.
 *
 * The device code and the plan compile without nvcc too (kernels/cuda/emulate.h runs them
 * on the CPU in emulated_kernels_test); the launcher needs nvcc (__CUDACC__). */
#ifndef PSTRAIN_KERNELS_CUDA_REDUCE_CUH
#define PSTRAIN_KERNELS_CUDA_REDUCE_CUH

#include <stddef.h>

#ifdef __CUDACC__
#include "kernels/cuda/cuda_internal.h"
#endif

#define PST_COLSUM_THREADS 256
#define PST_COLSUM_MAX_CHUNKS 1024
/* Enough blocks to fill a large GPU (an H100 has 132 multiprocessors) several times over. */
#define PST_COLSUM_TARGET_BLOCKS 2048
/* Each thread sums at least this many rows of its chunk before the block's tree. */
#define PST_COLSUM_MIN_ROWS_PER_THREAD 8

/* The grid of one column sum: a pure function of (rows, cols), hence the fixed order. */
typedef struct {
  unsigned tile;          /* columns per block: a power of two, 1 .. 32 */
  unsigned lanes;         /* threads per column: PST_COLSUM_THREADS / tile */
  unsigned col_blocks;    /* grid x */
  unsigned chunks;        /* grid y */
  size_t rows_per_chunk;
} pst_colsum_grid;

static inline pst_colsum_grid pst_colsum_plan(size_t rows, int cols) {
  pst_colsum_grid g;
  g.tile = 1;
  while (g.tile < 32 && (int)g.tile < cols) g.tile <<= 1;
  g.lanes = PST_COLSUM_THREADS / g.tile;
  g.col_blocks = (unsigned)(((size_t)cols + g.tile - 1) / g.tile);
  size_t want = PST_COLSUM_TARGET_BLOCKS / g.col_blocks;
  if (want < 1) want = 1;
  if (want > PST_COLSUM_MAX_CHUNKS) want = PST_COLSUM_MAX_CHUNKS;
  size_t per_chunk_min = (size_t)g.lanes * PST_COLSUM_MIN_ROWS_PER_THREAD;
  size_t by_rows = (rows + per_chunk_min - 1) / per_chunk_min;
  size_t chunks = by_rows < want ? by_rows : want;
  if (chunks < 1) chunks = 1;
  g.rows_per_chunk = (rows + chunks - 1) / chunks;
  if (g.rows_per_chunk < 1) g.rows_per_chunk = 1;
  /* No empty chunk at the end. */
  g.chunks = (unsigned)((rows + g.rows_per_chunk - 1) / g.rows_per_chunk);
  if (g.chunks < 1) g.chunks = 1;
  return g;
}

/* part[(chunk * K + k) * cols + col] = the chunk's sum of column col's k-th contribution.
 * f(i, col, acc) adds element i (= row * cols + col) into acc[0 .. K). */
template <int K, typename F>
__global__ void pst_colsum_partial(F f, size_t rows, int cols, size_t rows_per_chunk,
                                   double *part) {
  __shared__ double sh[K][PST_COLSUM_THREADS];
  const unsigned t = threadIdx.y * blockDim.x + threadIdx.x;
  const long long col = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t r0 = (size_t)blockIdx.y * rows_per_chunk;
  const size_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  double acc[K];
  for (int k = 0; k < K; k++) acc[k] = 0.0;
  if (col < cols)
    for (size_t r = r0 + threadIdx.y; r < r1; r += blockDim.y)
      f(r * (size_t)cols + (size_t)col, (int)col, acc);
  for (int k = 0; k < K; k++) sh[k][t] = acc[k];
  __syncthreads();
  /* blockDim.y is a power of two: halve it, always adding the same pairs. */
  for (unsigned s = blockDim.y / 2; s > 0; s >>= 1) {
    if (threadIdx.y < s)
      for (int k = 0; k < K; k++) sh[k][t] += sh[k][t + s * blockDim.x];
    __syncthreads();
  }
  if (threadIdx.y == 0 && col < cols)
    for (int k = 0; k < K; k++)
      part[((size_t)blockIdx.y * K + k) * (size_t)cols + (size_t)col] = sh[k][threadIdx.x];
}

/* For each column, the chunks' sums in chunk order, then epilogue(col, sums[K]). */
template <int K, typename E>
__global__ void pst_colsum_final(const double *part, unsigned chunks, int cols, E epilogue) {
  for (long long col = (long long)blockIdx.x * blockDim.x + threadIdx.x; col < cols;
       col += (long long)gridDim.x * blockDim.x) {
    double s[K];
    for (int k = 0; k < K; k++) {
      s[k] = 0.0;
      for (unsigned j = 0; j < chunks; j++) s[k] += part[((size_t)j * K + k) * (size_t)cols + col];
    }
    epilogue((int)col, s);
  }
}

#ifdef __CUDACC__
/* Enqueues both passes on the backend's stream; the partial sums live in c->reduce. */
template <int K, typename F, typename E>
static int pst_colsum(pst_cuda *c, F f, E epilogue, size_t rows, int cols) {
  PST_CUDA_REQUIRE(rows > 0 && cols > 0, "%s: column sum of %zu x %d", c->name, rows, cols);
  const pst_colsum_grid g = pst_colsum_plan(rows, cols);
  int rc = pst_cuda_buffer_reserve(c, &c->reduce,
                                   (size_t)g.chunks * K * (size_t)cols * sizeof(double),
                                   "column-sum partial sums");
  if (rc != 0) return rc;
  double *part = (double *)c->reduce.p;
  dim3 grid(g.col_blocks, g.chunks), block(g.tile, g.lanes);
  pst_colsum_partial<K><<<grid, block, 0, c->stream>>>(f, rows, cols, g.rows_per_chunk, part);
  CUDA_CHECK_LAUNCH();
  pst_colsum_final<K><<<pst_cuda_blocks((size_t)cols), PST_CUDA_THREADS, 0, c->stream>>>(
      part, g.chunks, cols, epilogue);
  CUDA_CHECK_LAUNCH();
  return 0;
}
#endif

#endif
