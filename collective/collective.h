/* The collectives an all-reduce job needs (--mode allreduce, issue 39), behind one small
 * interface so that the training loop (worker/allreduce/) never names the library: Open MPI
 * (collective/mpi.c) for everything, and NCCL (collective/nccl.c, loaded at run time) for the
 * gradients' sums of GPU ranks when asked (pst_coll_use_nccl). The library is an existing
 * engine, never a ring of our own: the sums are its algorithms'.
 *
 * Every call is collective: every rank makes the same calls in the same order with the same
 * counts. Errors: 0, or a negative errno with a one-line reason in pst_coll_error(). A rank
 * that dies does not hang the others for long: Open MPI's launcher (mpirun) sees the process
 * end and aborts the job (MPI's failure model: the job ends, nothing recovers; see
 * docs/modes.md). */
#ifndef PSTRAIN_COLLECTIVE_COLLECTIVE_H
#define PSTRAIN_COLLECTIVE_COLLECTIVE_H

#include <stddef.h>
#include <stdint.h>

typedef struct pst_coll pst_coll;

/* The all-reduce algorithm asked for: the library's own choice, or one forced. */
typedef enum {
  PST_COLL_ALG_AUTO = 0,
  PST_COLL_ALG_RING,
  PST_COLL_ALG_RECURSIVE_DOUBLING,
  PST_COLL_ALG_RABENSEIFNER,
} pst_coll_alg;

/* "auto", "ring", "recursive-doubling" or "rabenseifner" into out: 0, or -EINVAL. */
int pst_coll_alg_parse(const char *name, pst_coll_alg *out);
const char *pst_coll_alg_name(pst_coll_alg alg);

/* Joins the job: the library's start (MPI_Init_thread) with the algorithm asked for set
 * before it (Open MPI reads its MCA parameters at start). One per process. */
int pst_coll_init(pst_coll_alg alg, pst_coll **out, char *err, size_t errlen);
int pst_coll_rank(const pst_coll *c);
int pst_coll_size(const pst_coll *c);
/* What runs the all-reduce, one line: the library and version, and the algorithm with how
 * it was chosen (forced through which parameter, read back from the library; or the
 * library's own rules for the message size). */
void pst_coll_describe(const pst_coll *c, size_t bytes, char *buf, size_t len);
/* Moves the float sums (pst_coll_allreduce_f32 and the started ones) to NCCL on CUDA device
 * `device`, staged through the GPU from host memory; the sums of floats lying in
 * base[0..n_floats) keep their offsets there, so that started sums (buckets) do not overlap
 * (base is page-locked where CUDA allows). Collective: every rank calls it, and every rank
 * fails alike, with the first failing rank's reason (no NCCL or CUDA runtime to load, no
 * such device, two ranks on one GPU), so that none is left waiting in NCCL's set-up.
 * NOT RUN ON A GPU YET (collective/nccl.h). */
int pst_coll_use_nccl(pst_coll *c, int device, float *base, size_t n_floats);
/* buf[n] from rank root to every rank. */
int pst_coll_bcast_f32(pst_coll *c, float *buf, size_t n, int root);
int pst_coll_bcast_u64(pst_coll *c, uint64_t *buf, size_t n, int root);
/* buf[n] becomes the sum over the ranks, in place. */
int pst_coll_allreduce_f32(pst_coll *c, float *buf, size_t n);
int pst_coll_allreduce_f64(pst_coll *c, double *buf, size_t n);
/* all[size]: every rank's `mine`, by rank. */
int pst_coll_allgather_u64(pst_coll *c, uint64_t mine, uint64_t *all);
/* A sum started and waited for later, so that it runs while the caller computes (the
 * fused buckets of the backward pass). At most PST_COLL_MAX_PENDING at once. */
#define PST_COLL_MAX_PENDING 64
int pst_coll_iallreduce_f32(pst_coll *c, float *buf, size_t n);
/* Lets the library move the pending sums along (it progresses only inside its calls). */
void pst_coll_poke(pst_coll *c);
/* Waits for every pending sum. */
int pst_coll_wait_all(pst_coll *c);
int pst_coll_barrier(pst_coll *c);
const char *pst_coll_error(const pst_coll *c);
/* Leaves the job cleanly (every rank). */
void pst_coll_finalize(pst_coll *c);
/* Ends the whole job from one rank, with exit code `code` (every rank's process ends). */
void pst_coll_abort(pst_coll *c, int code);

#endif
