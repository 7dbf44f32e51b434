/* pstrain-worker --mode allreduce (issue 39): no ps. N ranks started by mpirun each hold the
 * whole model and its optimizer state; rank 0 initialises the weights from the seed and
 * broadcasts them; every rank trains its shard of the data with the batch and loss scaling of
 * a sync ps job, the ranks' gradients are summed by the collective library
 * (collective/collective.h: Open MPI's MPI_Allreduce), and every rank applies the ps's own
 * update code to the sum (ps/train/update.h over ps/train/optim.h: the same sync step, clip
 * checks, learning-rate schedule and finiteness rule), so that a step is the arithmetic of a
 * sync ps step. Rank 0 writes the metrics and the summary a sync ps would.
 *
 * Files, calls one way down this list: ar_main.c (flags, the run) -> ar_loop.c (set-up, the
 * steps, evaluations) -> ar_watch.c (the stall watch), ar_ckpt.c (checkpoints) and
 * ar_report.c (metrics lines, the summary), which call neither each other nor up. They call the worker's
 * set-up (worker/setup.h), its data position (worker/position.h), the clip norm
 * (worker/grad_clip.h), collective/ and ps/train/; nothing calls them but worker/main.c. */
#ifndef PSTRAIN_WORKER_ALLREDUCE_ALLREDUCE_H
#define PSTRAIN_WORKER_ALLREDUCE_ALLREDUCE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "collective/collective.h"
#include "ps/state/store.h"
#include "ps/train/optim.h"
#include "ps/train/update.h"
#include "worker/state.h"

/* The whole run of an all-reduce rank (pstrain-worker-allreduce, which pstrain-worker
 * --mode allreduce execs with its command line); returns the process's exit status. */
int wk_ar_main(int argc, char **argv);

/* What sums the gradients (--collective): Open MPI, or NCCL on the rank's GPU. */
typedef enum { WK_AR_COLL_AUTO = 0, WK_AR_COLL_MPI, WK_AR_COLL_NCCL } wk_ar_collective;

/* The job, from the flags: what a sync ps would have been given. */
typedef struct {
  const char *model;         /* preset or spec file */
  const char *optimizer;     /* its name, for the summary */
  int epochs, batch;         /* batch: per rank, as a sync ps's per worker */
  uint64_t seed;
  pst_opt_config opt;
  double clip_norm;          /* 0: none */
  double grad_limit;
  pst_lr_schedule lr_schedule;
  int report_every;
  const char *metrics_path;  /* rank 0's JSON lines, or "" */
  const char *summary_path;  /* rank 0's summary, or "" */
  pst_coll_alg alg;
  wk_ar_collective collective;
  int bucket_kib;            /* 0: one sum after the backward pass */
  const char *checkpoint_dir; /* rank 0 writes checkpoints here ("": none) */
  int checkpoint_every;      /* steps between checkpoints (0: each epoch's end only) */
  int checkpoint_keep;
  double checkpoint_seconds; /* rank 0's clock between checkpoints (0: off) */
  int eval_every;            /* steps between the test subset's evaluations (0: off) */
  int eval_samples;          /* that subset's samples, split across the ranks */
  double slow_factor;        /* this rank's --slow-factor (1: its own speed) */
  double delay_ms;           /* this rank's --delay-ms, before each sum and after it */
  const char *resume;        /* auto (the newest that fits) or never */
  double stall_timeout;      /* seconds a rank waits in a collective before it gives the job
                              * up (at least; 20 times the longest step when more; 0: never) */
} wk_ar_job;

/* A bucket of the fused sums (--bucket-kib): [off, end) of the gradient, started once the
 * backward pass has made all of it. */
typedef struct {
  size_t off, end;
  int started;
} wk_ar_bucket;

#define WK_AR_MAX_BUCKETS PST_COLL_MAX_PENDING

