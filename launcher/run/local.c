/* `pstrain local`: one ps and N workers on this machine. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/codec.h"
#include "common/config.h"
#include "model/model_config.h"
#include "kernels/partition.h"
#include "kernels/pipeline/flags.h"
#include "launcher/commands.h"
#include "launcher/links/place.h"
#include "launcher/run/local.h"
#include "launcher/run/run.h"
#include "launcher/run/run_allreduce.h"
#include "launcher/run/run_files.h"
#include "launcher/run/schedule.h"
#include "data/dataset.h"

static int parse_run_flags(const char *cmd, const char *prog, int argc, char **argv,
                           pl_run_options *o, pst_model *model, const char *extra_usage);

static char f_mode[PST_CFG_STR_MAX], f_model[PST_CFG_STR_MAX], f_opt[PST_CFG_STR_MAX];
static char f_lr_schedule[PST_CFG_STR_MAX], f_lr_scaling[PST_CFG_STR_MAX];
static char f_ar_alg[PST_CFG_STR_MAX], f_collective[PST_CFG_STR_MAX];
static int64_t f_bucket_kib;
static char f_data[PST_CFG_STR_MAX], f_summary[PST_CFG_STR_MAX], f_metrics[PST_CFG_STR_MAX];
static char f_tensorboard[PST_CFG_STR_MAX], f_dashboard[PST_CFG_STR_MAX];
static char f_run_dir[PST_CFG_STR_MAX], f_device[PST_CFG_STR_MAX], f_gpus[PST_CFG_STR_MAX];
static char f_slow[PST_CFG_STR_MAX], f_delay[PST_CFG_STR_MAX];
static char f_eval_on[PST_CFG_STR_MAX], f_grad_limit[PST_CFG_STR_MAX], f_clip_norm[PST_CFG_STR_MAX];
static char f_grad_norm_factor[PST_CFG_STR_MAX];
static char f_topk_warmup[PST_CFG_STR_MAX];
static char f_push_compress[PST_CFG_STR_MAX], f_pull_compress[PST_CFG_STR_MAX];
static char f_link[PST_CFG_STR_MAX], f_link_worker[PST_CFG_STR_MAX], f_placement_ps[PST_CFG_STR_MAX];
static char f_schedule[PST_CFG_STR_MAX], f_timeline[PST_CFG_STR_MAX];
static int64_t f_tl_steps, f_tl_skip;
static int64_t f_workers, f_epochs, f_batch, f_seed, f_port, f_threads, f_wpg, f_gpu_mem;
static int64_t f_shards, f_ps_threads, f_eval_every, f_eval_samples, f_report_every;
static int64_t f_staleness, f_backup, f_chunk;
static int64_t f_stages, f_micro, f_vdev, f_device_mem;
static char f_place[PST_CFG_STR_MAX];
static double f_lr;
static pst_data_flags f_dataf; /* the workers' data flags, passed on to each */
static int f_placement, f_tls, f_push_by_layer, f_pull_by_layer, f_layer_pieces, f_keep_awake, f_insecure, f_staleness_lr, f_shm;
static char f_ckpt_dir[PST_CFG_STR_MAX], f_ckpt_every[PST_CFG_STR_MAX];
static char f_ckpt_seconds[PST_CFG_STR_MAX], f_ckpt_keep[PST_CFG_STR_MAX], f_resume[PST_CFG_STR_MAX];

