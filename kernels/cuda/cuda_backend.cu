/* The CUDA backend's life cycle: device discovery, creation, capped device memory,
 * host <-> device copies on the backend's stream, describe() and destroy(). The
 * operations themselves live in dense.cu, activation.cu, conv.cu, pool.cu and norm.cu. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"

static pst_cuda_log_fn g_log_fn;

/* The calling thread's last failure (pst_cuda_last_error). */
static __thread char g_last_error[512];

PST_CUDA_EXPORT void pst_cuda_set_log(pst_cuda_log_fn fn) { g_log_fn = fn; }

const char *pst_cuda_last_error(void) { return g_last_error; }

void pst_cuda_clear_error(void) { g_last_error[0] = '\0'; }

void pst_cuda_log(int level, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  /* Log lines are single lines: a multi-line library message is folded. */
  for (char *p = line; *p; p++)
    if (*p == '\n' || *p == '\r') *p = ' ';
  if (level <= 3) snprintf(g_last_error, sizeof g_last_error, "%.511s", line);
  if (g_log_fn)
    g_log_fn(level, line);
  else
    fprintf(stderr, "pstrain-cuda: %s\n", line);
}

int pst_cuda_fail(int code, const char *file, int line, const char *expr, const char *detail) {
  pst_cuda_log(3, "%s:%d: %s: %s", file, line, expr, detail);
  /* The reason is shorter than the log line: the function's name, not the whole call. */
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  size_t fn = strcspn(expr, "( ");
  snprintf(g_last_error, sizeof g_last_error, "%.*s: %s (%s:%d)", (int)fn, expr, detail, base,
           line);
  return code;
}

