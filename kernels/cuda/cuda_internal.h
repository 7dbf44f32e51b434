/* State and helpers shared by the .cu files of the CUDA backend. Not installed: only
 * the files of this directory include it.
 *
 * Every operation is enqueued on one stream (impl->stream); cuBLAS and cuDNN are bound to
 * it, so operations run in the order the worker issues them and synchronize() is a stream
 * synchronisation (of the copy stream too, once upload or download has made it). Errors are logged with file and line and returned as negative errno
 * codes: nothing here aborts the process. */
#ifndef PSTRAIN_KERNELS_CUDA_CUDA_INTERNAL_H
#define PSTRAIN_KERNELS_CUDA_CUDA_INTERNAL_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "kernels/cuda/pst_cuda.h"

/* The library exports only the entry points of pst_cuda.h; everything else is hidden. */
#define PST_CUDA_EXPORT extern "C" __attribute__((visibility("default")))

/* Logs one line through the function set by pst_cuda_set_log (stderr by default). A line at
 * error level (3) also becomes the calling thread's last error (pst_cuda_last_error), so that
 * every refusal this library logs (a bad shape, the memory cap) travels back with the
 * failing call's return code. */
void pst_cuda_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The reason of the last failure on the calling thread, one line ("" after
 * pst_cuda_clear_error): what kernels/backend.h's last_error returns. Thread-local, because
 * a worker computes on a thread of its own and reads the reason there, right after the call
 * that failed. */
const char *pst_cuda_last_error(void);
void pst_cuda_clear_error(void);

/* A failed library call: logs "file:line: expr: detail" and records the short reason
 * "function: detail (file:line)", the function being expr up to its '('. Returns code. */
int pst_cuda_fail(int code, const char *file, int line, const char *expr, const char *detail);

int pst_cuda_errno_from_cuda(cudaError_t e);

/* The checks name the status as well as its text (cudaGetErrorName, e.g.
 * "cudaErrorInvalidConfiguration: invalid configuration argument"; cuDNN's and cuBLAS's
 * string functions already give the status name). */
const char *pst_cuda_describe_error(cudaError_t e, char *buf, size_t len);

#define CUDA_CHECK(expr)                                                                  \
  do {                                                                                    \
    cudaError_t cuda_check_e_ = (expr);                                                   \
    if (cuda_check_e_ != cudaSuccess) {                                                   \
      char cuda_check_buf_[256];                                                          \
      return pst_cuda_fail(pst_cuda_errno_from_cuda(cuda_check_e_), __FILE__, __LINE__,   \
                           #expr,                                                         \
                           pst_cuda_describe_error(cuda_check_e_, cuda_check_buf_,        \
                                                   sizeof cuda_check_buf_));              \
    }                                                                                     \
  } while (0)

#define CUDNN_CHECK(expr)                                                                 \
  do {                                                                                    \
    cudnnStatus_t cudnn_check_s_ = (expr);                                                \
    if (cudnn_check_s_ != CUDNN_STATUS_SUCCESS)                                           \
      return pst_cuda_fail(cudnn_check_s_ == CUDNN_STATUS_ALLOC_FAILED ? -ENOMEM : -EIO,  \
                           __FILE__, __LINE__, #expr, cudnnGetErrorString(cudnn_check_s_)); \
  } while (0)

#define CUBLAS_CHECK(expr)                                                                \
  do {                                                                                    \
    cublasStatus_t cublas_check_s_ = (expr);                                              \
    if (cublas_check_s_ != CUBLAS_STATUS_SUCCESS)                                         \
      return pst_cuda_fail(cublas_check_s_ == CUBLAS_STATUS_ALLOC_FAILED ? -ENOMEM : -EIO, \
                           __FILE__, __LINE__, #expr,                                     \
                           cublasGetStatusString(cublas_check_s_));                       \
  } while (0)

/* Checks that the kernel just launched was accepted (bad configuration, no image for this
 * GPU); faults inside it surface later, at the next synchronising call. */
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

/* Returns -EINVAL with a logged line (which is also the recorded reason) when cond is
 * false. */
#define PST_CUDA_REQUIRE(cond, ...)                                                       \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      pst_cuda_log(3, __VA_ARGS__);                                                       \
      return -EINVAL;                                                                     \
    }                                                                                     \
  } while (0)

