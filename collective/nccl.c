/* NCCL loaded at run time for the float sums of GPU ranks (collective/nccl.h). The limits of
 * each call, from NCCL's and CUDA's documentation, and what is done about them:
 *  - ncclAllReduce takes a size_t count of ncclFloat32 and may work in place (sendbuff ==
 *    recvbuff); it is queued on a stream and returns before the sum is done. Its errors may
 *    come later, asynchronously (a peer gone): ncclCommGetAsyncError is polled while
 *    waiting, and ncclCommAbort ends a communicator that failed (ncclCommDestroy would wait
 *    for the peers).
 *  - ncclCommInitRank blocks until all nranks ranks have called it with the same id; each
 *    rank of a communicator must have a GPU of its own (a second rank on one GPU is refused
 *    by NCCL, "duplicate GPU"): mpi.c refuses that before anyone joins, and joins only once
 *    every rank has prepared.
 *  - ncclUniqueId is 128 bytes, made by one rank and passed by value to every rank's
 *    ncclCommInitRank.
 *  - The CUDA calls act on the calling thread's current device: cudaSetDevice comes first
 *    in prepare, and the rank's training thread makes every later call.
 *  - cudaMemcpyAsync from pageable host memory is staged and synchronous with the host;
 *    only page-locked memory (cudaHostRegister, which may fail: the lock limit, a range
 *    already registered) lets the copies queue behind the backward pass. Either works.
 *  - cudaStreamQuery returns cudaErrorNotReady (600) while work is pending.
 * Versions: ncclGetVersion gives major*10000 + minor*100 + patch from NCCL 2.9 on (older:
 * major*1000 + minor*100 + patch); NCCL 2.x keeps the C ABI used here. */
#include "collective/nccl.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* CUDA's and NCCL's C ABI: enums are ints, handles pointers, the unique id a 128-byte
 * struct passed by value. */
typedef int cuda_err;
typedef void *cuda_stream;
typedef int nccl_res;
typedef void *nccl_comm;
typedef struct {
  char internal[PST_NCCL_ID_BYTES];
} nccl_id;

enum {
  CUDA_SUCCESS = 0,
  CUDA_NOT_READY = 600,       /* cudaErrorNotReady */
  CUDA_H2D = 1,               /* cudaMemcpyHostToDevice */
  CUDA_D2H = 2,               /* cudaMemcpyDeviceToHost */
  CUDA_STREAM_NON_BLOCKING = 1,
  NCCL_SUCCESS = 0,
  NCCL_IN_PROGRESS = 7,       /* ncclInProgress: a non-blocking communicator still working */
  NCCL_FLOAT32 = 7,
  NCCL_SUM = 0,
};

static struct {
  int loaded;
  char where[256];
  int version;
  cuda_err (*set_device)(int);
  cuda_err (*stream_create)(cuda_stream *, unsigned);
  cuda_err (*stream_destroy)(cuda_stream);
  cuda_err (*stream_query)(cuda_stream);
  cuda_err (*malloc_)(void **, size_t);
  cuda_err (*free_)(void *);
  cuda_err (*host_register)(void *, size_t, unsigned);
  cuda_err (*host_unregister)(void *);
  cuda_err (*memcpy_async)(void *, const void *, size_t, int, cuda_stream);
  const char *(*cuda_error)(cuda_err);
  nccl_res (*get_version)(int *);
  nccl_res (*get_unique_id)(nccl_id *);
  nccl_res (*comm_init_rank)(nccl_comm *, int, nccl_id, int);
  nccl_res (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm, cuda_stream);
  nccl_res (*async_error)(nccl_comm, nccl_res *);
  nccl_res (*comm_abort)(nccl_comm);
  nccl_res (*comm_destroy)(nccl_comm);
  const char *(*nccl_error)(nccl_res);
} L;

struct pst_nccl {
  int device;
  cuda_stream stream;
  float *dev;            /* [max_floats] on the device */
  size_t max_floats;
  float *pinned;         /* the host range page-locked (NULL: none) */
  nccl_comm comm;
  int pending;           /* sums started and not yet waited for */
};

/* dlopen of the first of names that loads; its name in used. */
static void *open_first(const char *const *names, int n, int flags, const char **used) {
  for (int i = 0; i < n; i++) {
    if (!names[i] || !names[i][0]) continue;
    void *h = dlopen(names[i], flags);
    if (h) {
      *used = names[i];
      return h;
    }
  }
  return NULL;
}

#define SYM(h, field, name)                                                            \
  do {                                                                                 \
    *(void **)&L.field = dlsym(h, name);                                               \
    if (!L.field) {                                                                    \
      snprintf(err, errlen, "%s has no %s: not the library it should be", where, name); \
      return -ENOENT;                                                                  \
    }                                                                                  \
  } while (0)