const char *pst_cuda_describe_error(cudaError_t e, char *buf, size_t len) {
  snprintf(buf, len, "%s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
  return buf;
}

int pst_cuda_errno_from_cuda(cudaError_t e) {
  switch (e) {
    case cudaErrorMemoryAllocation: return -ENOMEM;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidConfiguration: return -EINVAL;
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
    case cudaErrorInsufficientDriver: return -ENODEV;
    default: return -EIO;
  }
}

static double mib(size_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

/* ---- capped device memory ---------------------------------------------------------- */

void *pst_cuda_dev_alloc(pst_cuda *c, size_t bytes, const char *what) {
  if (bytes == 0) bytes = 1; /* a valid, distinct pointer, as malloc(0) may give */
  if (c->mem_limit && (bytes > c->mem_limit || c->mem_used > c->mem_limit - bytes)) {
    pst_cuda_log(3,
                 "%s: cannot allocate %zu bytes (%.1f MiB) for %s: the device memory cap is "
                 "%.1f MiB and %.1f MiB are already in use",
                 c->name, bytes, mib(bytes), what, mib(c->mem_limit), mib(c->mem_used));
    return NULL;
  }
  if (c->n_allocs == c->cap_allocs) {
    size_t ncap = c->cap_allocs ? 2 * c->cap_allocs : 64;
    pst_cuda_alloc_rec *na =
        (pst_cuda_alloc_rec *)realloc(c->allocs, ncap * sizeof(pst_cuda_alloc_rec));
    if (!na) {
      pst_cuda_log(3, "%s: out of host memory tracking device allocations", c->name);
      return NULL;
    }
    c->allocs = na;
    c->cap_allocs = ncap;
  }
  /* cudaMalloc: any size_t byte count the device can hold; the pointer is aligned to at
   * least 256 bytes, which cuDNN's and cuBLAS's vectorised kernels and the workspace rely
   * on. */
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError(); /* clear the (non-sticky) error so later checks are clean */
    pst_cuda_log(3, "%s: cudaMalloc of %zu bytes (%.1f MiB) for %s failed: %s", c->name, bytes,
                 mib(bytes), what, cudaGetErrorString(e));
    return NULL;
  }
  c->allocs[c->n_allocs].p = p;
  c->allocs[c->n_allocs].bytes = bytes;
  c->n_allocs++;
  c->mem_used += bytes;
  return p;
}

void pst_cuda_dev_free(pst_cuda *c, void *p) {
  if (!p) return;
  for (size_t i = c->n_allocs; i-- > 0;) {
    if (c->allocs[i].p == p) {
      c->mem_used -= c->allocs[i].bytes;
      c->allocs[i] = c->allocs[--c->n_allocs];
      /* cudaFree (a pointer of cudaMalloc, once) waits for the device, so no kernel still
       * reading p is cut short. */
      cudaError_t e = cudaFree(p);
      if (e != cudaSuccess)
        pst_cuda_log(4, "%s: cudaFree: %s", c->name, cudaGetErrorString(e));
      return;
    }
  }
  pst_cuda_log(4, "%s: free() of a pointer this backend did not allocate (%p); ignored", c->name,
               p);
}

int pst_cuda_buffer_reserve(pst_cuda *c, pst_cuda_buffer *buf, size_t bytes, const char *what) {
  if (buf->bytes >= bytes && buf->p) return 0;
  /* Earlier operations may still read the old buffer: let them finish before freeing
   * (cudaStreamSynchronize: also where an earlier kernel's fault would surface). */
  CUDA_CHECK(cudaStreamSynchronize(c->stream));
  pst_cuda_dev_free(c, buf->p);
  buf->p = NULL;
  buf->bytes = 0;
  /* Grow by at least half again so a slowly rising need does not reallocate every time. */
  size_t want = bytes + bytes / 2;
  if (c->mem_limit && c->mem_used + want > c->mem_limit) want = bytes;
  void *p = pst_cuda_dev_alloc(c, want, what);
  if (!p) return -ENOMEM;
  buf->p = p;
  buf->bytes = want;
  return 0;
}

void pst_cuda_buffer_release(pst_cuda *c, pst_cuda_buffer *buf) {
  pst_cuda_dev_free(c, buf->p);
  buf->p = NULL;
  buf->bytes = 0;
}

/* ---- the simple vtable entries ----------------------------------------------------- */

static void *cuda_alloc(pst_backend *b, size_t bytes) {
  pst_cuda *c = pst_cuda_of(b);
  if (pst_cuda_enter(c) != 0) return NULL;
  return pst_cuda_dev_alloc(c, bytes, "a tensor");
}

static void cuda_free(pst_backend *b, void *p) {
  pst_cuda *c = pst_cuda_of(b);
  (void)pst_cuda_enter(c);
  pst_cuda_dev_free(c, p);
}

/* Pinned host memory: the worker pulls weights into it and pushes gradients from it, so
 * cudaMemcpyAsync really is asynchronous on the backend's stream. */
static void *cuda_host_alloc(pst_backend *b, size_t bytes) {
  pst_cuda *c = pst_cuda_of(b);
  void *p = NULL;
  if (pst_cuda_enter(c) != 0) return NULL;
  /* cudaMallocHost: page-locked host memory, limited only by what the OS lets be locked. */
  cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    pst_cuda_log(3, "%s: cudaMallocHost(%zu bytes): %s", c->name, bytes, cudaGetErrorString(e));
    return NULL;
  }
  return p;
}

static void cuda_host_free(pst_backend *b, void *p) {
  pst_cuda *c = pst_cuda_of(b);
  if (!p) return;
  (void)pst_cuda_enter(c);
  cudaFreeHost(p);
}

static int cuda_to_device(pst_backend *b, void *dst, const void *host_src, size_t bytes) {
  pst_cuda *c = pst_cuda_of(b);
  if (bytes == 0) return 0;
  PST_CUDA_REQUIRE(dst && host_src, "%s: to_device with a NULL pointer", c->name);
  PST_CUDA_ENTER(c);
  /* cudaMemcpyAsync: any size_t byte count. Truly asynchronous from pinned memory
   * (host_alloc); from pageable memory it returns once the runtime has staged the source.
   * Either way backend.h asks callers to leave the source unchanged until synchronize(). */
  CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, c->stream));
  return 0;
}

static int cuda_to_host(pst_backend *b, void *host_dst, const void *src, size_t bytes) {
  pst_cuda *c = pst_cuda_of(b);
  if (bytes == 0) return 0;
  PST_CUDA_REQUIRE(host_dst && src, "%s: to_host with a NULL pointer", c->name);
  PST_CUDA_ENTER(c);
  CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
  return 0;
}

static int cuda_synchronize(pst_backend *b) {
  pst_cuda *c = pst_cuda_of(b);
  PST_CUDA_ENTER(c);
  CUDA_CHECK(cudaStreamSynchronize(c->stream));
  if (c->copy_stream) CUDA_CHECK(cudaStreamSynchronize(c->copy_stream));
  return 0;
}

