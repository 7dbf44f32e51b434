/* Running a whole training job on this machine: one pstrain-ps and N pstrain-worker
 * processes on 127.0.0.1, followed through the ps's metrics file, stopped together.
 * `pstrain local` is one run; `pstrain compare` is several. */
#ifndef PSTRAIN_LAUNCHER_RUN_H
#define PSTRAIN_LAUNCHER_RUN_H

#include <limits.h>
#include <stddef.h>

#include "worker/dataset.h"

#define PL_MAX_WORKERS 256
#define PL_MAX_GPU_ID 1023 /* largest id --gpus takes */
#define PL_MAX_SCHEDULE 64 /* points of a --schedule */

/* One point of `--schedule` (launcher/run/schedule.c): once `epoch` epochs' worth of samples are
 * trained, `delta` workers are started (> 0) or asked to leave (< 0). */
typedef struct {
  double epoch;
  int delta;
} pl_sched_point;

typedef struct pl_run_options {
  int workers;
  /* --workers MIN:MAX (issue 28): workers is MIN, the count started first, and workers_max
   * is MAX, the most the ps admits; 0 for a fixed count (--workers N). */
  int workers_max;
  /* --schedule: the text as given (NULL: none) and its points, in order. A schedule makes the
   * ps hand out the data (--data-order ps), so that workers may come and go. */
  const char *schedule;
  pl_sched_point sched[PL_MAX_SCHEDULE];
  int n_sched;
  const char *mode;           /* sync, async, ssp */
  int staleness;              /* ssp */
  int staleness_lr;           /* async/ssp: the ps's --staleness-lr */
  int backup_workers;         /* sync: apply after N-K gradients */
  const char *model;
  int epochs;
  int batch_size;
  double lr;
  const char *optimizer;
  const char *lr_schedule;     /* the ps's --lr-schedule; NULL: the ps's default (constant) */
  const char *lr_scaling;      /* the ps's --lr-scaling; NULL: the ps's default (none) */
  long long seed;
  const char *data_dir;
  const pst_data_flags *data_flags; /* the workers' --image-size, --augment, ...; NULL: theirs */
  int port;                   /* 0: pick a free one */
  int threads;                /* per worker */
  const char *device;         /* worker --device, or NULL */
  const char *gpus;           /* "0,2,3": one worker per GPU (times workers_per_gpu) */
  int workers_per_gpu;
  int gpu_memory_limit;       /* MiB */
  int log_placement;
  int push_by_layer;          /* workers' --push-by-layer (-1: not given, their default) */
  int pull_by_layer;          /* workers' --pull-by-layer (-1: not given, their default) */
  int chunk_kib;
  int tls;                    /* mutual TLS, with a throwaway CA made in run_dir */
  int ps_shards;              /* ps processes the weights are split over (0 or 1: one) */
  int ps_threads;             /* each ps's --threads; 0: the cores the workers leave free */
  double slow_factor[PL_MAX_WORKERS]; /* per worker; 0 or 1 = normal speed */
  double delay_ms[PL_MAX_WORKERS];    /* per worker: each pull and push this much later */
  int eval_every;             /* steps between evaluations on the test subset (0: off) */
  int report_every;           /* steps between the workers' loss reports (0: the ps's default) */
  int eval_samples;           /* test samples in that subset (0: the ps's default) */
  const char *run_dir;        /* logs, metrics and summary go here */
  const char *metrics_path;   /* NULL: <run_dir>/metrics.jsonl */
  const char *summary_path;   /* NULL: <run_dir>/summary.json */
  const char *tensorboard_dir; /* the ps's --tensorboard, or NULL */
  const char *metrics_listen; /* the ps's --metrics-listen (its dashboard), or NULL */
  int insecure;               /* no cluster secret: any user of this machine may join */
  /* The ps's checkpoint flags, passed on as given (NULL: not given, the ps's default). Every
   * shard gets the one directory and keeps its part in its own directory inside it. */
  const char *checkpoint_dir, *checkpoint_every, *checkpoint_seconds, *checkpoint_keep;
  /* The ps's --eval-on, --grad-limit and --clip-norm as given (NULL: the ps's defaults). */
  const char *eval_on, *grad_limit, *clip_norm, *grad_norm_factor;
  /* The ps's --topk-warmup, passed on only where the pushes are top-k (compare sweeps
   * encodings with it); NULL: the ps's default. */
  const char *topk_warmup;
  /* The ps's --push-compress and --pull-compress (common/codec.h; NULL: float32). */
  const char *push_compress, *pull_compress;
  /* --link RATE[,DELAY[,LOSS]] and --link-worker I:RATE[,...][;...] (launcher/links/link.h): each
   * worker in a network namespace of its own behind a shaped link (NULL: loopback). */
  const char *link, *link_worker;
  const char *resume;
  int quiet;                  /* no per-epoch lines */
  /* Called once the run's checks have passed, just before its processes start (local prints
   * what it runs then, so that a bad flag or path is the only line), with the number of
   * workers it starts (--gpus decides it where given); may be NULL. */
  void (*starting)(const struct pl_run_options *o, int workers);
  const char *label;          /* shown in progress lines, e.g. the mode */
} pl_run_options;