typedef struct {
  wk_ar_job job;
  wk_trainer t;              /* the compute, as a ps's worker sets it up (worker/setup.h) */
  pst_coll *coll;
  int rank, size;
  pst_store store;           /* the weights, double-buffered as on the ps */
  pst_optimizer optim;
  pst_update upd;            /* one sync share: the ranks' sum */
  FILE *metrics;
  double t0;                 /* monotonic seconds: weights broadcast, training begins */
  double eval_seconds;       /* of the wall time, evaluating */
  double sum_seconds;        /* of it, waiting for the sums (this rank) */
  double opt_seconds;        /* of it, the optimizer */
  double compute_seconds;    /* of it, forward and backward */
  double data_wait;
  uint64_t clipped;
  double test_accuracy, test_loss;
  int epochs_evaluated;
  uint64_t resumed_from;     /* the step a checkpoint put the job at (0: started afresh) */
  double last_ckpt;          /* rank 0: monotonic seconds of its last checkpoint (or start) */
  uint64_t checksum;
  uint64_t *rank_checksums;  /* [size] */
  wk_ar_bucket buckets[WK_AR_MAX_BUCKETS];
  int n_buckets, next_bucket; /* buckets start in backward order: highest first */
  char alg_desc[512];
  /* The stall watch (ar_watch.c): a thread that ends the job when this rank has waited in
   * a collective too long, the rank it waits for being stalled, frozen or cut off. */
  pthread_t watch;
  int watching;
  atomic_int watch_stop;
  atomic_llong wait_since_ns;   /* monotonic ns this rank entered a collective; 0: not in one */
  atomic_llong longest_step_ns; /* the longest step so far, collectives included */
  const char *_Atomic wait_what; /* what it waits in, for the message */
} wk_ar;

/* ar_loop.c: sets up the job on a (rank, size, coll and job filled; the data loaded into
 * a->t), trains every epoch and evaluates; 0, or a negative code with a reason naming the
 * step in err (the caller aborts the job). */
int wk_ar_run(wk_ar *a, char *err, size_t errlen);

/* ar_watch.c: the stall watch's thread, started once the job is set up and stopped at its
 * end; each collective the loop waits in is bracketed by wk_ar_wait_begin (what: "the
 * gradients' sum", ...) and wk_ar_wait_end. A rank that waits longer than the limit logs
 * "rank R: step S: waited ..." and exits 1 (mpirun then ends the job); every waiting rank
 * says so, so that the rank that did not is the one that stalled (the launcher names it). */
int wk_ar_watch_start(wk_ar *a);
void wk_ar_watch_stop(wk_ar *a);
void wk_ar_wait_begin(wk_ar *a, const char *what);
void wk_ar_wait_end(wk_ar *a);
/* A step took `seconds`, collectives included: the limit grows with the longest. */
void wk_ar_step_took(wk_ar *a, double seconds);

/* ar_ckpt.c: rank 0 writes a checkpoint of the step the job stands at (the others: no-op);
 * and, collectively, the newest checkpoint in the directory that this job's model and
 * settings fit, loaded by rank 0 and broadcast (weights, optimizer state, step). 0, or a
 * negative code with a reason in err. */
int wk_ar_ckpt_save(wk_ar *a, char *err, size_t errlen);
int wk_ar_ckpt_resume(wk_ar *a, char *err, size_t errlen);

/* ar_report.c, rank 0 only (the others: no-ops). */
int wk_ar_metrics_open(wk_ar *a, char *err, size_t errlen);
void wk_ar_metrics_train(wk_ar *a, double loss_sum, double correct, double samples);
void wk_ar_metrics_eval(wk_ar *a, int epoch, double loss_sum, double correct, double samples);
/* The test subset's evaluation at `point` (--eval-every): a ps's eval_subset record. */
void wk_ar_metrics_subset(wk_ar *a, uint32_t point, double loss_sum, double correct,
                          double samples, double asked, double asked_train_time);
int wk_ar_summary(wk_ar *a, double wall, char *err, size_t errlen);

#endif