static pst_cfg_opt g_opts[] = {
    PST_OPT("workers", PST_CFG_INT, &f_workers, "2", "worker processes; or MIN:MAX on the command line: an elastic job, whose ps starts training once MIN workers have joined, admits newcomers up to MAX and hands out the data (MIN are started; --schedule starts and stops others)", 1, PL_MAX_WORKERS),
    PST_OPT("schedule", PST_CFG_STRING, f_schedule, "", "\"epoch X: +N, epoch Y: -M, ...\": once X epochs' worth of samples are trained (2.5: half-way through epoch 3), start N more workers, or ask the newest M to leave (SIGTERM: they finish their step and exit 0). Makes the ps hand out the data; with a plain --workers N, N is the minimum and the most the schedule runs at once the maximum", 0, 0),
    PST_OPT("mode", PST_CFG_STRING, f_mode, "sync", "sync, async or ssp (a ps), or allreduce (no ps: the workers are ranks of an Open MPI job that sum their gradients, each applying the ps's sync update)", 0, 0),
    PST_OPT("collective", PST_CFG_STRING, f_collective, "auto", "--mode allreduce: what sums the gradients: mpi (Open MPI), nccl (NCCL, GPU ranks: --gpus) or auto (nccl on GPU ranks where it loads, else mpi)", 0, 0),
    PST_OPT("ar-algorithm", PST_CFG_STRING, f_ar_alg, "auto", "--mode allreduce: Open MPI's allreduce algorithm: auto (its own rules), ring, recursive-doubling or rabenseifner", 0, 0),
    PST_OPT("bucket-kib", PST_CFG_INT, &f_bucket_kib, "0", "--mode allreduce: sum the gradient in buckets of about this many KiB, each started as the backward pass makes it (0: one sum per step)", 0, 1048576),
    PST_OPT("staleness", PST_CFG_INT, &f_staleness, "2", "ssp bound", 0, 1000000),
    PST_OPT("backup-workers", PST_CFG_INT, &f_backup, "0", "sync: steps need N-K gradients", 0, PL_MAX_WORKERS),
    PST_OPT("staleness-lr", PST_CFG_BOOL, &f_staleness_lr, "false", "async and ssp: each gradient's learning rate divided by 1 + its staleness (compare: the modes' +sa)", 0, 0),
    PST_OPT("model", PST_CFG_STRING, f_model, "mlp", "preset (mlp, cnn, cnn2, mobilenetv2, resnet20) or spec file", 0, 0),
    PST_OPT("epochs", PST_CFG_INT, &f_epochs, "2", "passes over the training set", 1, 10000),
    PST_OPT("batch-size", PST_CFG_INT, &f_batch, "64", "samples per worker per step", 1, 65536),
    PST_OPT("lr", PST_CFG_DOUBLE, &f_lr, "0.001", "learning rate (a model spec may set its own)", 0, 0),
    PST_OPT("optimizer", PST_CFG_STRING, f_opt, "adam", "sgd, momentum or adam (a model spec may set its own)", 0, 0),
    PST_OPT("lr-scaling", PST_CFG_STRING, f_lr_scaling, "", "the ps's --lr-scaling: none, or linear (an elastic job, --workers MIN:MAX: each sync step's rate is --lr x its samples / (batch x MIN)) (default: the ps's, none)", 0, 0),
    PST_OPT("lr-schedule", PST_CFG_STRING, f_lr_schedule, "", "the ps's --lr-schedule: constant, or cosine (the rate falls from --lr to nearly 0 over the job) (default: the ps's, constant)", 0, 0),
    PST_OPT("seed", PST_CFG_INT, &f_seed, "42", "seed for weights and shuffles", 0, INT64_MAX),
    PST_OPT("data-dir", PST_CFG_STRING, f_data, "/usr/share/datasets/fashion-mnist", "IDX files, CIFAR-10/100 binary files or an image folder", 0, 0),
    PST_DATA_OPTS(f_dataf),
    PST_OPT("port", PST_CFG_INT, &f_port, "0", "ps port on 127.0.0.1 (0: a free one; shards take the ports after it)", 0, 65535),
    PST_OPT("ps-shards", PST_CFG_INT, &f_shards, "1", "ps processes the weights are split over", 1, PST_MAX_SHARDS),
    PST_OPT("ps-placement", PST_CFG_STRING, f_placement_ps, "one-host", "where the ps shards sit behind --link: one-host (every shard in the ps's namespace, behind no link of its own), colocated (shard i in worker i's namespace, sharing its link; --ps-shards must equal --workers) or separate (each shard in a namespace of its own behind a link of --link's rate: extra machines)", 0, 0),
    PST_OPT("threads", PST_CFG_INT, &f_threads, "1", "CPU threads per worker", 1, 256),
    PST_OPT("ps-threads", PST_CFG_INT, &f_ps_threads, "0", "each ps's --threads (0: the cores the workers leave free, shared among the shards)", 0, 1024),
    PST_OPT("device", PST_CFG_STRING, f_device, "", "worker device: auto, cpu, cuda, cuda:N, null or null:RATE (no compute: the ceiling any device can reach)", 0, 0),
    PST_OPT("gpus", PST_CFG_STRING, f_gpus, "", "GPU ids, one worker each (e.g. 0,2,3)", 0, 0),
    PST_OPT("workers-per-gpu", PST_CFG_INT, &f_wpg, "1", "workers sharing each GPU", 1, 64),
    PST_OPT("gpu-memory-limit", PST_CFG_INT, &f_gpu_mem, "0", "MiB per worker (0: no cap)", 0, 1 << 24),
    PST_OPT("log-placement", PST_CFG_BOOL, &f_placement, "false", "workers log layer placement", 0, 0),
    PST_OPT("stages", PST_CFG_INT, &f_stages, "1", "each worker's --stages: the model's layers on N devices, pipelined", 1, 16),
    PST_OPT("place", PST_CFG_STRING, f_place, "", "each worker's --place LAYERS=DEVICE,... (the stages by hand)", 0, 0),
    PST_OPT("micro-batches", PST_CFG_INT, &f_micro, "1", "each worker's --micro-batches", 1, 65536),
    PST_OPT("virtual-devices", PST_CFG_INT, &f_vdev, "0", "each worker's --virtual-devices (CPU devices on disjoint cores, or with a CUDA --device its GPU split into cuda:N.K)", 0, 256),
    PST_OPT("device-mem", PST_CFG_INT, &f_device_mem, "0", "each worker's --device-mem: a device's memory cap in MiB (0: none)", 0, 1 << 24),
    PST_OPT("push-by-layer", PST_CFG_BOOL, &f_push_by_layer, "", "workers send each layer's gradient as their backward pass makes it (default: the workers', on for GPU and null devices)", 0, 0),
    PST_OPT("pull-by-layer", PST_CFG_BOOL, &f_pull_by_layer, "", "workers start each step while its weights arrive, layer by layer (default: the workers', on for GPU and null devices)", 0, 0),
    PST_OPT("keep-awake", PST_CFG_BOOL, &f_keep_awake, "", "workers keep the CPUs out of their sleep states while training, so that no step waits for a CPU to wake (default: the workers', on for GPU and null devices; worker --keep-awake)", 0, 0),
    PST_OPT("shm", PST_CFG_BOOL, &f_shm, "", "the ps and its workers, all on this host, send payloads through shared memory instead of loopback TCP (default: the daemons', on; off behind --link)", 0, 0),
    PST_OPT("layer-pieces", PST_CFG_BOOL, &f_layer_pieces, "", "workers run each dense layer larger than a chunk in pieces of rows, one per chunk, so that its transfers overlap its compute (default: the workers', on for GPU and null devices)", 0, 0),
    PST_OPT("chunk-kib", PST_CFG_INT, &f_chunk, "4096", "tensor chunk on the wire (KiB; default 4096, and 256 for GPU and null workers, --device auto included where the workers find a GPU: docs/benchmarks.md)", 4, 262144),
    PST_OPT("tls", PST_CFG_BOOL, &f_tls, "false", "mutual TLS between the ps and the workers, with a throwaway CA made in the run directory", 0, 0),
    PST_OPT("insecure", PST_CFG_BOOL, &f_insecure, "false", "no cluster secret: any user of this machine may join the job and change its weights (by default each run makes a throwaway one in its run directory)", 0, 0),
    PST_OPT("slow-worker", PST_CFG_STRING, f_slow, "", "I:FACTOR[,I:FACTOR]: slow workers down", 0, 0),
    PST_OPT("delay-worker", PST_CFG_STRING, f_delay, "", "I:MS[,I:MS]: delay each pull and push of worker I by MS milliseconds (a slow link)", 0, 0),
    PST_OPT("eval-every", PST_CFG_INT, &f_eval_every, "0", "steps between evaluations on a test subset (0: off; the full test set after each epoch either way)", 0, 1000000),
    PST_OPT("eval-samples", PST_CFG_INT, &f_eval_samples, "2000", "test samples in that subset (fixed by --seed, split across workers)", 1, 10000000),
    PST_OPT("report-every", PST_CFG_INT, &f_report_every, "0", "steps between the workers' loss reports, the training points of the metrics (0: the ps's default)", 0, 1000000),
    PST_OPT("eval-on", PST_CFG_STRING, f_eval_on, "", "who evaluates each epoch: workers, or ps (the ps itself, from the same data: figures no worker can forge; default: the ps's)", 0, 0),
    PST_OPT("grad-limit", PST_CFG_STRING, f_grad_limit, "", "the ps's --grad-limit: largest magnitude a gradient value may have (default: the ps's)", 0, 0),
    PST_OPT("clip-norm", PST_CFG_STRING, f_clip_norm, "", "the ps's --clip-norm: workers clip each gradient to this norm (default: none)", 0, 0),
    PST_OPT("grad-norm-factor", PST_CFG_STRING, f_grad_norm_factor, "", "the ps's --grad-norm-factor: a push over this many times the running median norm is rejected (0: off; default: the ps's)", 0, 0),
    PST_OPT("push-compress", PST_CFG_STRING, f_push_compress, "none", "the ps's --push-compress: gradients on the wire as none (float32), fp16, bf16, int8 or topk:FRACTION (each weight tensor's largest values, biases whole), with error feedback on the workers", 0, 0),
    PST_OPT("topk-warmup", PST_CFG_STRING, f_topk_warmup, "", "the ps's --topk-warmup for the runs whose pushes are topk:FRACTION: epochs over which the share sent falls from 0.25 to FRACTION (default: the ps's)", 0, 0),
    PST_OPT("pull-compress", PST_CFG_STRING, f_pull_compress, "none", "the ps's --pull-compress: weights on the wire as none (float32), fp16 or bf16 (rounded from the ps's float32 weights), or delta (int8 changes from what each worker holds)", 0, 0),
    PST_OPT("link", PST_CFG_STRING, f_link, "", "RATE[,DELAY[,LOSS]]: each worker in a network namespace of its own, behind a link of that rate (e.g. 1gbit), delay (1ms) and loss (0.1%) both ways, shaped with tc (the delay and loss by netem, or by the launcher's delay line where the kernel has no netem; needs root, iproute2, and iptables for the delay line; default: loopback)", 0, 0),
    PST_OPT("link-worker", PST_CFG_STRING, f_link_worker, "", "I:RATE[,DELAY[,LOSS]][;I:...]: worker I's link instead of --link's", 0, 0),
    PST_OPT("run-dir", PST_CFG_STRING, f_run_dir, "", "logs and metrics here (default: a new /tmp dir)", 0, 0),
    PST_OPT("metrics", PST_CFG_STRING, f_metrics, "", "metrics file (JSON lines)", 0, 0),
    PST_OPT("summary-json", PST_CFG_STRING, f_summary, "", "write the summary object here", 0, 0),
    PST_OPT("tensorboard", PST_CFG_STRING, f_tensorboard, "", "TensorBoard event files here (compare: one sub-directory per mode)", 0, 0),
    PST_OPT("dashboard", PST_CFG_STRING, f_dashboard, "", "serve the ps's live dashboard and /metrics on PORT or ADDR:PORT", 0, 0),
};

