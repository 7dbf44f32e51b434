/* The compute backend interface: every tensor operation a worker runs goes through it.
 *
 * A backend owns "device" memory (host memory for the CPU backend, GPU memory for CUDA).
 * Every pointer passed to an operation is device memory from alloc(), except where a
 * comment says host. Operations are ordered: a backend may run them asynchronously, and
 * to_host() followed by synchronize() is what makes results visible on the host.
 *
 * Layouts (row-major, C order):
 *   activations of dense layers  [B, features]
 *   activations of conv layers   [B, H, W, C]   (NHWC, as TensorFlow/Keras)
 *   dense weights                [in, out], bias [out]
 *   conv2d weights               [Cout, KH, KW, Cin] (OHWI, cuDNN's NHWC filter layout), bias [Cout]
 *   depthwise_conv2d weights     [C, KH, KW] (OHWI with I = 1), bias [C]
 *   labels                       [B] int32 class indices
 * All functions return 0 or a negative errno-style code; a backend with last_error says why
 * in words as well. */
#ifndef PSTRAIN_KERNELS_BACKEND_H
#define PSTRAIN_KERNELS_BACKEND_H

#include <stddef.h>
#include <stdint.h>

/* Geometry of one conv2d or maxpool application (per batch). */
typedef struct {
  int n;                  /* batch size B */
  int in_h, in_w, in_c;   /* input [B, in_h, in_w, in_c] */
  int k_h, k_w;           /* kernel (conv) or window (pool) */
  int stride_h, stride_w;
  int pad_top, pad_left;  /* zero padding before the first row / column ("same" padding) */
  int out_h, out_w, out_c;/* output [B, out_h, out_w, out_c]; for pooling out_c == in_c */
} pst_window_shape;

typedef struct pst_backend pst_backend;

struct pst_backend {
  const char *name;  /* "cpu", "cuda:0", ... */
  int host_memory;   /* 1 when device pointers are plain host pointers (CPU backend) */
  void *impl;        /* backend-private state */

  void *(*alloc)(pst_backend *b, size_t bytes); /* NULL when out of (capped) memory */
  void (*free)(pst_backend *b, void *p);
  int (*to_device)(pst_backend *b, void *dst, const void *host_src, size_t bytes);
  int (*to_host)(pst_backend *b, void *host_dst, const void *src, size_t bytes);
  int (*synchronize)(pst_backend *b);
  /* Optional (may be NULL: use aligned host memory): host buffers the backend copies from and
   * to fastest, e.g. pinned (page-locked) memory for CUDA, so that the pulled weights and the
   * gradients move between host and GPU asynchronously. */
  void *(*host_alloc)(pst_backend *b, size_t bytes);
  void (*host_free)(pst_backend *b, void *p);
  /* Optional (may be NULL: not known, as for the CPU backend, whose "device" is host memory):
   * the device memory this backend holds now, in bytes (the workers' /metrics). */
  size_t (*memory_in_use)(pst_backend *b);
  /* Optional (NULL, as for the CPU backend: to_device and to_host in order with the rest):
   * copies on a stream of their own that overlap compute, from and to host buffers of
   * host_alloc, for a worker that moves weights and gradients layer by layer
   * (kernels/net.h).
   * upload: host_src to dst; every operation enqueued after it waits for it, the ones
   * before it do not.
   * download: src to host_dst once every operation enqueued before it has finished, beside
   * whatever is enqueued after it; then, when done is not NULL, done(ctx, arg) is called on
   * a thread of the backend's own once the bytes are on the host (done must not call the
   * backend). Downloads finish, and their done calls are made, in the order enqueued.
   * synchronize() waits for both kinds too. */
  /* Optional (NULL: this backend takes no copies from another): the hand-off between two
   * stages of a pipeline (kernels/pipeline/), called by the receiving stage's thread on
   * the receiving backend b. Copies bytes from src, memory of the backend `from` (another
   * instance, possibly another device, possibly this one), into dst, memory of b, in order
   * with b's other operations: whatever b enqueues later sees the bytes, and b's
   * synchronize() waits for the copy. The caller guarantees that src is complete (`from`
   * synchronized after writing it) and left unchanged until b's next synchronize(), and
   * that nothing of b still reads dst. The CPU backend's is memcpy from a host-memory
   * `from`; CUDA's copies device to device (same GPU), peer to peer, or through pinned
   * host memory (kernels/cuda/cuda_peer.cu). -ENOTSUP for a `from` it cannot read. */
  int (*copy_from)(pst_backend *b, void *dst, pst_backend *from, const void *src, size_t bytes);
  int (*upload)(pst_backend *b, void *dst, const void *host_src, size_t bytes);
  int (*download)(pst_backend *b, void *host_dst, const void *src, size_t bytes,
                  void (*done)(void *ctx, size_t arg), void *ctx, size_t arg);