int pst_nccl_load(char *err, size_t errlen) {
  if (L.loaded) return 0;
  /* The runtime the CUDA backend already loaded (kernels/cuda links libcudart.so.13), so
   * that both share it; else one from the library path or the toolkit. */
  static const char *const cudart[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so",
                                       "/usr/local/cuda/lib64/libcudart.so.13",
                                       "/usr/local/cuda/lib64/libcudart.so.12",
                                       "/usr/local/cuda/lib64/libcudart.so"};
  const int nc = (int)(sizeof cudart / sizeof cudart[0]);
  const char *where = NULL;
  void *hc = open_first(cudart, nc, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD, &where);
  if (!hc) hc = open_first(cudart, nc, RTLD_NOW | RTLD_LOCAL, &where);
  if (!hc) {
    snprintf(err, errlen, "cannot load the CUDA runtime (libcudart.so.13, .12 or libcudart.so, "
             "on the library path or in /usr/local/cuda/lib64)");
    return -ENOENT;
  }
  SYM(hc, set_device, "cudaSetDevice");
  SYM(hc, stream_create, "cudaStreamCreateWithFlags");
  SYM(hc, stream_destroy, "cudaStreamDestroy");
  SYM(hc, stream_query, "cudaStreamQuery");
  SYM(hc, malloc_, "cudaMalloc");
  SYM(hc, free_, "cudaFree");
  SYM(hc, host_register, "cudaHostRegister");
  SYM(hc, host_unregister, "cudaHostUnregister");
  SYM(hc, memcpy_async, "cudaMemcpyAsync");
  SYM(hc, cuda_error, "cudaGetErrorString");
  const char *env = getenv("PSTRAIN_NCCL_LIB");
  const char *const nccl[] = {env, "libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2"};
  void *hn = open_first(nccl, 3, RTLD_NOW | RTLD_LOCAL, &where);
  if (!hn) {
    const char *why = dlerror();
    snprintf(err, errlen, "cannot load NCCL (%s%slibnccl.so.2 on the library path or in "
             "/usr/local/cuda/lib64): %s", env ? env : "", env ? ", " : "",
             why ? why : "not found");
    return -ENOENT;
  }
  SYM(hn, get_version, "ncclGetVersion");
  SYM(hn, get_unique_id, "ncclGetUniqueId");
  SYM(hn, comm_init_rank, "ncclCommInitRank");
  SYM(hn, all_reduce, "ncclAllReduce");
  SYM(hn, async_error, "ncclCommGetAsyncError");
  SYM(hn, comm_abort, "ncclCommAbort");
  SYM(hn, comm_destroy, "ncclCommDestroy");
  SYM(hn, nccl_error, "ncclGetErrorString");
  if (L.get_version(&L.version) != NCCL_SUCCESS) L.version = 0;
  snprintf(L.where, sizeof L.where, "%s", where);
  L.loaded = 1;
  return 0;
}

int pst_nccl_version(void) { return L.loaded ? L.version : 0; }
const char *pst_nccl_where(void) { return L.loaded ? L.where : ""; }

static int cuda_failed(const char *what, cuda_err e, char *err, size_t errlen) {
  snprintf(err, errlen, "%s: CUDA error %d (%s)", what, e, L.cuda_error ? L.cuda_error(e) : "?");
  return -EIO;
}

static int nccl_failed(const char *what, nccl_res r, char *err, size_t errlen) {
  snprintf(err, errlen, "%s: NCCL error %d (%s)", what, r, L.nccl_error ? L.nccl_error(r) : "?");
  return -EIO;
}

int pst_nccl_unique_id(unsigned char id[PST_NCCL_ID_BYTES], char *err, size_t errlen) {
  nccl_id x;
  nccl_res r = L.get_unique_id(&x);
  if (r != NCCL_SUCCESS) return nccl_failed("ncclGetUniqueId", r, err, errlen);
  memcpy(id, x.internal, PST_NCCL_ID_BYTES);
  return 0;
}