/* The copy stream and its events, made at the first upload or download, so that a worker
 * that never moves data layer by layer runs exactly as before. Without blocking sync, so
 * that neither stream waits for the legacy default stream. Timing off: the events only
 * order the streams. */
static int copy_stream_ready(pst_cuda *c) {
  if (c->copy_stream) return 0;
  if (!c->copied) CUDA_CHECK(cudaEventCreateWithFlags(&c->copied, cudaEventDisableTiming));
  if (!c->computed) CUDA_CHECK(cudaEventCreateWithFlags(&c->computed, cudaEventDisableTiming));
  /* cudaEventCreateWithFlags and cudaStreamCreateWithFlags: no limit but the device's
   * resources; the events and both streams belong to this backend's device. */
  CUDA_CHECK(cudaStreamCreateWithFlags(&c->copy_stream, cudaStreamNonBlocking));
  return 0;
}

/* A layer's weights: copied on the copy stream while the compute stream runs the layers
 * before it; the compute stream waits for the copy only where it is enqueued. One event
 * serves every upload, as each wait is enqueued right after its record. */
static int cuda_upload(pst_backend *b, void *dst, const void *host_src, size_t bytes) {
  pst_cuda *c = pst_cuda_of(b);
  if (bytes == 0) return 0;
  PST_CUDA_REQUIRE(dst && host_src, "%s: upload with a NULL pointer", c->name);
  PST_CUDA_ENTER(c);
  int rc = copy_stream_ready(c);
  if (rc != 0) return rc;
  /* The copy on the copy stream, then the compute stream waits for it (cudaEventRecord and
   * cudaStreamWaitEvent: events of the same device, no other limit). */
  CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, c->copy_stream));
  CUDA_CHECK(cudaEventRecord(c->copied, c->copy_stream));
  CUDA_CHECK(cudaStreamWaitEvent(c->stream, c->copied, 0));
  return 0;
}

/* What a download calls once its bytes are on the host. */
typedef struct {
  void (*done)(void *ctx, size_t arg);
  void *ctx;
  size_t arg;
} pst_cuda_done;

static void CUDART_CB download_done(void *p) {
  pst_cuda_done *d = (pst_cuda_done *)p;
  d->done(d->ctx, d->arg);
  free(d);
}

/* A layer's gradient: copied to the host on the copy stream once the compute stream has
 * made it, while the compute stream goes on with the layers below. */
static int cuda_download(pst_backend *b, void *host_dst, const void *src, size_t bytes,
                         void (*done)(void *ctx, size_t arg), void *ctx, size_t arg) {
  pst_cuda *c = pst_cuda_of(b);
  PST_CUDA_REQUIRE((host_dst && src) || bytes == 0, "%s: download with a NULL pointer", c->name);
  PST_CUDA_ENTER(c);
  int rc = copy_stream_ready(c);
  if (rc != 0) return rc;
  CUDA_CHECK(cudaEventRecord(c->computed, c->stream));
  CUDA_CHECK(cudaStreamWaitEvent(c->copy_stream, c->computed, 0));
  if (bytes > 0)
    CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, c->copy_stream));
  if (done == NULL) return 0;
  pst_cuda_done *d = (pst_cuda_done *)malloc(sizeof *d);
  if (d == NULL) return -ENOMEM;
  d->done = done;
  d->ctx = ctx;
  d->arg = arg;
  /* cudaLaunchHostFunc: the function runs on a runtime thread once the copy is done and
   * must make no CUDA call (backend.h's rule for done: it must not call the backend). */
  cudaError_t e = cudaLaunchHostFunc(c->copy_stream, download_done, d);
  if (e != cudaSuccess) {
    free(d);
    CUDA_CHECK(e);
  }
  return 0;
}

