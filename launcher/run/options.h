/* A local job's options and its result (launcher/run/run.h runs it; launcher/run/local.c fills
 * them from the flags). */
#ifndef PSTRAIN_LAUNCHER_RUN_OPTIONS_H
#define PSTRAIN_LAUNCHER_RUN_OPTIONS_H

#include <limits.h>
#include <stddef.h>

#include "launcher/common/helpers.h"
#include "data/dataset.h"

#define PL_MAX_SCHEDULE 64 /* points of a --schedule */

/* One point of `--schedule` (launcher/run/schedule.c): once `epoch` epochs' worth of samples are
 * trained, `delta` workers are started (> 0) or asked to leave (< 0). */
/* The chunk on the wire for a job of GPU or null workers when --chunk-kib is not given
 * (launcher/run/local.c says why). */
#define PL_GPU_CHUNK_KIB 256

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
  const char *mode;           /* sync, async, ssp, or allreduce (no ps) */
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
  int stages, micro_batches, virtual_devices, device_mem; /* workers' --stages, ... (issue 40) */
  const char *place;          /* workers' --place, or NULL */
  int push_by_layer;          /* workers' --push-by-layer (-1: not given, their default) */
  int pull_by_layer;          /* workers' --pull-by-layer (-1: not given, their default) */
  int layer_pieces;           /* workers' --layer-pieces (-1: not given, their default) */
  int keep_awake;             /* workers' --keep-awake (-1: not given, their default) */
  int shm;                    /* the ps's and workers' --shm (-1: not given, their default: on;
                               * off behind --link, whose bytes must cross the link) */
  int chunk_kib;              /* the ps's --chunk-kib (PL_GPU_CHUNK_KIB for GPU and null
                               * workers when not given) */
  int tls;                    /* mutual TLS, with a throwaway CA made in run_dir */
  int ps_shards;              /* ps processes the weights are split over (0 or 1: one) */
  /* --ps-placement behind --link (launcher/links/place.h): one-host, colocated or separate
   * (NULL: one-host). */
  const char *ps_placement;
  size_t model_params;        /* the model's parameters (floats), for the bytes model */
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
  /* --timeline (issue 41): the merged file (NULL: none); each process writes its own into
   * run_dir (launcher/run/run_timeline.h), keeping timeline_steps after timeline_skip. */
  const char *timeline;
  int timeline_steps, timeline_skip;
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
  /* --mode allreduce (launcher/run/run_allreduce.h): Open MPI's algorithm (NULL: auto) and the
   * fused buckets' size (0: one sum per step). */
  const char *ar_algorithm;
  const char *collective;     /* auto, mpi or nccl (collective/collective.h) */
  int bucket_kib;
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
  char summary_json[16384];   /* the ps's summary line (2.2 KiB for 2 workers in 2026-11;
                               * per-slot figures make it grow with the workers) */
  /* An elastic job's workers (issue 28), from the ps's "workers" records: the most that
   * trained at once, and how many left when asked (departed) or were lost. */
  int most_workers, departed, lost;
  /* Behind --link (issue 39, launcher/run/run_place.h): the placement that ran, and the
   * busiest link's bytes per step in its busier direction, measured and the bytes model's
   * (-1: none), and the model's communication time per step, without compute (-1: none). */
  char placement[16];
  double link_bytes_per_step, model_bytes_per_step, model_step_seconds;
} pl_run_result;

void pl_run_defaults(pl_run_options *o);
/* Floats of a ps shard's part per thread of its --threads by default: a pass over fewer gains
 * nothing from a helper (docs/benchmarks.md, issue 41: one thread was the fastest on the 2-core
 * VM from 0.24M to 4M floats; bench_optim on 8 threads took longer than on one for mlp's
 * 0.24M). */
#define PL_PS_FLOATS_PER_THREAD 1000000u
/* Each ps shard's --threads when --ps-threads is not given (it also gives the ps its I/O
 * threads: --threads less one): the cores that the workers' threads leave free, shared among
 * the shards, and no more than one per PL_PS_FLOATS_PER_THREAD floats of a shard's part;
 * at least 1. */
int pl_default_ps_threads(int cores, int worker_threads, int n_ps, size_t shard_floats);
/* The ps's --chunk-kib when not given: PL_GPU_CHUNK_KIB for workers on GPUs (--gpus given, or
 * a cuda device) or null devices, whose large dense layers run in pieces of one chunk
 * (worker --layer-pieces), else 4096 (CPU workers push whole gradients; `auto` is 4096 here:
 * the caller asks pl_auto_finds_gpu what it will be). */
int pl_default_chunk_kib(const char *device, int gpus_given);
/* What `--device auto` will find on this host, asked of the workers' own probe
 * (`worker_bin --list-devices`, kernels/device.c, which prints a line "cuda:N: ..." for each
 * CUDA device): 1 when it lists one, 0 when it lists none, cannot run, or has not answered
 * within timeout_s (it is then killed). */
int pl_auto_finds_gpu(const char *worker_bin, double timeout_s);
/* The workers the job starts: one per id of --gpus times --workers-per-gpu where --gpus is
 * given, else --workers. -EINVAL for a --gpus that is not a list of ids. */
int pl_job_workers(const pl_run_options *o);
#endif
