/* The CPU backend: "device" memory is host memory, GEMMs go to OpenBLAS and the rest
 * are plain loops written so that the compiler vectorises them (AVX2 with
 * -march=x86-64-v3). The op families live in cpu_dense.c, cpu_act.c, cpu_conv.c,
 * cpu_depthwise.c, cpu_pool.c and cpu_merge.c; this file owns memory, scratch buffers and
 * the vtable. */
#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/blas_setup.h"
#include "kernels/cpu_internal.h"

/* OpenBLAS extensions, declared here because not every cblas.h carries them. */
void openblas_set_num_threads(int num_threads);
char *openblas_get_corename(void);

#define CPU_ALIGN 64

static void *cpu_alloc(pst_backend *b, size_t bytes) {
  (void)b;
  size_t rounded = (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
  if (rounded == 0) rounded = CPU_ALIGN;
  return aligned_alloc(CPU_ALIGN, rounded);
}

static void cpu_free(pst_backend *b, void *p) {
  (void)b;
  free(p);
}

static int cpu_copy(pst_backend *b, void *dst, const void *src, size_t bytes) {
  (void)b;
  if (bytes == 0 || dst == src) return 0;
  if (dst == NULL || src == NULL) return -EINVAL;
  memmove(dst, src, bytes);
  return 0;
}

static int cpu_synchronize(pst_backend *b) {
  (void)b;
  return 0;
}

float *cpu_scratch(pst_backend *b, int slot, size_t floats) {
  cpu_impl *impl = b->impl;
  if (slot < 0 || slot >= CPU_SCRATCH_COUNT) return NULL;
  if (impl->scratch_cap[slot] >= floats && impl->scratch[slot] != NULL) return impl->scratch[slot];
  /* Grow by half again, so that a slowly rising need does not reallocate every call. */
  size_t want = floats + floats / 2;
  float *p = cpu_alloc(b, want * sizeof(float));
  if (p == NULL) return NULL;
  free(impl->scratch[slot]);
  impl->scratch[slot] = p;
  impl->scratch_cap[slot] = want;
  return p;
}

int cpu_check_window(const pst_window_shape *s, int conv) {
  if (s == NULL || s->n <= 0 || s->in_h <= 0 || s->in_w <= 0 || s->in_c <= 0 || s->k_h <= 0 ||
      s->k_w <= 0 || s->stride_h <= 0 || s->stride_w <= 0 || s->pad_top < 0 || s->pad_left < 0 ||
      s->pad_top >= s->k_h || s->pad_left >= s->k_w || s->out_h <= 0 || s->out_w <= 0 ||
      s->out_c <= 0)
    return -EINVAL;
  if (!conv && s->out_c != s->in_c) return -EINVAL;
  /* The last window must start inside the (padded) input. */
  if ((long)(s->out_h - 1) * s->stride_h - s->pad_top >= s->in_h ||
      (long)(s->out_w - 1) * s->stride_w - s->pad_left >= s->in_w)
    return -EINVAL;
  /* OpenBLAS takes int dimensions: the GEMM over the whole batch must fit. */
  size_t k = (size_t)s->k_h * s->k_w * s->in_c;
  size_t rows = (size_t)s->n * s->out_h * s->out_w;
  if (rows > INT_MAX || k > INT_MAX || rows * (k > (size_t)s->out_c ? k : (size_t)s->out_c) >
                                           ((size_t)1 << 40))
    return -EINVAL;
  return 0;
}

static void cpu_describe(pst_backend *b, const char *what, int layer, char *out, size_t outlen) {
  cpu_impl *impl = b->impl;
  const char *core = openblas_get_corename();
  const char *how;
  (void)layer;
  if (strcmp(what, "dense") == 0)
    how = "OpenBLAS sgemm";
  else if (strcmp(what, "conv2d") == 0)
    how = "im2col + OpenBLAS sgemm, NHWC/OHWI";
  else if (strcmp(what, "depthwise_conv2d") == 0)
    how = "direct loops, NHWC, channels innermost";
  else if (strcmp(what, "maxpool") == 0 || strcmp(what, "avgpool") == 0 ||
           strcmp(what, "global_avgpool") == 0)
    how = "direct loops, NHWC";
  else if (strcmp(what, "concatenate") == 0)
    how = "strided row copies, NHWC";
  else if (strcmp(what, "batchnorm") == 0)
    how = "direct loops, channels innermost, double sums";
  else if (strcmp(what, "flatten") == 0)
    how = "no-op (NHWC is already flat)";
  else
    how = "vectorised loops";
  snprintf(out, outlen, "cpu (%s, %d thread%s): %s", core ? core : "unknown core",
           impl->threads, impl->threads == 1 ? "" : "s", how);
}

/* The pipeline's hand-off (backend.h): from another host-memory backend a plain copy (the
 * pipeline binds CPU stages to each other without one, so this serves callers that want
 * their own buffer); a device's memory is not readable here. */
static int cpu_copy_from(pst_backend *b, void *dst, pst_backend *from, const void *src,
                         size_t bytes) {
  (void)b;
  if (bytes == 0) return 0;
  if (dst == NULL || src == NULL || from == NULL) return -EINVAL;
  if (!from->host_memory) return -ENOTSUP;
  memcpy(dst, src, bytes);
  return 0;
}

static void cpu_destroy(pst_backend *b) {
  if (b == NULL) return;
  cpu_impl *impl = b->impl;
  if (impl != NULL)
    for (int i = 0; i < CPU_SCRATCH_COUNT; i++) free(impl->scratch[i]);
  free(impl);
  free(b);
}

int pst_cpu_backend_create(int threads, pst_backend **out) {
  if (out == NULL || threads < 1 || threads > 1024) return -EINVAL;
  *out = NULL;
  pst_backend *b = calloc(1, sizeof *b);
  cpu_impl *impl = calloc(1, sizeof *impl);
  if (b == NULL || impl == NULL) {
    free(b);
    free(impl);
    return -ENOMEM;
  }
  /* Denormals flushed in this thread and in OpenBLAS's, whose pool is made again to inherit
   * that (kernels/blas_setup.h); then the thread count, which is process-wide in OpenBLAS:
   * one worker process runs one backend. */
  pst_blas_flush_denormals();
  openblas_set_num_threads(threads);
  impl->threads = threads;
  b->name = "cpu";
  b->host_memory = 1;
  b->impl = impl;
  b->alloc = cpu_alloc;
  b->free = cpu_free;
  b->to_device = cpu_copy;
  b->to_host = cpu_copy;
  b->synchronize = cpu_synchronize;
  b->copy_from = cpu_copy_from;
  b->dense_forward = cpu_dense_forward;
  b->dense_backward = cpu_dense_backward;
  b->dense_forward_rows = cpu_dense_forward_rows;
  b->dense_backward_rows = cpu_dense_backward_rows;
  b->relu_forward = cpu_relu_forward;
  b->relu_backward = cpu_relu_backward;
  b->relu6_forward = cpu_relu6_forward;
  b->relu6_backward = cpu_relu6_backward;
  b->dropout_forward = cpu_dropout_forward;
  b->dropout_backward = cpu_dropout_backward;
  b->softmax_xent = cpu_softmax_xent;
  b->conv2d_forward = cpu_conv2d_forward;
  b->conv2d_backward = cpu_conv2d_backward;
  b->depthwise_conv2d_forward = cpu_depthwise_conv2d_forward;
  b->depthwise_conv2d_backward = cpu_depthwise_conv2d_backward;
  b->maxpool_forward = cpu_maxpool_forward;
  b->maxpool_backward = cpu_maxpool_backward;
  b->avgpool_forward = cpu_avgpool_forward;
  b->avgpool_backward = cpu_avgpool_backward;
  b->add = cpu_add;
  b->concat_forward = cpu_concat_forward;
  b->concat_backward = cpu_concat_backward;
  b->batchnorm_forward_train = cpu_batchnorm_forward_train;
  b->batchnorm_forward_infer = cpu_batchnorm_forward_infer;
  b->batchnorm_backward = cpu_batchnorm_backward;
  b->describe = cpu_describe;
  b->destroy = cpu_destroy;
  *out = b;
  return 0;
}