static void cuda_describe(pst_backend *b, const char *what, int layer, char *out, size_t outlen) {
  pst_cuda *c = pst_cuda_of(b);
  if (!out || outlen == 0) return;
  what = what ? what : "";
  /* A layer index not above the previous one starts a new sweep over the model. */
  if (layer <= c->describe_last_layer) c->describe_seen_conv = 0;
  c->describe_last_layer = layer;
  int n = snprintf(out, outlen, "%s (%s): ", c->name, c->device_name);
  if (n < 0 || (size_t)n >= outlen) return;
  char *rest = out + n;
  size_t restlen = outlen - (size_t)n;
  if (strcmp(what, "dense") == 0) {
    snprintf(rest, restlen, "cublasSgemm FP32 (no TF32), bias and activation kernels");
  } else if (strcmp(what, "conv2d") == 0) {
    if (pst_cuda_conv_describe(c, c->describe_seen_conv++, rest, restlen) != 0)
      snprintf(rest, restlen, "cuDNN conv NHWC/OHWI FP32 (algorithms chosen at first use)");
  } else if (strcmp(what, "maxpool") == 0) {
    snprintf(rest, restlen, "max pooling kernels NHWC (padding never wins, dy to the first "
                            "maximum)");
  } else if (strcmp(what, "depthwise_conv2d") == 0) {
    snprintf(rest, restlen, "cuDNN grouped convolution (groupCount = channels) NHWC FP32");
  } else if (strcmp(what, "avgpool") == 0 || strcmp(what, "global_avgpool") == 0) {
    snprintf(rest, restlen, "average pooling kernels NHWC (padding excluded from the mean)");
  } else if (strcmp(what, "dropout") == 0) {
    snprintf(rest, restlen, "dropout kernel (counter-based mask, same as the CPU's)");
  } else if (strcmp(what, "add") == 0) {
    snprintf(rest, restlen, "element-wise add kernel");
  } else if (strcmp(what, "concatenate") == 0) {
    snprintf(rest, restlen, "strided copy kernel per input (channels, NHWC)");
  } else if (strcmp(what, "flatten") == 0) {
    snprintf(rest, restlen, "no-op (NHWC is already flat)");
  } else if (strcmp(what, "batchnorm") == 0) {
    snprintf(rest, restlen, "batch normalization kernels ([rows, C]: per-channel sums in double, "
                            "element-wise pass)");
  } else {
    snprintf(rest, restlen, "CUDA kernels");
  }
}

static void cuda_destroy(pst_backend *b) {
  if (!b) return;
  pst_cuda *c = pst_cuda_of(b);
  if (c) {
    (void)cudaSetDevice(c->device);
    if (c->stream) (void)cudaStreamSynchronize(c->stream);
    if (c->copy_stream) (void)cudaStreamSynchronize(c->copy_stream);
    pst_cuda_conv_plans_destroy(c);
    if (c->cudnn) cudnnDestroy(c->cudnn);
    if (c->cublas) cublasDestroy(c->cublas);
    /* Whatever the worker did not free goes with the backend. */
    for (size_t i = 0; i < c->n_allocs; i++) (void)cudaFree(c->allocs[i].p);
    free(c->allocs);
    if (c->h_stats) (void)cudaFreeHost(c->h_stats);
    if (c->stage) (void)cudaFreeHost(c->stage);
    if (c->stream) (void)cudaStreamDestroy(c->stream);
    if (c->copy_stream) (void)cudaStreamDestroy(c->copy_stream);
    if (c->copied) (void)cudaEventDestroy(c->copied);
    if (c->computed) (void)cudaEventDestroy(c->computed);
    free(c);
  }
  free(b);
}

/* ---- discovery --------------------------------------------------------------------- */

PST_CUDA_EXPORT int pst_cuda_probe(char *why, size_t whylen) {
  /* cudaGetDeviceCount: the visible devices (CUDA_VISIBLE_DEVICES applies); an error here
   * (no driver, a driver older than the runtime) is the reason a host has no usable GPU. */
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (why && whylen) snprintf(why, whylen, "%s", cudaGetErrorString(e));
    return -ENODEV;
  }
  if (n == 0 && why && whylen) snprintf(why, whylen, "the CUDA runtime sees no device");
  return n;
}

PST_CUDA_EXPORT int pst_cuda_device_count(void) { return pst_cuda_probe(NULL, 0); }