/* `pstrain local` alone: one job that may be stopped and started again. (compare and
 * bench-train run several jobs, which must not resume from each other's checkpoints.) The
 * values go to the ps as given, and it checks them (launcher/run/run_internal.h): its defaults
 * hold where none is given. */
static pst_cfg_opt g_local_opts[] = {
    PST_OPT("checkpoint-dir", PST_CFG_STRING, f_ckpt_dir, "", "the ps's checkpoints here (each shard in a directory of its own inside it); the same command resumes the job", 0, 0),
    PST_OPT("checkpoint-every", PST_CFG_STRING, f_ckpt_every, "", "steps between checkpoints (default: the ps's)", 0, 0),
    PST_OPT("checkpoint-seconds", PST_CFG_STRING, f_ckpt_seconds, "", "seconds between checkpoints (default: the ps's)", 0, 0),
    PST_OPT("checkpoint-keep", PST_CFG_STRING, f_ckpt_keep, "", "checkpoints kept (default: the ps's)", 0, 0),
    PST_OPT("resume", PST_CFG_STRING, f_resume, "", "auto (the newest valid checkpoint), never, or a checkpoint file (default: the ps's, auto)", 0, 0),
    PST_OPT("timeline", PST_CFG_STRING, f_timeline, "", "write the job's timeline to FILE: every process's (timeline-*.json in the run directory) merged onto the ps's clock, Chrome trace-event JSON for Perfetto or chrome://tracing (empty: off)", 0, 0),
    PST_OPT("timeline-steps", PST_CFG_INT, &f_tl_steps, "50", "steps the timeline keeps", 1, 1000000),
    PST_OPT("timeline-skip", PST_CFG_INT, &f_tl_skip, "5", "steps the timeline skips first (the warm-up)", 0, 1000000000),
};

