/* pstrain-worker --mode allreduce: its flags, the collective joined, the run, the exit
 * (worker/allreduce/allreduce.h). Flags have the ps's names where they mean what the ps's
 * mean (--epochs, --batch-size, --optimizer, --lr, --clip-norm, --lr-schedule, ...), so that
 * a launcher passes one job to either. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/config.h"
#include "common/fpenv.h"
#include "common/log.h"
#include "kernels/blas_setup.h"
#include "kernels/device.h"
#include "model/model_config.h"
#include "worker/allreduce/allreduce.h"
#include "data/dataset.h"
#include "worker/setup.h"

static char o_mode[PST_CFG_STR_MAX], o_data[PST_CFG_STR_MAX], o_device[PST_CFG_STR_MAX];
static char o_model[PST_CFG_STR_MAX], o_log_level[PST_CFG_STR_MAX], o_optimizer[PST_CFG_STR_MAX];
static char o_lr_schedule[PST_CFG_STR_MAX], o_metrics[PST_CFG_STR_MAX], o_summary[PST_CFG_STR_MAX];
static char o_alg[PST_CFG_STR_MAX], o_ckpt_dir[PST_CFG_STR_MAX], o_resume[PST_CFG_STR_MAX];
static char o_slow[PST_CFG_STR_MAX], o_delay[PST_CFG_STR_MAX];
static char o_gpus[PST_CFG_STR_MAX], o_collective[PST_CFG_STR_MAX];
static int64_t o_ckpt_every, o_ckpt_keep, o_eval_every, o_eval_samples;
static double o_ckpt_seconds;
static pst_data_flags o_dataf;
static int64_t o_threads, o_epochs, o_batch, o_seed, o_report_every, o_bucket_kib, o_gpu_mem;
static double o_lr, o_momentum, o_beta1, o_beta2, o_eps, o_wd, o_clip_norm, o_grad_limit;
static double o_stall;

static pst_cfg_opt g_opts[] = {
    PST_OPT("mode", PST_CFG_STRING, o_mode, "allreduce", "ps (train with a pstrain-ps) or allreduce (no ps: the ranks of an mpirun job sum their gradients with Open MPI)", 0, 0),
    PST_OPT("data-dir", PST_CFG_STRING, o_data, PST_DATA_DEFAULT_DIR, "directory of the data: IDX files, CIFAR-10/100 binary files or an image folder", 0, 0),
    PST_DATA_OPTS(o_dataf),
    PST_OPT("model", PST_CFG_STRING, o_model, "mlp", "preset (mlp, cnn, cnn2, mobilenetv2, resnet20) or model spec file", 0, 0),
    PST_OPT("epochs", PST_CFG_INT, &o_epochs, "2", "passes over the training set", 1, 10000),
    PST_OPT("batch-size", PST_CFG_INT, &o_batch, "64", "samples per rank per step (a sync ps job's per worker)", 1, 65536),
    PST_OPT("optimizer", PST_CFG_STRING, o_optimizer, "adam", "sgd, momentum or adam (a model spec may set its own)", 0, 0),
    PST_OPT("lr", PST_CFG_DOUBLE, &o_lr, "0.001", "learning rate (a model spec may set its own)", 0, 0),
    PST_OPT("momentum", PST_CFG_DOUBLE, &o_momentum, "0.9", "momentum factor (momentum)", 0, 0),
    PST_OPT("beta1", PST_CFG_DOUBLE, &o_beta1, "0.9", "Adam beta1", 0, 0),
    PST_OPT("beta2", PST_CFG_DOUBLE, &o_beta2, "0.999", "Adam beta2", 0, 0),
    PST_OPT("eps", PST_CFG_DOUBLE, &o_eps, "1e-8", "Adam epsilon", 0, 0),
    PST_OPT("weight-decay", PST_CFG_DOUBLE, &o_wd, "0", "L2 weight decay added to gradients", 0, 0),
    PST_OPT("lr-schedule", PST_CFG_STRING, o_lr_schedule, "constant", "constant or cosine (as the ps's --lr-schedule)", 0, 0),
    PST_OPT("clip-norm", PST_CFG_DOUBLE, &o_clip_norm, "0", "each rank clips its gradient to this norm (Keras's global clipnorm), as a ps's workers do (0: off)", 0, 0),
    PST_OPT("grad-limit", PST_CFG_DOUBLE, &o_grad_limit, PST_GRAD_LIMIT_DEFAULT_TEXT, "largest magnitude a summed gradient value may have: a larger one (or a NaN) ends the job (0 < limit <= 1e30)", 0, 0),
    PST_OPT("seed", PST_CFG_INT, &o_seed, "42", "seed of weights init (rank 0's, broadcast) and data shuffles", 0, INT64_MAX),
    PST_OPT("report-every", PST_CFG_INT, &o_report_every, "50", "steps between training-loss records", 1, 1000000),
    PST_OPT("metrics", PST_CFG_STRING, o_metrics, "", "rank 0 writes metrics (JSON lines) to this file", 0, 0),
    PST_OPT("summary-json", PST_CFG_STRING, o_summary, "", "rank 0 writes the final summary (JSON) here", 0, 0),
    PST_OPT("eval-every", PST_CFG_INT, &o_eval_every, "0", "steps between evaluations on a test subset, every rank its part (0: off; the full test set is evaluated after each epoch either way)", 0, 1000000),
    PST_OPT("eval-samples", PST_CFG_INT, &o_eval_samples, "2000", "test samples in that subset (fixed by --seed, split across the ranks as a ps splits it across workers)", 1, 10000000),
    PST_OPT("slow-factor", PST_CFG_STRING, o_slow, "1", "run this many times slower (experiments): F for every rank, or F0,F1,... by rank", 0, 0),
    PST_OPT("delay-ms", PST_CFG_STRING, o_delay, "0", "hold this rank's share this long before each sum and the sum as long after it, as a slow link would (experiments): D for every rank, or D0,D1,... by rank", 0, 0),
    PST_OPT("ar-algorithm", PST_CFG_STRING, o_alg, "auto", "Open MPI's allreduce algorithm: auto (its own rules), ring, recursive-doubling or rabenseifner (forced through coll_tuned_allreduce_algorithm)", 0, 0),
    PST_OPT("bucket-kib", PST_CFG_INT, &o_bucket_kib, "0", "sum the gradient in buckets of about this many KiB, each started as the backward pass finishes its layers, last layer first (0: one sum after the backward pass)", 0, 1048576),
    PST_OPT("checkpoint-dir", PST_CFG_STRING, o_ckpt_dir, "", "rank 0 writes checkpoints here, in the ps's format (empty: none)", 0, 0),
    PST_OPT("checkpoint-every", PST_CFG_INT, &o_ckpt_every, "0", "steps between checkpoints (0: at each epoch's end only)", 0, INT64_MAX),
    PST_OPT("checkpoint-seconds", PST_CFG_DOUBLE, &o_ckpt_seconds, "0", "seconds between checkpoints, by rank 0's clock (0: off)", 0, 0),
    PST_OPT("checkpoint-keep", PST_CFG_INT, &o_ckpt_keep, "3", "checkpoints kept", 1, 1000),
    PST_OPT("resume", PST_CFG_STRING, o_resume, "auto", "auto (the newest checkpoint in --checkpoint-dir this job's model and settings fit) or never", 0, 0),
    PST_OPT("stall-timeout", PST_CFG_DOUBLE, &o_stall, "10", "seconds a rank waits in a sum for the others before it ends the job (a rank stalled, frozen or cut off; MPI itself waits for ever), or 20 times the longest step when that is more (0: never)", 0, 0),
    PST_OPT("device", PST_CFG_STRING, o_device, "cpu", "cpu, auto, cuda or cuda:N (GPU ranks sum through host buffers)", 0, 0),
    PST_OPT("gpus", PST_CFG_STRING, o_gpus, "", "GPU ids, one per local rank: the rank with local rank L (mpirun's OMPI_COMM_WORLD_LOCAL_RANK) takes entry L modulo the list's length (empty: --device as given)", 0, 0),
    PST_OPT("collective", PST_CFG_STRING, o_collective, "auto", "what sums the gradients: mpi (Open MPI), nccl (NCCL on the rank's GPU, loaded from the host's libnccl.so.2; GPU ranks only) or auto (nccl on GPU ranks when it loads and every rank has a GPU of its own, else mpi)", 0, 0),
    PST_OPT("threads", PST_CFG_INT, &o_threads, "1", "CPU backend threads", 1, 256),
    PST_OPT("gpu-memory-limit", PST_CFG_INT, &o_gpu_mem, "0", "GPU memory cap in MiB (0: none)", 0, 1 << 24),
    PST_OPT("log-level", PST_CFG_STRING, o_log_level, "info", "error, warning, info or debug", 0, 0),
};

/* --slow-factor and --delay-ms: one number for every rank, or a comma-separated list by rank
 * (the launcher gives each worker its own, and mpirun gives every rank one command line).
 * rank -1 checks every entry; otherwise *out is that rank's (the last entry's for ranks past
 * the list, 1 or 0 where there is none: lo). 0, or -EINVAL with a reason. */
