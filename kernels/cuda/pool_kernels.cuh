/* Pooling's device code (kernels/cuda/pool.cu has the entry points and says why these are
 * plain kernels). Apart from pool.cu so that it compiles without nvcc too:
 * emulated_kernels_test runs it on the CPU (kernels/cuda/emulate.h). */
#ifndef PSTRAIN_KERNELS_CUDA_POOL_KERNELS_CUH
#define PSTRAIN_KERNELS_CUDA_POOL_KERNELS_CUH

#include <stddef.h>

#include "kernels/backend.h"

/* The real (unpadded) cells of the window of output (oh, ow): rows [h0, h1), cols [w0, w1). */
__device__ static inline void pool_window(const pst_window_shape &s, int oh, int ow, int *h0,
                                          int *h1, int *w0, int *w1) {
  *h0 = oh * s.stride_h - s.pad_top;
  *w0 = ow * s.stride_w - s.pad_left;
  *h1 = min(*h0 + s.k_h, s.in_h);
  *w1 = min(*w0 + s.k_w, s.in_w);
  *h0 = max(*h0, 0);
  *w0 = max(*w0, 0);
}

/* ---- max pooling ----------------------------------------------------------------------
 *
 * Forward: one thread per output cell and channel, the maximum over the window's real cells
 * (a window without any gives 0, as on the CPU). Backward gathers: one thread per input
 * cell and channel adds the dy of every window whose first maximum (row-major, the first
 * cell equal to the window's y) it is, in window order, as the CPU adds them. No atomics,
 * so the result does not depend on scheduling. */

__global__ static void maxpool_forward_kernel(pst_window_shape s, const float *x, float *y,
                                              size_t total) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    const int ch = (int)(i % (size_t)s.in_c);
    size_t t = i / (size_t)s.in_c;
    const int ow = (int)(t % (size_t)s.out_w);
    t /= (size_t)s.out_w;
    const int oh = (int)(t % (size_t)s.out_h);
    const size_t n = t / (size_t)s.out_h;
    int h0, h1, w0, w1;
    pool_window(s, oh, ow, &h0, &h1, &w0, &w1);
    float m = 0.0f;
    if (h0 < h1 && w0 < w1) {
      const float *xn = x + n * (size_t)s.in_h * (size_t)s.in_w * (size_t)s.in_c + (size_t)ch;
      m = xn[((size_t)h0 * (size_t)s.in_w + (size_t)w0) * (size_t)s.in_c];
      for (int ih = h0; ih < h1; ih++)
        for (int iw = w0; iw < w1; iw++) {
          const float v = xn[((size_t)ih * (size_t)s.in_w + (size_t)iw) * (size_t)s.in_c];
          m = v > m ? v : m;
        }
    }
    y[i] = m;
  }
}

__global__ static void maxpool_backward_kernel(pst_window_shape s, const float *x,
                                               const float *y, const float *dy, float *dx,
                                               size_t total) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    const int ch = (int)(i % (size_t)s.in_c);
    size_t t = i / (size_t)s.in_c;
    const int iw = (int)(t % (size_t)s.in_w);
    t /= (size_t)s.in_w;
    const int ih = (int)(t % (size_t)s.in_h);
    const size_t n = t / (size_t)s.in_h;
    const float *xn = x + n * (size_t)s.in_h * (size_t)s.in_w * (size_t)s.in_c + (size_t)ch;
    const size_t yn = n * (size_t)s.out_h * (size_t)s.out_w;
    /* Output windows that cover (ih, iw): oh * stride - pad <= ih < oh * stride - pad + k. */
    const int ph = ih + s.pad_top, pw = iw + s.pad_left;
    const int oh0 = ph < s.k_h ? 0 : (ph - s.k_h) / s.stride_h + 1;
    const int oh1 = min(ph / s.stride_h, s.out_h - 1);
    const int ow0 = pw < s.k_w ? 0 : (pw - s.k_w) / s.stride_w + 1;
    const int ow1 = min(pw / s.stride_w, s.out_w - 1);
    float g = 0.0f;
    for (int oh = oh0; oh <= oh1; oh++)
      for (int ow = ow0; ow <= ow1; ow++) {
        const size_t o = ((yn + (size_t)oh * (size_t)s.out_w + (size_t)ow) * (size_t)s.in_c) +
                         (size_t)ch;
        const float m = y[o];
        int h0, h1, w0, w1;
        pool_window(s, oh, ow, &h0, &h1, &w0, &w1);
        /* This window's first maximum: is it this cell? */
        int found = 0, mine = 0;
        for (int wh = h0; wh < h1 && !found; wh++)
          for (int ww = w0; ww < w1 && !found; ww++)
            if (xn[((size_t)wh * (size_t)s.in_w + (size_t)ww) * (size_t)s.in_c] == m) {
              found = 1;
              mine = wh == ih && ww == iw;
            }
        if (mine) g += dy[o];
      }
    dx[i] = g;
  }
}