int pl_split_flags(const char *cmd, int argc, char **argv, const char *const *names,
                   const char **const *values, int n, char **rest, int *nrest) {
  for (int i = 1; i < argc; i++) {
    int k = 0;
    while (k < n && strcmp(argv[i], names[k]) != 0) k++;
    if (k == n) {
      rest[(*nrest)++] = argv[i];
      continue;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "pstrain %s: %s needs a value\n", cmd, names[k]);
      return 2;
    }
    *values[k] = argv[++i];
  }
  return 0;
}

/* "3:2.5,1:2" into per-worker values (out[i]), each in [lo, hi]. */
static int parse_per_worker(const char *s, double *out, int workers, double lo, double hi) {
  while (*s) {
    char *end;
    const char *colon = strchr(s, ':');
    int64_t i;
    if (!colon || pst_parse_int_n(s, (size_t)(colon - s), 0, workers - 1, &i) < 0) return -EINVAL;
    const char *v = colon + 1;
    double f = strtod(v, &end);
    if (end == v || !(f >= lo && f <= hi) || (*end && *end != ',')) return -EINVAL;
    out[i] = f;
    s = *end ? end + 1 : end;
  }
  return 0;
}

/* --workers MIN:MAX on the command line: argv is copied into out with the value cut back
 * to MIN, so that the one integer option (its bounds, its errors, the config file's and the
 * environment's plain N) stays as it was, and MAX is kept in *max (0 when not given).
 * Returns the new argc, or -EINVAL with the reason printed. */