/* Launch limits every kernel of this library is held to (CUDA C++ Programming Guide,
 * "Compute Capabilities", table of technical specifications, the same for every compute
 * capability from 5.0 to 12.x): at most 1024 threads per block, grid x up to 2^31 - 1
 * blocks, grid y and z up to 65535. Element-wise kernels use one dimension and grid-stride
 * loops, so that any size runs on a grid of bounded size; the reductions (reduce.cuh) put
 * at most PST_COLSUM_MAX_CHUNKS blocks on y. */
#define PST_CUDA_MAX_BLOCK_THREADS 1024u
#define PST_CUDA_MAX_GRID_X 2147483647u
#define PST_CUDA_MAX_GRID_YZ 65535u

/* Threads per block of the elementwise kernels, and the one-dimensional grid for n
 * elements: one thread per element up to about a million blocks (far below grid x's
 * 2^31 - 1), grid-stride loops covering the rest, so the launch is valid for any n. */
#define PST_CUDA_THREADS 256
#define PST_CUDA_MAX_BLOCKS (65535u * 16u)
static inline unsigned pst_cuda_blocks(size_t n) {
  size_t b = (n + PST_CUDA_THREADS - 1) / PST_CUDA_THREADS;
  if (b > PST_CUDA_MAX_BLOCKS) b = PST_CUDA_MAX_BLOCKS;
  return b == 0 ? 1u : (unsigned)b;
}

/* A growable device buffer owned by the backend (workspace, padding scratch). Its bytes
 * count against the memory cap like the worker's own allocations. */
typedef struct {
  void *p;
  size_t bytes;
} pst_cuda_buffer;

/* One cached conv2d geometry: descriptors and the algorithms chosen for it. */
typedef struct {
  int used;
  pst_window_shape s;        /* the key (batch size included), with groups */
  int groups;                /* 1: conv2d; C: depthwise (cuDNN group count) */
  int explicit_pad;          /* 1: input copied into a zero-padded buffer, cuDNN pad 0 */
  int pad_h, pad_w;          /* input dims as cuDNN sees them */
  cudnnTensorDescriptor_t x_desc, y_desc;
  cudnnFilterDescriptor_t w_desc;
  cudnnConvolutionDescriptor_t conv_desc;
  cudnnConvolutionFwdAlgo_t fwd_algo;
  cudnnConvolutionBwdDataAlgo_t bwd_data_algo;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo;
  size_t fwd_ws, bwd_data_ws, bwd_filter_ws;  /* workspace bytes per algorithm */
  unsigned long long first_use, last_use;      /* c->use_clock ticks */
} pst_cuda_conv_plan;

#define PST_CUDA_MAX_PLANS 48
#define PST_CUDA_MAX_PEERS 64

/* Results of softmax_xent, reduced on the device and downloaded in one copy. */
typedef struct {
  double loss_sum;
  int correct;
  int bad_labels;            /* labels outside [0, classes) */
} pst_cuda_xent_stats;

typedef struct {
  void *p;
  size_t bytes;
} pst_cuda_alloc_rec;

