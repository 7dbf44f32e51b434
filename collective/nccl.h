/* NCCL for the float sums of GPU ranks (issue 39, point 2), inside collective/: mpi.c calls
 * this and nothing else does; this calls neither mpi.c nor pstrain code. NCCL and the CUDA
 * runtime are loaded at run time (dlopen of the host's libnccl.so.2 and libcudart), so that
 * the collective builds and runs on machines with neither; the prototypes below are NCCL's
 * and CUDA's documented C ABI (nccl.h 2.x, cuda_runtime_api.h), declared here for that
 * reason.
 *
 * The sums are NCCL's (ncclAllReduce, ncclSum over ncclFloat32: its ring or tree, chosen by
 * NCCL), never ours. The gradient reaches them from host memory, because the training core
 * hands the rank its gradient in host memory (kernels/net.h) and the ps's optimizer, which
 * every rank applies to the sum, runs on the host: each sum is a copy to the GPU, the
 * all-reduce on the GPU, and a copy back, all on one stream of this module's, from host
 * memory page-locked where cudaHostRegister allows it (otherwise pageable, slower, said in
 * the description).
 *
 * Bootstrapping is the caller's: one rank makes the unique id (pst_nccl_unique_id), the
 * caller sends it to every rank (over MPI), every rank prepares (pst_nccl_prepare: the
 * library, the device, the stream and buffers, everything that can fail locally), the
 * caller checks that every rank prepared (so that no rank waits in ncclCommInitRank for a
 * rank that will never join), then every rank joins (pst_nccl_join).
 *
 * NOT RUN ON A GPU YET (2026-11-28): this compiles and its loading and refusals are tested
 * on machines without a GPU; `pstrain gpu-check` runs its sums whenever the host has the
 * GPUs and Open MPI for it. */
#ifndef PSTRAIN_COLLECTIVE_NCCL_H
#define PSTRAIN_COLLECTIVE_NCCL_H

#include <stddef.h>

#define PST_NCCL_ID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES */

typedef struct pst_nccl pst_nccl;

/* Loads NCCL (PSTRAIN_NCCL_LIB, else libnccl.so.2 on the library path, else
 * /usr/local/cuda/lib64/libnccl.so.2) and the CUDA runtime (the one the process already
 * holds, else libcudart.so.13, .12 or libcudart.so, there or in /usr/local/cuda/lib64). 0,
 * or -ENOENT with what was tried in err. Idempotent. */
int pst_nccl_load(char *err, size_t errlen);
/* NCCL's version as 22803 for 2.28.3, and where it was loaded from (after a load). */
int pst_nccl_version(void);
const char *pst_nccl_where(void);
/* A new unique id (ncclGetUniqueId), on the rank that bootstraps. */
int pst_nccl_unique_id(unsigned char id[PST_NCCL_ID_BYTES], char *err, size_t errlen);
/* This rank's side on CUDA device `device`: the stream, a device buffer of max_floats, and
 * host[0..host_floats) page-locked when it can be (host may be NULL). 0, or a negative code
 * with a reason. */
int pst_nccl_prepare(pst_nccl **out, int device, size_t max_floats, float *host,
                     size_t host_floats, char *err, size_t errlen);
/* Joins the communicator of nranks (ncclCommInitRank; blocks until every rank has). */
int pst_nccl_join(pst_nccl *n, int nranks, int rank, const unsigned char id[PST_NCCL_ID_BYTES],
                  char *err, size_t errlen);
/* Starts host[0..count) summed over the ranks in place (count <= max_floats, host within the
 * buffer given to prepare or not): the copies and the sum queued on the stream; the floats
 * are at device offset `off` (a bucket's own place, so that started sums do not overlap). */
int pst_nccl_start_f32(pst_nccl *n, float *host, size_t off, size_t count, char *err,
                       size_t errlen);
/* Waits until every started sum is back in host memory, watching NCCL's asynchronous
 * errors (a rank gone): on one, the communicator is aborted and the reason returned. */
int pst_nccl_wait(pst_nccl *n, char *err, size_t errlen);
/* One line: NCCL's version and where from, the device, page-locked or not. */
void pst_nccl_describe(const pst_nccl *n, char *buf, size_t len);
/* Frees everything; abort: ncclCommAbort (a failing job) rather than ncclCommDestroy. */
void pst_nccl_close(pst_nccl *n, int abort);

#endif