PST_CUDA_EXPORT int pst_cuda_describe_device(int i, char *out, size_t outlen) {
  char why[256];
  int n = pst_cuda_probe(why, sizeof why);
  if (n < 0) {
    if (out && outlen) snprintf(out, outlen, "no CUDA devices: %s", why);
    return n;
  }
  if (i < 0 || i >= n) {
    if (out && outlen)
      snprintf(out, outlen, "cuda:%d: no such device (%d visible)", i, n);
    return -ENODEV;
  }
  cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, i);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (out && outlen) snprintf(out, outlen, "cuda:%d: %s", i, cudaGetErrorString(e));
    return pst_cuda_errno_from_cuda(e);
  }
  if (out && outlen)
    snprintf(out, outlen, "cuda:%d: %s, %.1f GiB, compute capability %d.%d", i, prop.name,
             (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), prop.major, prop.minor);
  return 0;
}

/* ---- creation ---------------------------------------------------------------------- */

/* The body of pst_cuda_backend_create; on failure the caller destroys the half-built
 * backend. CUDA_CHECK and friends log the detail, err gets the one-line summary. */
static int cuda_setup(pst_cuda *c, int device, char *err, size_t errlen) {
  /* cudaGetDeviceProperties, cudaSetDevice: device in [0, count), checked by the caller. */
  cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess) {
    snprintf(err, errlen, "cuda:%d: cannot query the device: %s", device, cudaGetErrorString(e));
    return pst_cuda_errno_from_cuda(e);
  }
  snprintf(c->device_name, sizeof c->device_name, "%s", prop.name);
  c->cc_major = prop.major;
  c->cc_minor = prop.minor;
  if (prop.major < 8)
    pst_cuda_log(4, "%s: compute capability %d.%d: this library carries code for 8.0 and 9.0 "
                 "(and PTX for 9.0); older GPUs are not supported", c->name, prop.major,
                 prop.minor);
  e = cudaSetDevice(device);
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    snprintf(err, errlen, "cuda:%d: cannot initialise the device: %s", device,
             cudaGetErrorString(e));
    return pst_cuda_errno_from_cuda(e);
  }
  /* cublasCreate, cublasSetStream, cublasSetMathMode and cudnnCreate, cudnnSetStream: on
   * the current device (just set), bound to this backend's stream. */
  cublasStatus_t bs = cublasCreate(&c->cublas);
  if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetStream(c->cublas, c->stream);
  /* FP32 GEMMs stay FP32: TF32 tensor cores would break parity with the CPU backend. */
  if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetMathMode(c->cublas, CUBLAS_DEFAULT_MATH);
  if (bs != CUBLAS_STATUS_SUCCESS) {
    snprintf(err, errlen, "cuda:%d: cuBLAS initialisation failed: %s", device,
             cublasGetStatusString(bs));
    return -EIO;
  }
  cudnnStatus_t ds = cudnnCreate(&c->cudnn);
  if (ds == CUDNN_STATUS_SUCCESS) ds = cudnnSetStream(c->cudnn, c->stream);
  if (ds != CUDNN_STATUS_SUCCESS) {
    snprintf(err, errlen, "cuda:%d: cuDNN initialisation failed: %s", device,
             cudnnGetErrorString(ds));
    return -EIO;
  }
  c->d_stats = (pst_cuda_xent_stats *)pst_cuda_dev_alloc(c, sizeof(pst_cuda_xent_stats),
                                                         "loss statistics");
  if (!c->d_stats) {
    snprintf(err, errlen, "cuda:%d: cannot allocate the loss statistics (memory cap %.1f MiB?)",
             device, mib(c->mem_limit));
    return -ENOMEM;
  }
  e = cudaMallocHost((void **)&c->h_stats, sizeof(pst_cuda_xent_stats));
  if (e != cudaSuccess) {
    c->h_stats = NULL;
    snprintf(err, errlen, "cuda:%d: cudaMallocHost: %s", device, cudaGetErrorString(e));
    return pst_cuda_errno_from_cuda(e);
  }
  return 0;
}

static const char *cuda_last_error(pst_backend *b) {
  (void)b; /* the reason is the calling thread's, whichever backend it used */
  return pst_cuda_last_error();
}

/* Bytes held through pst_cuda_dev_alloc: the net's tensors and the backend's scratch buffers. */
static size_t cuda_memory_in_use(pst_backend *b) { return ((pst_cuda *)b->impl)->mem_used; }