typedef struct {
  int device;
  char name[32];             /* "cuda:0" (the pst_backend name points here) */
  char device_name[256];     /* "NVIDIA H100 80GB HBM3" */
  int cc_major, cc_minor;
  cudaStream_t stream;
  /* upload and download (kernels/backend.h): their own stream, made at the first of them,
   * and the events that order it against `stream`. NULL until then. */
  cudaStream_t copy_stream;
  cudaEvent_t copied, computed;
  cublasHandle_t cublas;
  cudnnHandle_t cudnn;

  size_t mem_limit;          /* bytes, 0 = no cap */
  /* The most elements a tensor handed to cuDNN may have: cuDNN's 2^31 - 1 (pad.cu,
   * pst_cuda_batch_slice), or less from $PSTRAIN_CUDA_MAX_TENSOR_ELEMS, which the parity
   * test sets so that the slicing runs at sizes a CPU reference can check. */
  size_t max_tensor_elems;
  size_t mem_used;           /* bytes held through pst_cuda_dev_alloc */
  pst_cuda_alloc_rec *allocs;/* live allocations, for the sizes free() gives back */
  size_t n_allocs, cap_allocs;

  pst_cuda_buffer workspace; /* cuDNN workspace, grown to the largest plan's need */
  pst_cuda_buffer scratch[2];/* padded input / padded input gradient */
  pst_cuda_buffer reduce;    /* the column sums' partial sums (reduce.cuh) */
  pst_cuda_buffer bn_coef;   /* batchnorm: per-channel doubles, the mean and the
                                coefficients of the element-wise pass [3C] */
  pst_cuda_xent_stats *d_stats; /* [1] device */
  pst_cuda_xent_stats *h_stats; /* [1] pinned host */

  /* The pipeline's hand-off (peer.cu): per other device, 0 not yet known, 1 read
   * directly (peer access enabled from this device), -1 through `stage`, a pinned
   * (portable) host buffer of stage_bytes, NULL until a staged copy needs it. */
  signed char peer[PST_CUDA_MAX_PEERS];
  /* How copies from another CUDA backend go: 0 by where the memory is (above); 1 always
   * cudaMemcpyPeerAsync, 2 always through `stage`, whichever the devices: from
   * $PSTRAIN_CUDA_COPY=peer|staged at creation, so that one GPU tests all three ways
   * (kernels/pipeline/stages_parity_test). */
  int copy_mode;
  void *stage;
  size_t stage_bytes;

  pst_cuda_conv_plan conv[PST_CUDA_MAX_PLANS];
  unsigned long long use_clock;

  /* describe() is called layer by layer (kernels/net.c, pst_net_log_placement) with the
   * model's layer index; the plans know only their order of first use. Counting the calls
   * per kind since the last restart of the layer index maps one to the other. */
  int describe_last_layer;
  int describe_seen_conv;
} pst_cuda;

static inline pst_cuda *pst_cuda_of(pst_backend *b) { return (pst_cuda *)b->impl; }

/* Makes the backend's device current on the calling thread: the CUDA current device is
 * per thread, and a worker may call from a thread other than the one that created it. */
static inline int pst_cuda_enter(pst_cuda *c) {
  CUDA_CHECK(cudaSetDevice(c->device));
  return 0;
}
/* The start of an operation: no reason from an earlier one is left (alloc and free enter
 * without clearing, so that a caller may free its tensors before reading the reason). */
#define PST_CUDA_ENTER(c)                                       \
  do {                                                          \
    pst_cuda_clear_error();                                     \
    int pst_cuda_enter_rc_ = pst_cuda_enter(c);                 \
    if (pst_cuda_enter_rc_ != 0) return pst_cuda_enter_rc_;     \
  } while (0)

/* Device memory counted against the cap; NULL (logged) when over the cap or out of memory. */
void *pst_cuda_dev_alloc(pst_cuda *c, size_t bytes, const char *what);
void pst_cuda_dev_free(pst_cuda *c, void *p);
/* Makes buf at least `bytes` long (contents are not kept). */
int pst_cuda_buffer_reserve(pst_cuda *c, pst_cuda_buffer *buf, size_t bytes, const char *what);
void pst_cuda_buffer_release(pst_cuda *c, pst_cuda_buffer *buf);

/* bias.cu: y[rows, cols] += bias[cols]; db[cols] = sum over rows of dy[rows, cols]. */
int pst_cuda_bias_add(pst_cuda *c, float *y, const float *bias, size_t rows, int cols);
int pst_cuda_bias_grad(pst_cuda *c, const float *dy, float *db, size_t rows, int cols);

/* pad.cu: copies x[n, h, w, ch] into xp[n, hp, wp, ch] at offset (top, left), filling the
 * rest with `fill`; and the reverse crop (cells of x outside xp get 0). */
int pst_cuda_pad_nhwc(pst_cuda *c, const float *x, float *xp, int n, int h, int w, int ch,
                      int hp, int wp, int top, int left, float fill);
int pst_cuda_crop_nhwc(pst_cuda *c, const float *xp, float *x, int n, int h, int w, int ch,
                       int hp, int wp, int top, int left);

/* Checks a window geometry; logs and returns -EINVAL when it is inconsistent. */
int pst_cuda_check_window(const pst_window_shape *s, const char *op, int pooling);

/* How many samples of s one cuDNN call may take: every tensor it is handed (input, the
 * padded copy of it, output) must hold at most c->max_tensor_elems elements. The whole
 * batch when it fits; a logged -EINVAL when even one sample does not. */
int pst_cuda_batch_slice(pst_cuda *c, const pst_window_shape *s, const char *op, int *per);