static int rank_value(const char *list, int rank, double lo, double hi, double *out,
                      const char *flag, char *err, size_t errlen) {
  *out = lo;
  const char *p = list;
  for (int i = 0; *p; i++) {
    char *end = NULL;
    double x = strtod(p, &end);
    if (end == p || (*end && *end != ',') || !(x >= lo && x <= hi)) {
      snprintf(err, errlen, "%s: '%.200s' is not a number between %g and %g, or a "
               "comma-separated list of them by rank", flag, list, lo, hi);
      return -EINVAL;
    }
    if (i <= rank || rank < 0) *out = x;
    p = *end ? end + 1 : end;
  }
  return 0;
}

/* The checks the parser cannot make, with the ps's ranges (ps/main.c), into a->job. */
static int build_job(wk_ar_job *j, char *err, size_t errlen) {
  if (strcmp(o_mode, "allreduce") != 0) {
    snprintf(err, errlen, "--mode: '%.200s' here is not allreduce", o_mode);
    return -EINVAL;
  }
  pst_opt_defaults(&j->opt);
  if (pst_opt_kind_parse(o_optimizer, &j->opt.kind) < 0) {
    snprintf(err, errlen, "--optimizer: '%.200s' is not sgd, momentum or adam", o_optimizer);
    return -EINVAL;
  }
  if (pst_opt_check_settings(o_lr, o_momentum, o_beta1, o_beta2, o_eps, o_wd, err, errlen) < 0)
    return -EINVAL;
  if (pst_update_check_limits(o_grad_limit, o_clip_norm, err, errlen) < 0) return -EINVAL;
  if (pst_lr_schedule_parse(o_lr_schedule, &j->lr_schedule) < 0) {
    snprintf(err, errlen, "--lr-schedule: '%.200s' is not constant or cosine", o_lr_schedule);
    return -EINVAL;
  }
  if (pst_coll_alg_parse(o_alg, &j->alg) < 0) {
    snprintf(err, errlen, "--ar-algorithm: '%.200s' is not auto, ring, recursive-doubling or "
             "rabenseifner", o_alg);
    return -EINVAL;
  }
  if (pst_device_check_spec(o_device, err, errlen) < 0) return -EINVAL;
  if (!strcmp(o_collective, "mpi")) j->collective = WK_AR_COLL_MPI;
  else if (!strcmp(o_collective, "nccl")) j->collective = WK_AR_COLL_NCCL;
  else if (!strcmp(o_collective, "auto")) j->collective = WK_AR_COLL_AUTO;
  else {
    snprintf(err, errlen, "--collective: '%.200s' is not auto, mpi or nccl", o_collective);
    return -EINVAL;
  }
  if (j->collective == WK_AR_COLL_NCCL && !o_gpus[0] && strncmp(o_device, "cuda", 4) != 0) {
    snprintf(err, errlen, "--collective nccl sums on GPUs: give the ranks --device cuda or --gpus");
    return -EINVAL;
  }
  for (const char *p = o_gpus; *p;) {
    char *end = NULL;
    long id = strtol(p, &end, 10);
    if (end == p || (*end && *end != ',') || id < 0 || id > 1023) {
      snprintf(err, errlen, "--gpus: '%.200s' is not a list of GPU ids like 0,1,2,3", o_gpus);
      return -EINVAL;
    }
    p = *end ? end + 1 : end;
  }
  if (!(o_stall >= 0 && o_stall <= 604800)) {
    snprintf(err, errlen, "--stall-timeout must be between 0 and 604800 seconds");
    return -EINVAL;
  }
  j->stall_timeout = o_stall;
  if (strcmp(o_resume, "auto") != 0 && strcmp(o_resume, "never") != 0) {
    snprintf(err, errlen, "--resume: '%.200s' is not auto or never", o_resume);
    return -EINVAL;
  }
  if (!(o_ckpt_seconds >= 0 && o_ckpt_seconds <= 604800)) {
    snprintf(err, errlen, "--checkpoint-seconds must be between 0 and 604800");
    return -EINVAL;
  }
  j->checkpoint_seconds = o_ckpt_seconds;
  j->eval_every = (int)o_eval_every;
  j->eval_samples = (int)o_eval_samples;
  /* Checked here for their form, before MPI starts; each rank takes its own entry once it
   * knows its rank (rank_value). */
  double v;
  if (rank_value(o_slow, -1, 1, 1000, &v, "--slow-factor", err, errlen) < 0 ||
      rank_value(o_delay, -1, 0, 600000, &v, "--delay-ms", err, errlen) < 0)
    return -EINVAL;
  j->checkpoint_dir = o_ckpt_dir;
  j->checkpoint_every = (int)(o_ckpt_every > INT32_MAX ? INT32_MAX : o_ckpt_every);
  j->checkpoint_keep = (int)o_ckpt_keep;
  j->resume = o_resume;
  j->opt.lr = (float)o_lr;
  j->opt.momentum = (float)o_momentum;
  j->opt.beta1 = (float)o_beta1;
  j->opt.beta2 = (float)o_beta2;
  j->opt.eps = (float)o_eps;
  j->opt.weight_decay = (float)o_wd;
  j->model = o_model;
  j->optimizer = pst_opt_kind_name(j->opt.kind);
  j->epochs = (int)o_epochs;
  j->batch = (int)o_batch;
  j->seed = (uint64_t)o_seed;
  j->clip_norm = o_clip_norm;
  j->grad_limit = o_grad_limit;
  j->report_every = (int)o_report_every;
  j->metrics_path = o_metrics;
  j->summary_path = o_summary;
  j->bucket_kib = (int)o_bucket_kib;
  return 0;
}