typedef struct {
  int ok;                     /* every process exited 0 */
  int interrupted;            /* Ctrl-C */
  double wall_seconds;        /* launcher's view, start to last exit */
  double test_accuracy;
  double samples_per_sec;
  char summary_json[2048];    /* the ps's summary line */
  /* An elastic job's workers (issue 28), from the ps's "workers" records: the most that
   * trained at once, and how many left when asked (departed) or were lost. */
  int most_workers, departed, lost;
} pl_run_result;

void pl_run_defaults(pl_run_options *o);
/* Runs the job to the end. Returns 0 when it succeeded; otherwise non-zero with the reason
 * printed (one line, plus the tail of the failing process's log). */
int pl_run_local(const pl_run_options *o, pl_run_result *res);
/* Where a pstrain binary is: env PSTRAIN_<NAME>_BIN (PSTRAIN_PS_BIN, PSTRAIN_WORKER_BIN,
 * PSTRAIN_BENCHCLIENT_BIN), else beside this binary
 * (installed) or in the Bazel output layout (bazel-bin/launcher/../ps/pstrain-ps). */
int pl_find_binary(const char *name, const char *subdir, char *out, size_t outlen);
/* A command line being built: argv[0..n) and its NULL, the strings held in store. */
#define PL_MAX_ARGS 64
typedef struct {
  char *argv[PL_MAX_ARGS + 1];
  int n;
  char store[PL_MAX_ARGS][PATH_MAX];
} pl_argv;
/* Appends one argument, printf-style; past PL_MAX_ARGS arguments it is dropped. */
void pl_argv_add(pl_argv *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Where another program is (gnuplot, ip, tc): the first executable NAME in PATH's folders,
 * then in extra's (a colon-separated list, or NULL). 0, or -ENOENT. */
int pl_find_program(const char *name, const char *extra, char *out, size_t outlen);
/* A number field ("key":number) of a one-line JSON object, or -1 when it is absent. */
double pl_json_num(const char *line, const char *key);
/* A comma-separated list of integers in [lo, hi], at most max of them, into out. Returns how
 * many (0 for an empty string), -EINVAL on a bad entry, -E2BIG when there are more. */
int pl_parse_int_list(const char *s, int *out, int max, int lo, int hi);
/* launcher/run/schedule.c: `--schedule "epoch 1: +2, epoch 2.5: -2"` into out (at most max
 * points, in non-decreasing order of epoch). Returns how many, or -EINVAL with a one-line
 * reason in err. */
int pl_parse_schedule(const char *s, pl_sched_point *out, int max, char *err, size_t errlen);
/* `--workers` as N or MIN:MAX: *min and *max (equal for N). Returns 0, or -EINVAL when it is
 * neither (1 <= MIN <= MAX <= PL_MAX_WORKERS). */
int pl_parse_workers_range(const char *s, int *min, int *max);
/* The schedule checked against the job: starting from o->workers, each point's count must
 * stay in 1..MAX (MAX: o->workers_max, or, for a fixed --workers N, the schedule's peak,
 * which it then sets), no point may lie at or after o->epochs, and every process the job may
 * start must fit PL_MAX_WORKERS. Returns 0, or -EINVAL with a one-line reason in err; a
 * count below MIN is allowed (the ps goes on with fewer) and said in warn ("" when none). */
int pl_check_schedule(pl_run_options *o, char *err, size_t errlen, char *warn, size_t warnlen);
/* This run is elastic: --workers MIN:MAX or a schedule (launcher/run/run_elastic.c). */
int pl_elastic(const pl_run_options *o);
/* The workers the job starts: one per id of --gpus times --workers-per-gpu where --gpus is
 * given, else --workers. -EINVAL for a --gpus that is not a list of ids. */
int pl_job_workers(const pl_run_options *o);
/* The processes a job with this schedule may start in all: MIN plus every +N. */
int pl_schedule_processes(const pl_run_options *o);

/* A free TCP port on 127.0.0.1. */
int pl_free_port(void);

/* launcher/run/run_files.c: files a local job makes or checks before anything starts. Each
 * returns 0 (pl_lock_dir: a descriptor) or a negative code with a one-line reason in err. */
#define PL_SECRET_NAME "secret"             /* the job's cluster secret, in its run directory */
#define PL_LOCK_NAME ".pstrain-local.lock"  /* in a checkpoint directory a job uses */
/* The outputs are checked with ps/atomic_file.h's pst_check_output_file and _dir. */
/* Locks dir for one job: the descriptor returned is inherited by every process the job
 * starts, so the lock lasts until the last of them has gone; -EBUSY when another job's
 * processes hold it. */
int pl_lock_dir(const char *dir, char *err, size_t errlen);
/* 32 random bytes, hex, in dir/PL_SECRET_NAME with mode 600, written beside and renamed in;
 * path gets its name. */
int pl_make_secret(const char *dir, char *path, size_t pathlen, char *err, size_t errlen);
/* Before k ps shards resume from their parts of checkpoint directory dir: when their newest
 * checkpoints are not of one version (a job stopped between one shard's step and another's,
 * or killed while they saved), each sets aside the ones newer than the newest version they
 * all have (ps/checkpoint.h, pst_ckpt_abandon_after), so that every shard resumes from that
 * one. Returns 1 with what was done in note, 0 when nothing needed doing, or a negative code
 * with the reason in note. */
int pl_align_shard_checkpoints(const char *dir, int k, char *note, size_t notelen);

#endif