  /* y[B,out] = x[B,in] . w[in,out] + bias[out] */
  int (*dense_forward)(pst_backend *b, const float *x, const float *w, const float *bias,
                       float *y, int batch, int in, int out);
  /* dw[in,out] = x^T . dy;  db[out] = sum over rows of dy;  dx[B,in] = dy . w^T.
   * dw and db are overwritten, not accumulated; dx may be NULL (first layer). */
  int (*dense_backward)(pst_backend *b, const float *x, const float *w, const float *dy,
                        float *dx, float *dw, float *db, int batch, int in, int out);

  /* Optional (NULL: the net runs each dense layer whole): a dense layer in pieces of rows
   * of w [in, out], rows [r0, r1) of it (0 <= r0 < r1 <= in; the pointers are the whole
   * tensors'), so that a worker sends the first part of a large layer's gradient while the
   * rest is computed, and starts its forward pass on the first part of its weights while
   * the rest arrives (kernels/net.h, pst_net_set_row_cuts).
   * dense_forward_rows: y[B,out] = x[:, r0:r1] . w[r0:r1, :] when r0 == 0, else
   *   y += x[:, r0:r1] . w[r0:r1, :]; then, when bias is not NULL, y += bias[out]. The net
   *   calls the pieces in ascending order and gives the bias to the last one, so the sum is
   *   (((piece 0 + piece 1) + ...) + bias): the same on every backend, run after run, but
   *   not bit for bit the whole layer's.
   * dense_backward_rows: dw[r0:r1, :] = x[:, r0:r1]^T . dy (the other rows of dw are left
   *   alone); db[out] = sum over rows of dy when db is not NULL; dx[:, r0:r1] = dy .
   *   w[r0:r1, :]^T when dx is not NULL (its other columns left alone). Each element is the
   *   whole layer's dot product, but a GEMM over fewer rows may sum it in another order
   *   (OpenBLAS does for some shapes; cuBLAS promises nothing): within rounding of the whole
   *   layer, and the same run after run for the same cuts. */
  int (*dense_forward_rows)(pst_backend *b, const float *x, const float *w, const float *bias,
                            float *y, int batch, int in, int out, int r0, int r1);
  int (*dense_backward_rows)(pst_backend *b, const float *x, const float *w, const float *dy,
                             float *dx, float *dw, float *db, int batch, int in, int out,
                             int r0, int r1);

  /* y = max(x, 0) over n elements; in place (x == y) is allowed. */
  int (*relu_forward)(pst_backend *b, const float *x, float *y, size_t n);
  /* dx = dy where y > 0, else 0; dx == dy is allowed. */
  int (*relu_backward)(pst_backend *b, const float *y, const float *dy, float *dx, size_t n);

  /* y = min(max(x, 0), 6) over n elements (Keras/MobileNet ReLU6); in place allowed. */
  int (*relu6_forward)(pst_backend *b, const float *x, float *y, size_t n);
  /* dx = dy where 0 < y < 6, else 0 (the derivative at the kinks is taken as 0, as TF
   * does); dx == dy is allowed. */
  int (*relu6_backward)(pst_backend *b, const float *y, const float *dy, float *dx, size_t n);