static int split_workers_range(const char *prog, int argc, char **argv, char **out,
                               char (*store)[16], int *max) {
  *max = 0;
  for (int i = 0; i < argc; i++) {
    out[i] = argv[i];
    const char *v = NULL;
    if (i > 0 && !strncmp(argv[i], "--workers=", 10)) v = argv[i] + 10;
    else if (i > 0 && !strcmp(argv[i], "--workers") && i + 1 < argc && strchr(argv[i + 1], ':'))
      v = argv[i + 1];
    if (!v || !strchr(v, ':')) continue;
    int lo, hi;
    if (pl_parse_workers_range(v, &lo, &hi) < 0) {
      fprintf(stderr, "%s: --workers: '%.40s' is not N or MIN:MAX with 1 <= MIN <= MAX <= %d\n",
              prog, v, PL_MAX_WORKERS);
      return -EINVAL;
    }
    *max = hi;
    if (argv[i][9] == '=') {
      snprintf(store[i], sizeof store[i], "--workers=%d", lo);
      out[i] = store[i];
    } else {
      i++;
      snprintf(store[i], sizeof store[i], "%d", lo);
      out[i] = store[i];
    }
  }
  out[argc] = NULL;
  return argc;
}

int pl_parse_run_flags(const char *cmd, int argc, char **argv, pl_run_options *o,
                       pst_model *model, const char *extra_usage) {
  char prog[64], err[600];
  snprintf(prog, sizeof prog, "pstrain %s", cmd);
  int workers_max;
  char **args = calloc((size_t)argc + 1, sizeof *args);
  char (*store)[16] = calloc((size_t)argc + 1, sizeof *store);
  if (!args || !store) {
    free(args);
    free(store);
    fprintf(stderr, "%s: out of memory\n", prog);
    return 1;
  }
  int rc = split_workers_range(prog, argc, argv, args, store, &workers_max);
  if (rc >= 0) rc = parse_run_flags(cmd, prog, argc, args, o, model, extra_usage);
  else rc = 2;
  free(args);
  free(store);
  if (rc != 0) return rc;
  o->workers_max = workers_max > o->workers ? workers_max : 0;
  /* A ps that hands out the data evaluates itself (it refuses workers' evaluation then), and
   * needs the data as the workers are given it. */
  if (o->workers_max > 0 || f_schedule[0]) {
    if (o->eval_on && strcmp(o->eval_on, "ps")) {
      fprintf(stderr, "%s: --eval-on %s: an elastic job (--workers MIN:MAX or --schedule) is "
                      "evaluated by its ps (--eval-on ps)\n", prog, o->eval_on);
      return 2;
    }
    o->eval_on = "ps";
  }
  if (f_schedule[0]) {
    o->schedule = f_schedule;
    o->n_sched = pl_parse_schedule(f_schedule, o->sched, PL_MAX_SCHEDULE, err, sizeof err);
    char warn[300];
    if (o->n_sched < 0 || pl_check_schedule(o, err, sizeof err, warn, sizeof warn) < 0) {
      fprintf(stderr, "%s: %s\n", prog, err);
      return 2;
    }
    if (warn[0]) fprintf(stderr, "%s: %s\n", prog, warn);
  }
  /* --mode allreduce's refusals (run_allreduce.c owns them) here too, before the run
   * directory is made; pl_run_local checks again for callers that fill the options
   * themselves. */
  if (pl_ar_mode(o) && pl_ar_check(o) != 0) return 2;
  return 0;
}

