/* Private to the CPU backend: its state and the operations of each op family
 * (cpu_dense.c, cpu_act.c, cpu_conv.c, cpu_depthwise.c, cpu_pool.c, cpu_merge.c,
 * cpu_norm.c; dropout lives with the activations), wired into the vtable by
 * cpu_backend.c. */
#ifndef PSTRAIN_KERNELS_CPU_INTERNAL_H
#define PSTRAIN_KERNELS_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

/* Scratch buffers, each grown on demand and kept, so the hot path never allocates once
 * the first step has run. Slots are named by use so two ops never share one at once. */
enum {
  CPU_SCRATCH_COL = 0,
  CPU_SCRATCH_DCOL,
  CPU_SCRATCH_WAUG,
  CPU_SCRATCH_DW, /* depthwise filters transposed to [KH, KW, C] */
  CPU_SCRATCH_BN, /* batchnorm's per-channel double sums, [2C] doubles */
  CPU_SCRATCH_COUNT
};

typedef struct {
  int threads;                        /* OpenBLAS threads */
  float *scratch[CPU_SCRATCH_COUNT];  /* 64-byte aligned */
  size_t scratch_cap[CPU_SCRATCH_COUNT]; /* floats */
} cpu_impl;

/* A scratch buffer of at least `floats` floats, or NULL when out of memory. */
float *cpu_scratch(pst_backend *b, int slot, size_t floats);

int cpu_dense_forward(pst_backend *b, const float *x, const float *w, const float *bias, float *y,
                      int batch, int in, int out);
int cpu_dense_backward(pst_backend *b, const float *x, const float *w, const float *dy, float *dx,
                       float *dw, float *db, int batch, int in, int out);
/* Rows [r0, r1) of w (backend.h, dense_forward_rows and dense_backward_rows). */
int cpu_dense_forward_rows(pst_backend *b, const float *x, const float *w, const float *bias,
                           float *y, int batch, int in, int out, int r0, int r1);
int cpu_dense_backward_rows(pst_backend *b, const float *x, const float *w, const float *dy,
                            float *dx, float *dw, float *db, int batch, int in, int out, int r0,
                            int r1);

int cpu_relu_forward(pst_backend *b, const float *x, float *y, size_t n);
int cpu_relu_backward(pst_backend *b, const float *y, const float *dy, float *dx, size_t n);
int cpu_relu6_forward(pst_backend *b, const float *x, float *y, size_t n);
int cpu_relu6_backward(pst_backend *b, const float *y, const float *dy, float *dx, size_t n);
int cpu_dropout_forward(pst_backend *b, const float *x, float *y, size_t n, float rate,
                        uint64_t seed);
int cpu_dropout_backward(pst_backend *b, const float *dy, float *dx, size_t n, float rate,
                         uint64_t seed);
int cpu_softmax_xent(pst_backend *b, const float *logits, const int32_t *labels, float *dlogits,
                     int batch, int classes, float scale, double *loss_sum, int *correct);

int cpu_conv2d_forward(pst_backend *b, const pst_window_shape *s, const float *x, const float *w,
                       const float *bias, float *y);
int cpu_conv2d_backward(pst_backend *b, const pst_window_shape *s, const float *x, const float *w,
                        const float *dy, float *dx, float *dw, float *db);

int cpu_depthwise_conv2d_forward(pst_backend *b, const pst_window_shape *s, const float *x,
                                 const float *w, const float *bias, float *y);
int cpu_depthwise_conv2d_backward(pst_backend *b, const pst_window_shape *s, const float *x,
                                  const float *w, const float *dy, float *dx, float *dw,
                                  float *db);

int cpu_batchnorm_forward_train(pst_backend *b, const float *x, const float *gamma,
                                const float *beta, float *y, int rows, int channels, float eps,
                                const float *moving, float k, float *saved, float *dmoving);
int cpu_batchnorm_forward_infer(pst_backend *b, const float *x, const float *gamma,
                                const float *beta, const float *moving, float *y, int rows,
                                int channels, float eps);
int cpu_batchnorm_backward(pst_backend *b, const float *x, const float *gamma, const float *saved,
                           const float *dy, float *dx, float *dgamma, float *dbeta, int rows,
                           int channels, float eps);

int cpu_maxpool_forward(pst_backend *b, const pst_window_shape *s, const float *x, float *y);
int cpu_maxpool_backward(pst_backend *b, const pst_window_shape *s, const float *x, const float *y,
                         const float *dy, float *dx);

int cpu_avgpool_forward(pst_backend *b, const pst_window_shape *s, const float *x, float *y);
int cpu_avgpool_backward(pst_backend *b, const pst_window_shape *s, const float *dy, float *dx);

/* cpu_merge.c: the add and concatenate layers (backend.h). */
int cpu_add(pst_backend *b, const float *x0, const float *x1, float *y, size_t n);
int cpu_concat_forward(pst_backend *b, const float *x, float *y, size_t rows, int c, int y_c,
                       int offset);
int cpu_concat_backward(pst_backend *b, const float *dy, float *dx, size_t rows, int c, int y_c,
                        int offset);

/* A window shape in locals-friendly form (c = channels, in and out alike): the loops of
 * cpu_pool.c and cpu_depthwise.c copy it first, because with -fno-strict-aliasing the
 * compiler would otherwise reload every field after each float store. */
typedef struct {
  int n, in_h, in_w, c, k_h, k_w, sh, sw, pt, pl, out_h, out_w;
} cpu_window_geom;

static inline cpu_window_geom cpu_window_geom_of(const pst_window_shape *s) {
  cpu_window_geom g = {s->n,        s->in_h,     s->in_w,    s->in_c,     s->k_h,   s->k_w,
                       s->stride_h, s->stride_w, s->pad_top, s->pad_left, s->out_h, s->out_w};
  return g;
}

/* Checks a window shape for consistency (positive sizes, output matching the input,
 * padding smaller than the window); 0 or -EINVAL. */
int cpu_check_window(const pst_window_shape *s, int conv);

#endif
