/* The merge layers on the GPU: element-wise add (the add layer, and the net's gradient
 * fan-in) and channel concatenation, as one-dimensional grid-stride kernels. Their CPU
 * reference is kernels/cpu_merge.c; both add in the same order, one float addition per
 * element, so the results are identical. */
#include "kernels/cuda/cuda_internal.h"

__global__ static void add_kernel(const float *x0, const float *x1, float *y, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    y[i] = x0[i] + x1[i];
}

int pst_cuda_add(pst_backend *b, const float *x0, const float *x1, float *y, size_t n) {
  pst_cuda *c = pst_cuda_of(b);
  if (n == 0) return 0;
  PST_CUDA_REQUIRE(x0 && y, "%s: add: NULL tensor", c->name);
  PST_CUDA_ENTER(c);
  if (x1 == NULL) {
    /* cudaMemcpyAsync: a size_t byte count, no other limit; device to device on the
     * backend's stream, ordered with the kernels around it. */
    if (y != x0)
      CUDA_CHECK(cudaMemcpyAsync(y, x0, n * sizeof(float), cudaMemcpyDeviceToDevice, c->stream));
    return 0;
  }
  add_kernel<<<pst_cuda_blocks(n), PST_CUDA_THREADS, 0, c->stream>>>(x0, x1, y, n);
  CUDA_CHECK_LAUNCH();
  return 0;
}

/* dst[r, 0 .. width) = src[r, 0 .. width) for rows r, with row pitches (in floats) of
 * src_pitch and dst_pitch: both directions of the concatenation. A kernel rather than
 * cudaMemcpy2DAsync, whose reference documents a limit on the pitches (cudaDeviceProp's
 * memPitch) but none on the number of rows, which here is batch x H x W; this one-
 * dimensional grid-stride loop has no limit but memory. */
__global__ static void strided_copy_kernel(const float *src, size_t src_pitch, float *dst,
                                           size_t dst_pitch, size_t rows, size_t width) {
  const size_t total = rows * width;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    const size_t r = i / width, k = i % width;
    dst[r * dst_pitch + k] = src[r * src_pitch + k];
  }
}

static int concat_copy(pst_backend *b, const char *op, const float *src, size_t src_pitch,
                       float *dst, size_t dst_pitch, size_t rows, int c_, int y_c, int offset) {
  pst_cuda *c = pst_cuda_of(b);
  if (rows == 0) return 0;
  PST_CUDA_REQUIRE(src && dst && c_ > 0 && offset >= 0 && y_c >= c_ && offset <= y_c - c_,
                   "%s: %s: bad arguments (c %d, y_c %d, offset %d)", c->name, op, c_, y_c,
                   offset);
  PST_CUDA_ENTER(c);
  strided_copy_kernel<<<pst_cuda_blocks(rows * (size_t)c_), PST_CUDA_THREADS, 0, c->stream>>>(
      src, src_pitch, dst, dst_pitch, rows, (size_t)c_);
  CUDA_CHECK_LAUNCH();
  return 0;
}

int pst_cuda_concat_forward(pst_backend *b, const float *x, float *y, size_t rows, int c,
                            int y_c, int offset) {
  return concat_copy(b, "concat_forward", x, (size_t)c, y ? y + offset : NULL, (size_t)y_c, rows,
                     c, y_c, offset);
}

int pst_cuda_concat_backward(pst_backend *b, const float *dy, float *dx, size_t rows, int c,
                             int y_c, int offset) {
  return concat_copy(b, "concat_backward", dy ? dy + offset : NULL, (size_t)y_c, dx, (size_t)c,
                     rows, c, y_c, offset);
}