static int parse_run_flags(const char *cmd, const char *prog, int argc, char **argv,
                           pl_run_options *o, pst_model *model, const char *extra_usage) {
  char err[600];
  enum { N_SHARED = sizeof g_opts / sizeof g_opts[0], N_LOCAL = sizeof g_local_opts / sizeof g_local_opts[0] };
  static pst_cfg_opt opts[N_SHARED + N_LOCAL];
  int local = strcmp(cmd, "local") == 0;
  memcpy(opts, g_opts, sizeof g_opts);
  if (local) memcpy(opts + N_SHARED, g_local_opts, sizeof g_local_opts);
  pst_cfg cfg = {.prog = prog, .section = cmd, .env_prefix = "PSTRAIN_LOCAL_",
                 .usage_extra = extra_usage, .opts = opts,
                 .n_opts = local ? N_SHARED + N_LOCAL : N_SHARED};
  if (pst_cfg_load(&cfg, argc, argv, err, sizeof err) < 0) {
    fprintf(stderr, "%s: %s\n", prog, err);
    return 2;
  }
  if (cfg.help) return 1;
  /* A bad model spec is reported here, in one line, before any process starts. Its optimizer
   * line fills in --optimizer and --lr as the ps would, so that what is printed and passed
   * on is what the run uses. */
  if (pst_model_configure(&cfg, f_model, model, err, sizeof err) < 0) {
    fprintf(stderr, "%s: %s\n", prog, err);
    return 2;
  }
  pst_image_opts image; /* checked here, in one line, before any process starts */
  if (pst_data_flags_parse(&f_dataf, &image, err, sizeof err) < 0) {
    fprintf(stderr, "%s: %s\n", prog, err);
    return 2;
  }
  if (cfg.print_config) {
    pst_cfg_print(&cfg, stdout);
    return 1;
  }
  pl_run_defaults(o);
  o->workers = (int)f_workers;
  o->mode = f_mode;
  o->staleness = (int)f_staleness;
  o->backup_workers = (int)f_backup;
  o->staleness_lr = f_staleness_lr;
  o->model = f_model;
  o->epochs = (int)f_epochs;
  o->batch_size = (int)f_batch;
  o->lr = f_lr;
  o->optimizer = f_opt;
  o->lr_schedule = f_lr_schedule[0] ? f_lr_schedule : NULL;
  o->lr_scaling = f_lr_scaling[0] ? f_lr_scaling : NULL;
  o->seed = f_seed;
  o->data_dir = f_data;
  o->data_flags = &f_dataf;
  o->port = (int)f_port;
  o->threads = (int)f_threads;
  o->device = f_device[0] ? f_device : NULL;
  o->gpus = f_gpus[0] ? f_gpus : NULL;
  o->workers_per_gpu = (int)f_wpg;
  o->gpu_memory_limit = (int)f_gpu_mem;
  o->log_placement = f_placement;
  o->stages = (int)f_stages;
  o->place = f_place[0] ? f_place : NULL;
  o->micro_batches = (int)f_micro;
  o->virtual_devices = (int)f_vdev;
  o->device_mem = (int)f_device_mem;
  {
    /* The workers' stages flags, checked here against the model and the batch as each
     * worker would check them, so that a bad one is one line and exit 2 before any process
     * starts (the stages' memory need is the workers' to find). With --gpus each worker's
     * device is a CUDA device. */
    pst_pipe_options po = {.device = f_gpus[0] ? "cuda" : o->device, .stages = o->stages,
                           .place = o->place, .micro_batches = o->micro_batches,
                           .virtual_devices = o->virtual_devices,
                           .gpu_memory_limit_mib = (size_t)o->gpu_memory_limit,
                           .device_mem_mib = (size_t)o->device_mem};
    if (pst_pipe_check_flags(&po, model, o->batch_size, err, sizeof err) < 0) {
      fprintf(stderr, "%s: %s\n", prog, err);
      return 2;
    }
  }
  /* Given: passed on as given; not given: the workers' own default (their device decides). */
  o->push_by_layer = pst_cfg_find(&cfg, "push-by-layer")->source == PST_SRC_DEFAULT ? -1 : f_push_by_layer;
  o->pull_by_layer = pst_cfg_find(&cfg, "pull-by-layer")->source == PST_SRC_DEFAULT ? -1 : f_pull_by_layer;
  o->layer_pieces = pst_cfg_find(&cfg, "layer-pieces")->source == PST_SRC_DEFAULT ? -1 : f_layer_pieces;
  o->keep_awake = pst_cfg_find(&cfg, "keep-awake")->source == PST_SRC_DEFAULT ? -1 : f_keep_awake;
  o->shm = pst_cfg_find(&cfg, "shm")->source == PST_SRC_DEFAULT ? -1 : f_shm;
  /* Chunks not given: GPU and null workers push and pull layer by layer and run their large
   * dense layers in pieces of one chunk (--layer-pieces), which overlap their transfers only
   * when a layer spans several chunks; 256 KiB made the emulated H100 worker 62% of its rate
   * on mlp at batch 256 where 4 MiB made it 50% (docs/benchmarks.md, "Layers in pieces").
   * CPU workers push whole gradients, for which fewer frames are cheaper. `--device auto`
   * (the workers' default) is what the workers' own probe finds on this host: a GPU worker
   * left at 4 MiB would push mlp's first layer as one chunk, none of it in pieces nor its
   * next pull ahead (docs/benchmarks.md, issue 41). */
  if (pst_cfg_find(&cfg, "chunk-kib")->source == PST_SRC_DEFAULT) {
    const char *dev = o->device;
    char worker[PATH_MAX];
    if ((!dev || !strcmp(dev, "auto")) && !f_gpus[0] &&
        pl_find_binary("pstrain-worker", "worker", worker, sizeof worker) == 0 &&
        pl_auto_finds_gpu(worker, 30))
      dev = "cuda";
    o->chunk_kib = pl_default_chunk_kib(dev, f_gpus[0] != 0);
  } else {
    o->chunk_kib = (int)f_chunk;
  }
  o->tls = f_tls;
  o->ps_shards = (int)f_shards;
  {
    pl_placement pp;
    if (pl_placement_parse(f_placement_ps, &pp) < 0) {
      fprintf(stderr, "%s: --ps-placement: '%.60s' is not one-host, colocated or separate\n",
              prog, f_placement_ps);
      return 2;
    }
    o->ps_placement = f_placement_ps;
  }
  o->model_params = model->n_params;
  o->ps_threads = (int)f_ps_threads;
  o->run_dir = f_run_dir[0] ? f_run_dir : NULL;
  o->metrics_path = f_metrics[0] ? f_metrics : NULL;
  o->summary_path = f_summary[0] ? f_summary : NULL;
  o->tensorboard_dir = f_tensorboard[0] ? f_tensorboard : NULL;
  o->timeline = f_timeline[0] ? f_timeline : NULL;
  o->timeline_steps = (int)f_tl_steps;
  o->timeline_skip = (int)f_tl_skip;
  o->metrics_listen = f_dashboard[0] ? f_dashboard : NULL;
  o->insecure = f_insecure;
  o->eval_on = f_eval_on[0] ? f_eval_on : NULL;
  o->grad_limit = f_grad_limit[0] ? f_grad_limit : NULL;
  o->clip_norm = f_clip_norm[0] ? f_clip_norm : NULL;
  o->grad_norm_factor = f_grad_norm_factor[0] ? f_grad_norm_factor : NULL;
  o->topk_warmup = f_topk_warmup[0] ? f_topk_warmup : NULL;
  {
    /* Checked here against the one table of names, so that a typo is one line and exit 2
     * before anything starts; "none" passes nothing on (a ps of any version then agrees). */
    pst_enc e;
    double fraction;
    if (pst_enc_parse_push(f_push_compress, &e, &fraction) < 0) {
      fprintf(stderr, "%s: --push-compress: '%.100s' is not %s\n", prog, f_push_compress,
              pst_enc_push_choices());
      return 2;
    }
    if (pst_enc_parse(f_pull_compress, &e) < 0) {
      fprintf(stderr, "%s: --pull-compress: '%.100s' is not %s\n", prog, f_pull_compress,
              pst_enc_choices());
      return 2;
    }
    o->push_compress = strcmp(f_push_compress, "none") ? f_push_compress : NULL;
    o->link = f_link[0] ? f_link : NULL;
    o->link_worker = f_link_worker[0] ? f_link_worker : NULL;
    o->pull_compress = strcmp(f_pull_compress, "none") ? f_pull_compress : NULL;
  }
  o->checkpoint_dir = f_ckpt_dir[0] ? f_ckpt_dir : NULL;
  o->checkpoint_every = f_ckpt_every[0] ? f_ckpt_every : NULL;
  o->checkpoint_seconds = f_ckpt_seconds[0] ? f_ckpt_seconds : NULL;
  o->checkpoint_keep = f_ckpt_keep[0] ? f_ckpt_keep : NULL;
  o->resume = f_resume[0] ? f_resume : NULL;
  if (strcmp(f_mode, "sync") && strcmp(f_mode, "async") && strcmp(f_mode, "ssp") &&
      strcmp(f_mode, "allreduce")) {
    fprintf(stderr, "%s: --mode: '%.100s' is not sync, async, ssp or allreduce\n", prog, f_mode);
    return 2;
  }
  if (strcmp(f_ar_alg, "auto") && strcmp(f_ar_alg, "ring") && strcmp(f_ar_alg, "recursive-doubling") &&
      strcmp(f_ar_alg, "rabenseifner")) {
    fprintf(stderr, "%s: --ar-algorithm: '%.100s' is not auto, ring, recursive-doubling or "
            "rabenseifner\n", prog, f_ar_alg);
    return 2;
  }
  o->ar_algorithm = f_ar_alg;
  if (strcmp(f_collective, "auto") && strcmp(f_collective, "mpi") && strcmp(f_collective, "nccl")) {
    fprintf(stderr, "%s: --collective: '%.100s' is not auto, mpi or nccl\n", prog, f_collective);
    return 2;
  }
  o->collective = f_collective;
  o->bucket_kib = (int)f_bucket_kib;
  if (strcmp(f_opt, "sgd") && strcmp(f_opt, "momentum") && strcmp(f_opt, "adam")) {
    fprintf(stderr, "%s: --optimizer: '%.100s' is not sgd, momentum or adam\n", prog, f_opt);
    return 2;
  }
  if (!(f_lr > 0)) {
    fprintf(stderr, "%s: --lr must be > 0\n", prog);
    return 2;
  }
  if (parse_per_worker(f_slow, o->slow_factor, o->workers, 1, 1000) < 0) {
    fprintf(stderr, "%s: --slow-worker wants I:FACTOR with 0 <= I < workers and 1 <= FACTOR <= 1000\n", prog);
    return 2;
  }
  if (parse_per_worker(f_delay, o->delay_ms, o->workers, 0, 600000) < 0) {
    fprintf(stderr, "%s: --delay-worker wants I:MS with 0 <= I < workers and 0 <= MS <= 600000\n", prog);
    return 2;
  }
  o->eval_every = (int)f_eval_every;
  o->report_every = (int)f_report_every;
  o->eval_samples = (int)f_eval_samples;
  return 0;
}