PST_CUDA_EXPORT int pst_cuda_backend_create(int device, size_t mem_limit_bytes, pst_backend **out,
                                            char *err, size_t errlen) {
  char errbuf[256];
  if (!err || errlen == 0) {
    err = errbuf;
    errlen = sizeof errbuf;
  }
  err[0] = '\0';
  if (!out) {
    snprintf(err, errlen, "pst_cuda_backend_create: out is NULL");
    return -EINVAL;
  }
  *out = NULL;
  char why[256];
  int n = pst_cuda_probe(why, sizeof why);
  if (n <= 0) {
    snprintf(err, errlen, "no CUDA devices: %s", why);
    return n < 0 ? n : -ENODEV;
  }
  if (device < 0 || device >= n) {
    snprintf(err, errlen, "cuda:%d: no such device (%d visible; CUDA_VISIBLE_DEVICES applies)",
             device, n);
    return -ENODEV;
  }
  pst_backend *b = (pst_backend *)calloc(1, sizeof *b);
  pst_cuda *c = (pst_cuda *)calloc(1, sizeof *c);
  if (!b || !c) {
    free(b);
    free(c);
    snprintf(err, errlen, "out of host memory");
    return -ENOMEM;
  }
  c->device = device;
  c->mem_limit = mem_limit_bytes;
  c->max_tensor_elems = 2147483647u; /* cuDNN's limit: pad.cu, pst_cuda_batch_slice */
  const char *cap = getenv("PSTRAIN_CUDA_MAX_TENSOR_ELEMS");
  if (cap && strtoull(cap, NULL, 10) > 0 && strtoull(cap, NULL, 10) < c->max_tensor_elems)
    c->max_tensor_elems = (size_t)strtoull(cap, NULL, 10);
  const char *copy = getenv("PSTRAIN_CUDA_COPY");
  c->copy_mode = copy && strcmp(copy, "peer") == 0 ? 1 : copy && strcmp(copy, "staged") == 0 ? 2 : 0;
  c->describe_last_layer = -1;
  snprintf(c->name, sizeof c->name, "cuda:%d", device);
  b->name = c->name;
  b->host_memory = 0;
  b->impl = c;
  b->alloc = cuda_alloc;
  b->free = cuda_free;
  b->host_alloc = cuda_host_alloc;
  b->host_free = cuda_host_free;
  b->memory_in_use = cuda_memory_in_use;
  b->upload = cuda_upload;
  b->download = cuda_download;
  b->to_device = cuda_to_device;
  b->to_host = cuda_to_host;
  b->synchronize = cuda_synchronize;
  b->copy_from = pst_cuda_copy_from;
  b->dense_forward = pst_cuda_dense_forward;
  b->dense_backward = pst_cuda_dense_backward;
  b->dense_forward_rows = pst_cuda_dense_forward_rows;
  b->dense_backward_rows = pst_cuda_dense_backward_rows;
  b->relu_forward = pst_cuda_relu_forward;
  b->relu_backward = pst_cuda_relu_backward;
  b->relu6_forward = pst_cuda_relu6_forward;
  b->relu6_backward = pst_cuda_relu6_backward;
  b->dropout_forward = pst_cuda_dropout_forward;
  b->dropout_backward = pst_cuda_dropout_backward;
  b->softmax_xent = pst_cuda_softmax_xent;
  b->conv2d_forward = pst_cuda_conv2d_forward;
  b->conv2d_backward = pst_cuda_conv2d_backward;
  b->depthwise_conv2d_forward = pst_cuda_depthwise_conv2d_forward;
  b->depthwise_conv2d_backward = pst_cuda_depthwise_conv2d_backward;
  b->maxpool_forward = pst_cuda_maxpool_forward;
  b->maxpool_backward = pst_cuda_maxpool_backward;
  b->avgpool_forward = pst_cuda_avgpool_forward;
  b->avgpool_backward = pst_cuda_avgpool_backward;
  b->add = pst_cuda_add;
  b->concat_forward = pst_cuda_concat_forward;
  b->concat_backward = pst_cuda_concat_backward;
  b->batchnorm_forward_train = pst_cuda_batchnorm_forward_train;
  b->batchnorm_forward_infer = pst_cuda_batchnorm_forward_infer;
  b->batchnorm_backward = pst_cuda_batchnorm_backward;
  b->last_error = cuda_last_error;
  b->describe = cuda_describe;
  b->destroy = cuda_destroy;
  int rc = cuda_setup(c, device, err, errlen);
  if (rc != 0) {
    cuda_destroy(b);
    return rc;
  }
  *out = b;
  return 0;
}