/* ---- average pooling ---------------------------------------------------------------
 *
 * Not cuDNN here, deliberately: (1) TF/Keras "same" padding puts the odd padding cell after
 * the data, which cuDNN's symmetric padding cannot express, and an explicitly padded copy
 * would count the padding cells in the mean, which COUNT_EXCLUDE_PADDING is meant to avoid;
 * (2) cuDNN's pooling backward wants x and y, which the backend interface does not pass
 * for average pooling (it needs neither). Two direct kernels cover
 * every geometry: forward, one thread per output cell and channel, sums its window in the
 * CPU backend's order (rows, then columns) and multiplies by 1/count; backward, one thread
 * per input cell and channel, gathers dy/count from every window that covers it, so no
 * atomics are needed and the result does not depend on scheduling. */

__global__ static void avgpool_forward_kernel(pst_window_shape s, const float *x, float *y,
                                              size_t total) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    const int ch = (int)(i % (size_t)s.in_c);
    size_t t = i / (size_t)s.in_c;
    const int ow = (int)(t % (size_t)s.out_w);
    t /= (size_t)s.out_w;
    const int oh = (int)(t % (size_t)s.out_h);
    const size_t n = t / (size_t)s.out_h;
    int h0, h1, w0, w1;
    pool_window(s, oh, ow, &h0, &h1, &w0, &w1);
    const int cells = (h1 - h0) * (w1 - w0);
    float sum = 0.0f;
    for (int ih = h0; ih < h1; ih++)
      for (int iw = w0; iw < w1; iw++)
        sum += x[((n * (size_t)s.in_h + (size_t)ih) * (size_t)s.in_w + (size_t)iw) *
                     (size_t)s.in_c + (size_t)ch];
    y[i] = cells > 0 ? sum * (1.0f / (float)cells) : 0.0f;
  }
}

__global__ static void avgpool_backward_kernel(pst_window_shape s, const float *dy, float *dx,
                                               size_t total) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    const int ch = (int)(i % (size_t)s.in_c);
    size_t t = i / (size_t)s.in_c;
    const int iw = (int)(t % (size_t)s.in_w);
    t /= (size_t)s.in_w;
    const int ih = (int)(t % (size_t)s.in_h);
    const size_t n = t / (size_t)s.in_h;
    /* Output rows whose window covers ih: oh*stride - pad <= ih < oh*stride - pad + k. */
    const int ph = ih + s.pad_top, pw = iw + s.pad_left;
    const int oh0 = ph < s.k_h ? 0 : (ph - s.k_h) / s.stride_h + 1;
    const int oh1 = min(ph / s.stride_h, s.out_h - 1);
    const int ow0 = pw < s.k_w ? 0 : (pw - s.k_w) / s.stride_w + 1;
    const int ow1 = min(pw / s.stride_w, s.out_w - 1);
    float g = 0.0f;
    for (int oh = oh0; oh <= oh1; oh++)
      for (int ow = ow0; ow <= ow1; ow++) {
        int h0, h1, w0, w1;
        pool_window(s, oh, ow, &h0, &h1, &w0, &w1);
        const int cells = (h1 - h0) * (w1 - w0);
        g += dy[((n * (size_t)s.out_h + (size_t)oh) * (size_t)s.out_w + (size_t)ow) *
                    (size_t)s.in_c + (size_t)ch] *
             (1.0f / (float)cells);
      }
    dx[i] = g;
  }
}

#endif