/* The vtable entries, one file per family. */
int pst_cuda_dense_forward(pst_backend *b, const float *x, const float *w, const float *bias,
                           float *y, int batch, int in, int out);
int pst_cuda_dense_backward(pst_backend *b, const float *x, const float *w, const float *dy,
                            float *dx, float *dw, float *db, int batch, int in, int out);
int pst_cuda_dense_forward_rows(pst_backend *b, const float *x, const float *w, const float *bias,
                                float *y, int batch, int in, int out, int r0, int r1);
int pst_cuda_dense_backward_rows(pst_backend *b, const float *x, const float *w, const float *dy,
                                 float *dx, float *dw, float *db, int batch, int in, int out,
                                 int r0, int r1);
int pst_cuda_relu_forward(pst_backend *b, const float *x, float *y, size_t n);
int pst_cuda_relu_backward(pst_backend *b, const float *y, const float *dy, float *dx, size_t n);
int pst_cuda_relu6_forward(pst_backend *b, const float *x, float *y, size_t n);
int pst_cuda_relu6_backward(pst_backend *b, const float *y, const float *dy, float *dx, size_t n);
int pst_cuda_dropout_forward(pst_backend *b, const float *x, float *y, size_t n, float rate,
                             uint64_t seed);
int pst_cuda_dropout_backward(pst_backend *b, const float *dy, float *dx, size_t n, float rate,
                              uint64_t seed);
int pst_cuda_softmax_xent(pst_backend *b, const float *logits, const int32_t *labels,
                          float *dlogits, int batch, int classes, float scale, double *loss_sum,
                          int *correct);
int pst_cuda_conv2d_forward(pst_backend *b, const pst_window_shape *s, const float *x,
                            const float *w, const float *bias, float *y);
int pst_cuda_conv2d_backward(pst_backend *b, const pst_window_shape *s, const float *x,
                             const float *w, const float *dy, float *dx, float *dw, float *db);
int pst_cuda_depthwise_conv2d_forward(pst_backend *b, const pst_window_shape *s, const float *x,
                                      const float *w, const float *bias, float *y);
int pst_cuda_depthwise_conv2d_backward(pst_backend *b, const pst_window_shape *s, const float *x,
                                       const float *w, const float *dy, float *dx, float *dw,
                                       float *db);
int pst_cuda_maxpool_forward(pst_backend *b, const pst_window_shape *s, const float *x, float *y);
int pst_cuda_maxpool_backward(pst_backend *b, const pst_window_shape *s, const float *x,
                              const float *y, const float *dy, float *dx);

int pst_cuda_avgpool_forward(pst_backend *b, const pst_window_shape *s, const float *x, float *y);
int pst_cuda_avgpool_backward(pst_backend *b, const pst_window_shape *s, const float *dy,
                              float *dx);

/* merge.cu: the add and concatenate layers (backend.h). */
int pst_cuda_add(pst_backend *b, const float *x0, const float *x1, float *y, size_t n);
int pst_cuda_concat_forward(pst_backend *b, const float *x, float *y, size_t rows, int c,
                            int y_c, int offset);
int pst_cuda_concat_backward(pst_backend *b, const float *dy, float *dx, size_t rows, int c,
                             int y_c, int offset);
int pst_cuda_batchnorm_forward_train(pst_backend *b, const float *x, const float *gamma,
                                     const float *beta, float *y, int rows, int channels,
                                     float eps, const float *moving, float k, float *saved,
                                     float *dmoving);
int pst_cuda_batchnorm_forward_infer(pst_backend *b, const float *x, const float *gamma,
                                     const float *beta, const float *moving, float *y, int rows,
                                     int channels, float eps);
int pst_cuda_batchnorm_backward(pst_backend *b, const float *x, const float *gamma,
                                const float *saved, const float *dy, float *dx, float *dgamma,
                                float *dbeta, int rows, int channels, float eps);

/* peer.cu: backend.h's copy_from (the pipeline's hand-off between stages). */
int pst_cuda_copy_from(pst_backend *b, void *dst, pst_backend *from, const void *src,
                       size_t bytes);

/* The plan cache (conv.cu): release every cached descriptor. */
void pst_cuda_conv_plans_destroy(pst_cuda *c);
/* describe() helper: what the cached conv2d plans use, in first-use order. */
int pst_cuda_conv_describe(pst_cuda *c, int ordinal, char *out, size_t outlen);

#endif