  /* Inverted dropout over n elements: y = x * keep / (1 - rate), where keep for element i
   * is pst_dropout_keep(seed, i, rate) (kernels/dropout_mask.h), the same pure function of
   * (seed, i) on every backend, so that the mask needs no storage between forward and
   * backward and a GPU worker drops exactly the cells a CPU worker would. rate in [0, 1).
   * Backward: dx = dy * keep / (1 - rate). In place allowed for both. */
  int (*dropout_forward)(pst_backend *b, const float *x, float *y, size_t n, float rate,
                         uint64_t seed);
  int (*dropout_backward)(pst_backend *b, const float *dy, float *dx, size_t n, float rate,
                          uint64_t seed);

  /* Softmax cross-entropy over logits[B,C] with labels[B] (device int32).
   * dlogits[B,C] = (softmax(logits) - onehot(labels)) * scale  (dlogits may be NULL: eval only).
   * Host outputs: *loss_sum = sum over the batch of -log softmax[label] (double),
   * *correct = number of rows whose argmax equals the label. */
  int (*softmax_xent)(pst_backend *b, const float *logits, const int32_t *labels,
                      float *dlogits, int batch, int classes, float scale,
                      double *loss_sum, int *correct);

  /* y = conv2d(x, w) + bias, NHWC / OHWI, cross-correlation as in TF and cuDNN. */
  int (*conv2d_forward)(pst_backend *b, const pst_window_shape *s, const float *x,
                        const float *w, const float *bias, float *y);
  /* dw, db overwritten; dx may be NULL (first layer). */
  int (*conv2d_backward)(pst_backend *b, const pst_window_shape *s, const float *x,
                         const float *w, const float *dy, float *dx, float *dw, float *db);

  /* Depthwise convolution with depth multiplier 1: channel c of y is channel c of x
   * cross-correlated with its own KHxKW filter, plus bias[c]. s->out_c == s->in_c = C;
   * w is [C, KH, KW] (OHWI with one input channel, cuDNN's grouped-convolution filter with
   * groupCount = C), bias [C]. Backward as conv2d: dw, db overwritten; dx may be NULL. */
  int (*depthwise_conv2d_forward)(pst_backend *b, const pst_window_shape *s, const float *x,
                                  const float *w, const float *bias, float *y);
  int (*depthwise_conv2d_backward)(pst_backend *b, const pst_window_shape *s, const float *x,
                                   const float *w, const float *dy, float *dx, float *dw,
                                   float *db);

  /* Max pooling, NHWC; padding cells never win. Backward routes dy to the first maximum. */
  int (*maxpool_forward)(pst_backend *b, const pst_window_shape *s, const float *x, float *y);
  int (*maxpool_backward)(pst_backend *b, const pst_window_shape *s, const float *x,
                          const float *y, const float *dy, float *dx);

  /* Average pooling, NHWC: the mean over the window's cells that lie inside the input
   * (padding cells count neither in the sum nor in the divisor, as TF/Keras "same" pooling
   * and cuDNN's COUNT_EXCLUDE_PADDING). Global average pooling is the window = input case.
   * Backward spreads each dy evenly over its window's real cells; dx is overwritten. */
  int (*avgpool_forward)(pst_backend *b, const pst_window_shape *s, const float *x, float *y);
  int (*avgpool_backward)(pst_backend *b, const pst_window_shape *s, const float *dy, float *dx);

  /* Element-wise sum, the add layer's forward and the gradients' fan-in: y = x0 + x1 over n
   * elements; x1 may be NULL, which makes it a copy (y = x0). y may be x0 or x1 (in place).
   * The sum of k tensors is k - 1 calls, in the same order on every backend, so that both
   * round alike. */
  int (*add)(pst_backend *b, const float *x0, const float *x1, float *y, size_t n);

