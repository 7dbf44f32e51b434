/* Max and average pooling as plain kernels, NHWC, with the CPU backend's semantics
 * (kernels/cpu_pool.c) for every geometry.
 *
 * Not cuDNN, deliberately:
 *   - max pooling: the cuDNN API reference lists CUDNN_STATUS_NOT_SUPPORTED for
 *     cudnnPoolingForward and cudnnPoolingBackward when "the wStride of input tensor or
 *     output tensor is not 1", which packed NHWC (wStride = C) is not; newer versions ran
 *     it on an H100 all the same, but a limit stated one way and behaving another is no
 *     limit to build on. cuDNN also routes a window's gradient to any one of its maxima,
 *     and cannot express Keras's "same" padding (the odd padding cell after the data), which
 *     took a -inf padded copy of the input. The kernels below route the gradient to the
 *     first maximum in row-major order, as the CPU does, and skip padding cells, with no
 *     copy and no limit on the batch.
 *   - average pooling: see its section in pool_kernels.cuh, where the kernels are.
 * Every kernel is a one-dimensional grid-stride loop over size_t indices (pst_cuda_blocks):
 * any size. */
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/pool_kernels.cuh"

int pst_cuda_maxpool_forward(pst_backend *b, const pst_window_shape *s, const float *x,
                             float *y) {
  pst_cuda *c = pst_cuda_of(b);
  int rc = pst_cuda_check_window(s, "maxpool_forward", 1);
  if (rc != 0) return rc;
  PST_CUDA_REQUIRE(x && y, "%s: maxpool_forward: NULL tensor", c->name);
  PST_CUDA_ENTER(c);
  const size_t total = (size_t)s->n * s->out_h * s->out_w * s->out_c;
  maxpool_forward_kernel<<<pst_cuda_blocks(total), PST_CUDA_THREADS, 0, c->stream>>>(*s, x, y,
                                                                                    total);
  CUDA_CHECK_LAUNCH();
  return 0;
}

int pst_cuda_maxpool_backward(pst_backend *b, const pst_window_shape *s, const float *x,
                              const float *y, const float *dy, float *dx) {
  pst_cuda *c = pst_cuda_of(b);
  int rc = pst_cuda_check_window(s, "maxpool_backward", 1);
  if (rc != 0) return rc;
  PST_CUDA_REQUIRE(x && y && dy && dx, "%s: maxpool_backward: NULL tensor", c->name);
  PST_CUDA_ENTER(c);
  const size_t total = (size_t)s->n * s->in_h * s->in_w * s->in_c;
  maxpool_backward_kernel<<<pst_cuda_blocks(total), PST_CUDA_THREADS, 0, c->stream>>>(
      *s, x, y, dy, dx, total);
  CUDA_CHECK_LAUNCH();
  return 0;
}

int pst_cuda_avgpool_forward(pst_backend *b, const pst_window_shape *s, const float *x,
                             float *y) {
  pst_cuda *c = pst_cuda_of(b);
  int rc = pst_cuda_check_window(s, "avgpool_forward", 1);
  if (rc != 0) return rc;
  PST_CUDA_REQUIRE(x && y, "%s: avgpool_forward: NULL tensor", c->name);
  PST_CUDA_ENTER(c);
  const size_t total = (size_t)s->n * s->out_h * s->out_w * s->out_c;
  avgpool_forward_kernel<<<pst_cuda_blocks(total), PST_CUDA_THREADS, 0, c->stream>>>(*s, x, y,
                                                                                    total);
  CUDA_CHECK_LAUNCH();
  return 0;
}

int pst_cuda_avgpool_backward(pst_backend *b, const pst_window_shape *s, const float *dy,
                              float *dx) {
  pst_cuda *c = pst_cuda_of(b);
  int rc = pst_cuda_check_window(s, "avgpool_backward", 1);
  if (rc != 0) return rc;
  PST_CUDA_REQUIRE(dy && dx, "%s: avgpool_backward: NULL tensor", c->name);
  PST_CUDA_ENTER(c);
  const size_t total = (size_t)s->n * s->in_h * s->in_w * s->in_c;
  avgpool_backward_kernel<<<pst_cuda_blocks(total), PST_CUDA_THREADS, 0, c->stream>>>(*s, dy, dx,
                                                                                     total);
  CUDA_CHECK_LAUNCH();
  return 0;
}