static pst_model g_model;

/* What the job is, once every check has passed. WORKERS is the count the job starts, which
 * --gpus and --workers-per-gpu decide where they are given (not --workers). */
static void local_starting(const pl_run_options *o, int workers) {
  if (!strcmp(o->mode, "allreduce"))
    printf("pstrain local: no ps, %d rank%s of one Open MPI job, allreduce mode (%s algorithm%s), "
           "model %s, %d epoch%s, batch %d per rank, %s lr %g%s%s\nlogs and metrics: %s\n",
           workers, workers > 1 ? "s" : "", o->ar_algorithm, o->bucket_kib > 0 ? ", buckets" : "",
           o->model, o->epochs, o->epochs > 1 ? "s" : "", o->batch_size, o->optimizer, o->lr,
           o->lr_schedule ? " " : "", o->lr_schedule ? o->lr_schedule : "", o->run_dir);
  else
  printf("pstrain local: %d ps%s%s%s + %d worker%s, %s mode, model %s, %d epoch%s, batch %d per "
         "worker, %s lr %g%s%s%s%s\nlogs and metrics: %s\n",
         o->ps_shards > 1 ? o->ps_shards : 1, o->ps_shards > 1 ? " shards" : "",
         o->link || o->link_worker ? ", placed " : "",
         o->link || o->link_worker ? o->ps_placement : "", workers,
         workers > 1 ? "s" : "", o->mode, o->model, o->epochs, o->epochs > 1 ? "s" : "",
         o->batch_size, o->optimizer, o->lr, o->lr_schedule ? " " : "",
         o->lr_schedule ? o->lr_schedule : "", o->tls ? ", mutual TLS" : "",
         o->insecure ? ", no cluster secret" : "", o->run_dir);
  if (o->checkpoint_dir) printf("checkpoints: %s\n", o->checkpoint_dir);
  if (o->metrics_listen)
    printf("dashboard: http://%s%s/ (and /metrics)\n",
           strchr(o->metrics_listen, ':') ? "" : "127.0.0.1:", o->metrics_listen);
  if (strcmp(o->model, "mlp") != 0) pst_model_summary(&g_model, stdout);
  fflush(stdout);
}

int pl_cmd_local(int argc, char **argv) {
  pl_run_options o;
  pst_model *model = &g_model;
  int rc = pl_parse_run_flags("local", argc, argv, &o, model,
                              "Starts one pstrain-ps (or --ps-shards K) and N pstrain-worker processes on 127.0.0.1,\n"
                              "shows per-epoch loss and accuracy, and stops them all at the end.\n");
  if (rc == 1) return 0;
  if (rc) return rc;
  /* A run directory that cannot be made is a configuration error, as are the other output
   * paths (checked by pl_run_local before anything starts). */
  char dir[PATH_MAX];
  if (pl_make_run_dir(o.run_dir, dir, sizeof dir) < 0) return 2;
  o.run_dir = dir;
  o.starting = local_starting;
  pl_run_result res;
  rc = pl_run_local(&o, &res);
  if (rc == 0 && res.summary_json[0])
    printf("done: test accuracy %.4f after %d epoch%s, %.0f samples/s (training), %.1f s wall\n",
           res.test_accuracy, o.epochs, o.epochs > 1 ? "s" : "", res.samples_per_sec,
           res.wall_seconds);
  return rc;
}