int wk_ar_main(int argc, char **argv) {
  char err[700];
  pst_cfg cfg = {
      .prog = "pstrain-worker",
      .section = "worker",
      .default_file = "/etc/pstrain/worker.conf",
      .env_prefix = "PSTRAIN_WORKER_",
      .usage_extra = "--mode allreduce: a rank of an mpirun job (no ps); the job's settings are "
                     "these flags, the same on every rank.\n",
      .opts = g_opts,
      .n_opts = (int)(sizeof g_opts / sizeof g_opts[0]),
  };
  pst_log_init("pstrain-worker", PST_LOG_INFO);
  pst_log_guard_signals();
  static wk_ar a;
  memset(&a, 0, sizeof a);
  /* 1. Configuration (the model spec's optimizer line fills what the flags left at their
   * defaults, as on the ps), checked before MPI starts: a bad flag is one line and exit 2. */
  if (pst_cfg_load(&cfg, argc, argv, err, sizeof err) < 0 ||
      (!cfg.help && (pst_model_configure(&cfg, o_model, &a.t.model, err, sizeof err) < 0 ||
                     build_job(&a.job, err, sizeof err) < 0 ||
                     pst_data_flags_parse(&o_dataf, &a.t.opt.image, err, sizeof err) < 0))) {
    LOG_ERR("%s", err);
    return PST_EXIT_USAGE;
  }
  if (cfg.help) return 0;
  int level = pst_log_level_parse(o_log_level);
  if (level < 0) {
    LOG_ERR("--log-level: '%.200s' is not error, warning, info or debug", o_log_level);
    return PST_EXIT_USAGE;
  }
  if (cfg.print_config) {
    pst_cfg_print(&cfg, stdout);
    return 0;
  }
  /* The ranks and the world come from mpirun (one host or several: mpirun --host a:2,b:2);
   * a TF_CONFIG cluster names a ps and workers, which this mode has no use for. */
  const char *tf = getenv("TF_CONFIG");
  if (tf && tf[0]) {
    LOG_ERR("--mode allreduce takes its ranks from mpirun, not from TF_CONFIG: unset TF_CONFIG, "
            "or run a ps job (--mode ps)");
    return PST_EXIT_USAGE;
  }
  /* 2. Floating point as a ps's worker has it (worker/main.c): OpenBLAS's kernels, which may
   * run this process again, before MPI starts; denormals flushed. */
  char blas_note[320];
  if (pst_blas_choose(blas_note, sizeof blas_note) == PST_BLAS_REEXEC) {
    execv("/proc/self/exe", argv);
    LOG_WARN("cannot run again with better OpenBLAS kernels; going on with OpenBLAS's own");
  }
  pst_fp_flush_denormals();
  /* 3. The collective: ranks and size come from mpirun. */
  if (pst_coll_init(a.job.alg, &a.coll, err, sizeof err) < 0) {
    LOG_ERR("%s", err);
    return PST_EXIT_FAILED;
  }
  a.rank = pst_coll_rank(a.coll);
  a.size = pst_coll_size(a.coll);
  rank_value(o_slow, a.rank, 1, 1000, &a.job.slow_factor, "--slow-factor", err, sizeof err);
  rank_value(o_delay, a.rank, 0, 600000, &a.job.delay_ms, "--delay-ms", err, sizeof err);
  char prog[64];
  snprintf(prog, sizeof prog, "pstrain-worker[rank %d]", a.rank);
  pst_log_init(prog, level);
  wk_trainer *t = &a.t;
  t->opt.name = prog;
  t->opt.data_dir = o_data;
  /* --gpus: this rank's GPU by its local rank (one GPU per rank, as NCCL requires; the
   * launcher gives the list by rank). */
  static char device[32];
  t->opt.device = o_device;
  if (o_gpus[0]) {
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    int local = lr && lr[0] ? atoi(lr) : a.rank, n = 1, want;
    for (const char *p = o_gpus; *p; p++) n += *p == ',';
    want = local % n;
    const char *p = o_gpus;
    for (int i = 0; i < want; i++) p = strchr(p, ',') + 1;
    snprintf(device, sizeof device, "cuda:%ld", strtol(p, NULL, 10));
    t->opt.device = device;
  }
  t->opt.threads = (int)o_threads;
  t->opt.gpu_memory_limit_mib = (size_t)o_gpu_mem;
  t->opt.push_by_layer = a.job.bucket_kib > 0; /* the bucket hook (ar_loop.c) */
  t->opt.pull_by_layer = 0;
  char desc[512];
  double t_start = pst_now();
  int rc = wk_setup_data(t, desc, sizeof desc, err, sizeof err);
  if (rc == 0) {
    LOG_INFO("data: %s", desc);
    rc = wk_ar_run(&a, err, sizeof err);
  }
  wk_ar_watch_stop(&a);
  if (rc == 0) rc = wk_ar_summary(&a, pst_now() - t_start, err, sizeof err);
  if (rc < 0) {
    /* One rank cannot go on: the others would wait in their next sum for ever. MPI_Abort
     * ends every rank (mpirun reports it), with this line as the reason. */
    LOG_ERR("%s", err);
    pst_coll_abort(a.coll, PST_EXIT_FAILED);
    return PST_EXIT_FAILED;
  }
  if (a.metrics) fclose(a.metrics);
  pst_coll_finalize(a.coll);
  wk_setup_free(t);
  pst_update_free(&a.upd);
  pst_opt_free(&a.optim);
  pst_store_free(&a.store);
  free(a.rank_checksums);
  LOG_INFO("exiting with status 0 (finished)");
  return PST_EXIT_OK;
}