  /* Channel concatenation, one input at a time: x[rows, c] is written to the channels
   * [offset, offset + c) of y[rows, y_c], where rows = B*H*W (or B for flat vectors). The
   * concatenate layer calls it once per input; the other channels of y are left alone.
   * Backward is the slice: dx[rows, c] = dy[rows, offset .. offset + c), overwritten. */
  int (*concat_forward)(pst_backend *b, const float *x, float *y, size_t rows, int c, int y_c,
                        int offset);
  int (*concat_backward)(pst_backend *b, const float *dy, float *dx, size_t rows, int c,
                         int y_c, int offset);
  /* Batch normalisation over the last axis of x[rows, C]: rows = B*H*W for an NHWC image
   * (the channels are innermost), B for a flat [B, C] input. Per channel c:
   * Training forward: mean[c] and var[c], the biased (divide by rows) variance of column c,
   *   as Keras computes them; y = gamma * (x - mean) * inv_std + beta with
   *   inv_std = 1 / sqrt(var + eps). saved[2C] gets mean then inv_std, for backward.
   *   dmoving[2C] gets (mean - moving[c]) * k then (var - moving[C + c]) * k: the change of
   *   the moving statistics moving[2C] (mean then variance) that the worker asks the ps
   *   for (kernels/net.h says what k is). moving and dmoving may be NULL (no statistics).
   * Inference forward: y = gamma * (x - moving[c]) / sqrt(moving[C + c] + eps) + beta.
   * Backward (of the training forward, from its saved[]): with xhat = (x - mean) * inv_std,
   *   dgamma[c] = sum over rows of dy * xhat, dbeta[c] = sum of dy (both overwritten) and
   *   dx = gamma * inv_std / rows * (rows * dy - dbeta - xhat * dgamma); dx may be NULL
   *   (first layer); eps is the forward's (cuDNN wants it again). gamma, beta [C]; y and dx
   *   may not alias x or dy. */
  int (*batchnorm_forward_train)(pst_backend *b, const float *x, const float *gamma,
                                 const float *beta, float *y, int rows, int channels, float eps,
                                 const float *moving, float k, float *saved, float *dmoving);
  int (*batchnorm_forward_infer)(pst_backend *b, const float *x, const float *gamma,
                                 const float *beta, const float *moving, float *y, int rows,
                                 int channels, float eps);
  int (*batchnorm_backward)(pst_backend *b, const float *x, const float *gamma,
                            const float *saved, const float *dy, float *dx, float *dgamma,
                            float *dbeta, int rows, int channels, float eps);

  /* Optional (may be NULL: the code alone says what went wrong): why the last operation
   * that failed on the calling thread failed, one line naming the library call and what it
   * returned, e.g. "cudnnConvolutionForward: CUDNN_STATUS_NOT_SUPPORTED (conv.cu:250)", or
   * the check it failed; "" when it recorded nothing. Read it right after the failing call,
   * on the same thread: the next operation clears it. kernels/net adds the layer and the
   * shape (pst_net_error). */
  const char *(*last_error)(pst_backend *b);

  /* Optional (may be NULL): a one-line description of how layer `layer` of kind `what`
   * runs (device, algorithm), for --log-placement. */
  void (*describe)(pst_backend *b, const char *what, int layer, char *out, size_t outlen);

  void (*destroy)(pst_backend *b);
};

/* The CPU backend: OpenBLAS GEMMs on `threads` threads (1 per worker by default). */
int pst_cpu_backend_create(int threads, pst_backend **out);
/* The null backend (kernels/null_backend.c): computes nothing and writes a deterministic
 * gradient, so that a job runs at what its ps and links allow. samples_per_sec > 0 paces
 * each operation like a device of that compute-only rate; 0 takes no time. 0, or -EINVAL
 * for a negative or non-finite rate, -ENOMEM. */
int pst_null_backend_create(double samples_per_sec, pst_backend **out);

#endif