int pst_nccl_prepare(pst_nccl **out, int device, size_t max_floats, float *host,
                     size_t host_floats, char *err, size_t errlen) {
  *out = NULL;
  if (!L.loaded) {
    snprintf(err, errlen, "NCCL is not loaded");
    return -EINVAL;
  }
  if (max_floats == 0 || max_floats > SIZE_MAX / sizeof(float)) {
    snprintf(err, errlen, "a sum of %zu floats", max_floats);
    return -EINVAL;
  }
  pst_nccl *n = calloc(1, sizeof *n);
  if (!n) {
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  n->device = device;
  n->max_floats = max_floats;
  char what[96];
  snprintf(what, sizeof what, "cudaSetDevice(%d)", device);
  cuda_err e = L.set_device(device);
  if (e == CUDA_SUCCESS) {
    snprintf(what, sizeof what, "cudaStreamCreateWithFlags on cuda:%d", device);
    e = L.stream_create(&n->stream, CUDA_STREAM_NON_BLOCKING);
  }
  if (e == CUDA_SUCCESS) {
    snprintf(what, sizeof what, "cudaMalloc of %zu floats on cuda:%d", max_floats, device);
    e = L.malloc_((void **)&n->dev, max_floats * sizeof(float));
  }
  if (e != CUDA_SUCCESS) {
    int rc = cuda_failed(what, e, err, errlen);
    pst_nccl_close(n, 0);
    return rc;
  }
  /* Page-locked host memory lets the copies run behind the caller; without it they still
   * work, staged by the driver (the description says which). */
  if (host && host_floats > 0 && L.host_register(host, host_floats * sizeof(float), 0) == CUDA_SUCCESS)
    n->pinned = host;
  *out = n;
  return 0;
}

int pst_nccl_join(pst_nccl *n, int nranks, int rank, const unsigned char id[PST_NCCL_ID_BYTES],
                  char *err, size_t errlen) {
  nccl_id x;
  memcpy(x.internal, id, PST_NCCL_ID_BYTES);
  cuda_err e = L.set_device(n->device);
  if (e != CUDA_SUCCESS) return cuda_failed("cudaSetDevice", e, err, errlen);
  nccl_res r = L.comm_init_rank(&n->comm, nranks, x, rank);
  if (r != NCCL_SUCCESS) {
    n->comm = NULL;
    return nccl_failed("ncclCommInitRank", r, err, errlen);
  }
  return 0;
}

int pst_nccl_start_f32(pst_nccl *n, float *host, size_t off, size_t count, char *err,
                       size_t errlen) {
  if (!n->comm || off > n->max_floats || count > n->max_floats - off) {
    snprintf(err, errlen, "a sum of %zu floats at %zu on a buffer of %zu%s", count, off,
             n->max_floats, n->comm ? "" : " before joining");
    return -EINVAL;
  }
  if (count == 0) return 0;
  float *d = n->dev + off;
  size_t bytes = count * sizeof(float);
  cuda_err e = L.memcpy_async(d, host, bytes, CUDA_H2D, n->stream);
  if (e != CUDA_SUCCESS) return cuda_failed("cudaMemcpyAsync to the GPU", e, err, errlen);
  nccl_res r = L.all_reduce(d, d, count, NCCL_FLOAT32, NCCL_SUM, n->comm, n->stream);
  if (r != NCCL_SUCCESS) return nccl_failed("ncclAllReduce", r, err, errlen);
  e = L.memcpy_async(host, d, bytes, CUDA_D2H, n->stream);
  if (e != CUDA_SUCCESS) return cuda_failed("cudaMemcpyAsync to the host", e, err, errlen);
  n->pending++;
  return 0;
}

int pst_nccl_wait(pst_nccl *n, char *err, size_t errlen) {
  if (!n->pending) return 0;
  /* Polled rather than cudaStreamSynchronize: a peer that died leaves the sum pending for
   * ever, and only NCCL's asynchronous error says so. */
  struct timespec nap = {0, 20000};
  for (;;) {
    cuda_err e = L.stream_query(n->stream);
    if (e == CUDA_SUCCESS) break;
    if (e != CUDA_NOT_READY) return cuda_failed("the sum's stream", e, err, errlen);
    nccl_res a = NCCL_SUCCESS;
    nccl_res r = L.async_error(n->comm, &a);
    if (r != NCCL_SUCCESS || (a != NCCL_SUCCESS && a != NCCL_IN_PROGRESS)) {
      int rc = nccl_failed("ncclAllReduce (asynchronous)", r != NCCL_SUCCESS ? r : a, err, errlen);
      L.comm_abort(n->comm);
      n->comm = NULL;
      return rc;
    }
    nanosleep(&nap, NULL);
  }
  n->pending = 0;
  return 0;
}

void pst_nccl_describe(const pst_nccl *n, char *buf, size_t len) {
  int v = L.version, major = v >= 10000 ? v / 10000 : v / 1000;
  int minor = v >= 10000 ? v / 100 % 100 : v / 100 % 10, patch = v % 100;
  snprintf(buf, len, "NCCL %d.%d.%d (%s) on cuda:%d, the floats copied through %s host memory",
           major, minor, patch, L.where, n ? n->device : -1,
           n && n->pinned ? "page-locked" : "pageable");
}

void pst_nccl_close(pst_nccl *n, int abort) {
  if (!n) return;
  if (n->comm) (abort ? L.comm_abort : L.comm_destroy)(n->comm);
  if (n->pinned) L.host_unregister(n->pinned);
  if (n->dev) L.free_(n->dev);
  if (n->stream) L.stream_destroy(n->stream);
  free(n);
}
