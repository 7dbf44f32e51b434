/* pstrain-ps: the parameter server.
 *
 * The story: read the configuration (defaults < the model spec's optimizer line <
 * /etc/pstrain/ps.conf < PSTRAIN_PS_* < flags), initialise the model's weights from the
 * seed, load the cluster secret and the TLS files (bad ones are configuration errors, exit
 * 2), start listening, run the event loop until training is complete or a signal
 * arrives, then close every handle and check that the loop really is empty. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <uv.h>

#include "common/auth.h"
#include "common/cluster.h"
#include "common/config.h"
#include "common/timeline.h"
#include "common/fpenv.h"
#include "common/k8s.h"
#include "common/log.h"
#include "common/keep_awake.h"
#include "common/notify.h"
#include "common/proc.h"
#include "common/tls_config.h"
#include "model/model_config.h"
#include "kernels/partition.h"
#include "ps/state/atomic_file.h"
#include "ps/state/checkpoint.h"
#include "ps/obs/dashboard.h"
#include "ps/obs/obs.h"
#include "ps/train/evaluate.h"
#include "ps/net/linger.h"
#include "ps/server.h"
#include "kernels/blas_setup.h"
#include "data/dataset.h"

#define PS_DEFAULT_LISTEN "127.0.0.1:7070"

static char o_listen[PST_CFG_STR_MAX], o_mode[PST_CFG_STR_MAX], o_model[PST_CFG_STR_MAX];
static char o_optimizer[PST_CFG_STR_MAX], o_metrics[PST_CFG_STR_MAX];
static char o_summary[PST_CFG_STR_MAX], o_log_level[PST_CFG_STR_MAX];
static char o_tf_config[PST_CFG_STR_MAX], o_k8s_ps[PST_CFG_STR_MAX], o_ckpt_dir[PST_CFG_STR_MAX], o_resume[PST_CFG_STR_MAX];
static char o_on_loss[PST_CFG_STR_MAX], o_secret_file[PST_CFG_STR_MAX], o_shard[PST_CFG_STR_MAX];
static char o_metrics_listen[PST_CFG_STR_MAX], o_tensorboard[PST_CFG_STR_MAX];
static char o_data_facts[PST_CFG_STR_MAX], o_eval_on[PST_CFG_STR_MAX], o_data[PST_CFG_STR_MAX];
static char o_on_finish[PST_CFG_STR_MAX], o_workers[PST_CFG_STR_MAX], o_data_order[PST_CFG_STR_MAX];
static char o_lr_scaling[PST_CFG_STR_MAX], o_lr_schedule[PST_CFG_STR_MAX], o_timeline[PST_CFG_STR_MAX];
static int64_t o_tl_steps, o_tl_skip;
static pst_data_flags o_dataf;
static int o_insecure;
static pst_tls_files o_tls;
static int64_t o_max_conns;
static double o_hello_timeout;
static int64_t o_ckpt_every, o_ckpt_keep;
static double o_worker_timeout, o_rejoin_timeout, o_ckpt_seconds;
static double o_step_factor, o_step_timeout;
static int64_t o_epochs, o_batch, o_seed, o_chunk_kib, o_report_every, o_staleness;
static int64_t o_backup, o_threads, o_io_kib, o_eval_every, o_eval_samples, o_k8s_replicas;
static double o_grad_limit, o_clip_norm, o_grad_norm_factor, o_eval_timeout, o_topk_warmup;
static int o_topk_correction;
static int o_layer_chunks, o_staleness_lr, o_keep_awake, o_shm;
static char o_push_compress[PST_CFG_STR_MAX], o_pull_compress[PST_CFG_STR_MAX];
static double o_lr, o_momentum, o_beta1, o_beta2, o_eps, o_wd, o_status_interval;

static pst_cfg_opt g_opts[] = {
    PST_OPT("listen", PST_CFG_STRING, o_listen, PS_DEFAULT_LISTEN, "address:port to listen on", 0, 0),
    PST_OPT("workers", PST_CFG_STRING, o_workers, "1", "number of workers to train with: N, or MIN:MAX (start with MIN, admit newcomers up to MAX at a step boundary, go on as they leave; the ps then hands out the data)", 0, 0),
    PST_OPT("data-order", PST_CFG_STRING, o_data_order, "auto", "who orders the training data: shards (each worker its fixed shard, which it shuffles), ps (the ps hands out ranges of each epoch's order as workers ask: they may come and go), or auto (ps for MIN:MAX with MIN < MAX, else shards)", 0, 0),
    PST_OPT("shard", PST_CFG_STRING, o_shard, "0/1", "I/K: this ps holds part I of the weights split over K ps shards", 0, 0),
    PST_OPT("mode", PST_CFG_STRING, o_mode, "sync", "update mode: sync, async or ssp", 0, 0),
    PST_OPT("staleness", PST_CFG_INT, &o_staleness, "2", "ssp: most pushes a worker may run ahead", 0, 1000000),
    PST_OPT("backup-workers", PST_CFG_INT, &o_backup, "0", "sync: apply each step after N-K gradients", 0, 4095),
    PST_OPT("lr-scaling", PST_CFG_STRING, o_lr_scaling, "none", "sync with the data handed out by the ps: none (the learning rate stays --lr whatever the workers present), or linear (each step's learning rate is --lr x the samples it sums / (batch x MIN workers): the linear-scaling rule, docs/modes.md)", 0, 0),
    PST_OPT("lr-schedule", PST_CFG_STRING, o_lr_schedule, "constant", "constant (every step at --lr) or cosine (each step's rate falls from --lr to nearly 0 over the job's planned steps: (1 + cos(pi x steps done / steps planned)) / 2 of it; not with the data handed out by the ps, whose steps are not known ahead)", 0, 0),
    PST_OPT("staleness-lr", PST_CFG_BOOL, &o_staleness_lr, "false", "async and ssp: apply each gradient with the learning rate divided by 1 + its staleness (staleness-aware asynchronous SGD, Zhang et al. 2016)", 0, 0),
    PST_OPT("model", PST_CFG_STRING, o_model, "mlp", "preset (mlp, cnn, cnn2, mobilenetv2, resnet20) or model spec file", 0, 0),
    PST_OPT("epochs", PST_CFG_INT, &o_epochs, "2", "passes over the training set", 1, 10000),
    PST_OPT("batch-size", PST_CFG_INT, &o_batch, "64", "samples per worker per step", 1, 65536),
    PST_OPT("optimizer", PST_CFG_STRING, o_optimizer, "adam", "sgd, momentum or adam (a model spec may set its own)", 0, 0),
    PST_OPT("lr", PST_CFG_DOUBLE, &o_lr, "0.001", "learning rate (a model spec may set its own)", 0, 0),
    PST_OPT("momentum", PST_CFG_DOUBLE, &o_momentum, "0.9", "momentum factor (momentum)", 0, 0),
    PST_OPT("beta1", PST_CFG_DOUBLE, &o_beta1, "0.9", "Adam beta1", 0, 0),
    PST_OPT("beta2", PST_CFG_DOUBLE, &o_beta2, "0.999", "Adam beta2", 0, 0),
    PST_OPT("eps", PST_CFG_DOUBLE, &o_eps, "1e-8", "Adam epsilon", 0, 0),
    PST_OPT("weight-decay", PST_CFG_DOUBLE, &o_wd, "0", "L2 weight decay added to gradients", 0, 0),
    PST_OPT("eval-on", PST_CFG_STRING, o_eval_on, "workers", "who evaluates each epoch on the test set: workers (each its slice), or ps (the ps itself, on its CPU, from --data-dir: figures no worker can forge)", 0, 0),
    PST_OPT("data-dir", PST_CFG_STRING, o_data, PST_DATA_DEFAULT_DIR, "--eval-on ps: the data, as the workers are given it (and the data flags below)", 0, 0),
    PST_DATA_OPTS(o_dataf),
    PST_OPT("data-facts", PST_CFG_STRING, o_data_facts, "", "TRAIN,TEST,CLASSES: the data every worker must have (training and test samples, classes); empty: what the first worker to register says", 0, 0),
    PST_OPT("grad-limit", PST_CFG_DOUBLE, &o_grad_limit, PST_GRAD_LIMIT_DEFAULT_TEXT, "largest magnitude a gradient value may have: a chunk with a larger one (or a NaN) is rejected and counted against its worker (0 < limit <= 1e30)", 0, 0),
    PST_OPT("clip-norm", PST_CFG_DOUBLE, &o_clip_norm, "0", "workers clip each gradient to this norm (Keras's global clipnorm) and the ps rejects a push over it (0: off)", 0, 0),
    PST_OPT("grad-norm-factor", PST_CFG_DOUBLE, &o_grad_norm_factor, PST_NORM_FACTOR_DEFAULT_TEXT, "a push whose gradient norm is over this many times the running median of the last 64 accepted pushes' is rejected and counted against its worker; until 8 were accepted, one of RMS over 1 per parameter is (0: off; else over 1)", 0, 0),
    PST_OPT("push-compress", PST_CFG_STRING, o_push_compress, "none", "encoding of the workers' gradients on the wire: none (float32), fp16 or bf16 (half the bytes), or topk:FRACTION (each weight tensor's largest FRACTION of values, 0 < FRACTION <= 0.5, biases and batch norm's vectors whole, as index and value pairs); the workers keep what was lost or not sent and add it to the next step's gradient", 0, 0),
    PST_OPT("topk-warmup", PST_CFG_DOUBLE, &o_topk_warmup, "0", "with --push-compress topk:F: epochs over which the share a push sends falls from 0.25 to F (Deep Gradient Compression's warm-up; 0: F from the start)", 0, 0),
    PST_OPT("topk-momentum-correction", PST_CFG_BOOL, &o_topk_correction, "true", "with --push-compress topk:F and --optimizer momentum: the workers keep the momentum and send the top-k of their velocities, the ps steps with momentum 0 (Deep Gradient Compression's momentum correction; false: the ps applies the momentum to the sparse sums)", 0, 0),
    PST_OPT("pull-compress", PST_CFG_STRING, o_pull_compress, "none", "encoding of the weights sent to the workers: none (float32), fp16 or bf16 (half the bytes, rounded from the ps's float32 weights, which stay the master copy), or delta (int8 changes from what each worker holds, about a quarter of the bytes; float32 for evaluated and final weights)", 0, 0),
    PST_OPT("seed", PST_CFG_INT, &o_seed, "42", "seed of weights init and data shuffles", 0, INT64_MAX),
    PST_OPT("chunk-kib", PST_CFG_INT, &o_chunk_kib, "4096", "tensor chunk size on the wire (KiB): the largest, with --layer-chunks", 4, 262144),
    PST_OPT("layer-chunks", PST_CFG_BOOL, &o_layer_chunks, "true", "cut the tensors into chunks along the model's layers, small layers grouped, so that layer-by-layer pushes and pulls overlap at any chunk size (false: chunks of --chunk-kib, as before)", 0, 0),
    PST_OPT("shm", PST_CFG_BOOL, &o_shm, "true", "with a worker on this host under the same user: the payloads through shared memory instead of TCP, a sealed memfd each way that each end maps (proto/ring.h); workers elsewhere, and with TLS, keep to TCP by themselves", 0, 0),
    PST_OPT("keep-awake", PST_CFG_BOOL, &o_keep_awake, "false", "keep the CPUs out of their sleep states while serving, so that a chunk's arrival does not wait for a CPU to wake (for a ps of GPU workers on a host of its own; common/keep_awake.h): a PM QoS request on /dev/cpu_dma_latency where it may write it, else a spinning thread per CPU at the lowest priority (never under a cgroup CPU quota). The CPUs draw more power", 0, 0),
    PST_OPT("threads", PST_CFG_INT, &o_threads, "1", "threads for sums and optimizer passes (0: the cores this process may use); above 1, as many I/O threads less one", 0, 1024),
    PST_OPT("io-offload-kib", PST_CFG_INT, &o_io_kib, "256", "with --threads above 1: gradient payloads and runs of weight chunks from this size (KiB) are moved by the I/O threads (0: never)", 0, 1048576),
    PST_OPT("report-every", PST_CFG_INT, &o_report_every, "50", "steps between workers' loss reports", 1, 1000000),
    PST_OPT("eval-every", PST_CFG_INT, &o_eval_every, "0", "steps between workers' evaluations on a test subset (0: off; the full test set is evaluated after each epoch either way)", 0, 1000000),
    PST_OPT("eval-samples", PST_CFG_INT, &o_eval_samples, "2000", "test samples in that subset (fixed by --seed, split across workers)", 1, 10000000),
    PST_OPT("status-interval", PST_CFG_DOUBLE, &o_status_interval, "5", "seconds between status lines (0: off)", 0, 0),
    PST_OPT("metrics", PST_CFG_STRING, o_metrics, "", "write metrics (JSON lines) to this file", 0, 0),
    PST_OPT("metrics-listen", PST_CFG_STRING, o_metrics_listen, "", "serve Prometheus /metrics on ADDR:PORT (a bare PORT: 127.0.0.1; empty: off)", 0, 0),
    PST_OPT("tensorboard", PST_CFG_STRING, o_tensorboard, "", "write TensorBoard event files (scalars) into this directory", 0, 0),
    PST_OPT("summary-json", PST_CFG_STRING, o_summary, "", "write the final summary (JSON) here", 0, 0),
    PST_OPT("timeline", PST_CFG_STRING, o_timeline, "", "write this ps's timeline to FILE: Chrome trace-event JSON of each gradient chunk's queueing, sum, optimizer pass and send (empty: off)", 0, 0),
    PST_OPT("timeline-steps", PST_CFG_INT, &o_tl_steps, "50", "versions the timeline keeps", 1, 1000000),
    PST_OPT("timeline-skip", PST_CFG_INT, &o_tl_skip, "5", "versions the timeline skips first (the warm-up)", 0, INT64_MAX),
    PST_OPT("log-level", PST_CFG_STRING, o_log_level, "info", "error, warning, info or debug", 0, 0),
    PST_OPT("tf-config", PST_CFG_STRING, o_tf_config, "", "TF_CONFIG cluster spec, JSON or @FILE (default: env TF_CONFIG)", 0, 0),
    PST_K8S_OPTS(o_k8s_ps, o_k8s_replicas),
    PST_OPT("secret-file", PST_CFG_STRING, o_secret_file, "", "cluster secret (default: systemd credential pstrain-secret); every connection must prove it holds it", 0, 0),
    PST_TLS_OPTS(o_tls),
    PST_OPT("insecure", PST_CFG_BOOL, &o_insecure, "false", "listen on a non-loopback address without a secret or TLS", 0, 0),
    PST_OPT("hello-timeout", PST_CFG_DOUBLE, &o_hello_timeout, "10", "seconds a connection has to authenticate and register (0.1 to 3600)", 0, 0),
    PST_OPT("max-connections", PST_CFG_INT, &o_max_conns, "256", "open connections at most (the oldest unregistered one is closed first)", 8, 65536),
    PST_OPT("worker-timeout", PST_CFG_DOUBLE, &o_worker_timeout, "30", "seconds of silence after which a worker is lost (0.2 to 86400)", 0, 0),
    PST_OPT("eval-timeout", PST_CFG_DOUBLE, &o_eval_timeout, "0", "seconds a connected worker may take to report an evaluation it owes once the others have; then the epoch is evaluated without its share (0: the worker timeout, or twice what the others took)", 0, 0),
    PST_OPT("rejoin-timeout", PST_CFG_DOUBLE, &o_rejoin_timeout, "300", "seconds a lost worker's slot waits for a replacement (0 to 604800)", 0, 0),
    PST_OPT("on-worker-loss", PST_CFG_STRING, o_on_loss, "continue", "sync: continue without a lost worker, or wait for it", 0, 0),
    PST_OPT("step-factor", PST_CFG_DOUBLE, &o_step_factor, "20", "sync: a worker that holds a step open longer than this many times the job's typical step (at least 5 s; more for its first step and for one with an evaluation) is dropped as a stall (0: only --step-timeout)", 0, 0),
    PST_OPT("step-timeout", PST_CFG_DOUBLE, &o_step_timeout, "600", "sync: seconds a step waits on one connected worker at most, whatever its steps took before (0: no cap)", 0, 0),
    PST_OPT("checkpoint-dir", PST_CFG_STRING, o_ckpt_dir, "", "write checkpoints here (empty: none)", 0, 0),
    PST_OPT("checkpoint-every", PST_CFG_INT, &o_ckpt_every, "0", "steps between checkpoints (0: off)", 0, INT64_MAX),
    PST_OPT("checkpoint-seconds", PST_CFG_DOUBLE, &o_ckpt_seconds, "60", "seconds between checkpoints (0: off)", 0, 0),
    PST_OPT("checkpoint-keep", PST_CFG_INT, &o_ckpt_keep, "3", "checkpoints kept", 1, 1000),
    PST_OPT("resume", PST_CFG_STRING, o_resume, "auto", "auto (newest valid checkpoint), never, or a checkpoint file", 0, 0),
    PST_OPT("on-finish", PST_CFG_STRING, o_on_finish, "exit", "once training has finished (now or in the checkpoint resumed): exit, or wait for SIGTERM serving /healthz, /readyz (503) and /metrics, then exit 0 (for a Kubernetes StatefulSet, which restarts a pod that exits)", 0, 0),
};

/* Turns the parsed options into ps_options, checking what the parser cannot. */
static int build_options(ps_options *o, char *err, size_t errlen) {
  memset(o, 0, sizeof *o);
  if (pst_parse_hostport(o_listen, o->listen_host, sizeof o->listen_host, &o->listen_port) < 0) {
    snprintf(err, errlen, "--listen: '%.200s' is not address:port", o_listen);
    return -EINVAL;
  }
  if (pst_partition_parse(o_shard, &o->shard_index, &o->shard_count) < 0) {
    snprintf(err, errlen, "--shard: '%.200s' is not I/K with 0 <= I < K <= %d", o_shard,
             PST_MAX_SHARDS);
    return -EINVAL;
  }
  if (pst_mode_parse(o_mode, &o->mode) < 0) {
    snprintf(err, errlen, "--mode: '%.200s' is not sync, async or ssp", o_mode);
    return -EINVAL;
  }
  pst_opt_defaults(&o->opt);
  if (pst_opt_kind_parse(o_optimizer, &o->opt.kind) < 0) {
    snprintf(err, errlen, "--optimizer: '%.200s' is not sgd, momentum or adam", o_optimizer);
    return -EINVAL;
  }
  if (pst_opt_check_settings(o_lr, o_momentum, o_beta1, o_beta2, o_eps, o_wd, err, errlen) < 0)
    return -EINVAL;
  if (pst_update_check_limits(o_grad_limit, o_clip_norm, err, errlen) < 0) return -EINVAL;
  if (strcmp(o_eval_on, "workers") != 0 && strcmp(o_eval_on, "ps") != 0) {
    snprintf(err, errlen, "--eval-on: '%.200s' is not workers or ps", o_eval_on);
    return -EINVAL;
  }
  if (o_data_facts[0]) {
    int64_t tr = 0, te = 0, cl = 0;
    const char *c1 = strchr(o_data_facts, ','), *c2 = c1 ? strchr(c1 + 1, ',') : NULL;
    if (!c1 || !c2 ||
        pst_parse_int_n(o_data_facts, (size_t)(c1 - o_data_facts), 1, UINT32_MAX, &tr) < 0 ||
        pst_parse_int_n(c1 + 1, (size_t)(c2 - c1 - 1), 1, UINT32_MAX, &te) < 0 ||
        pst_parse_int(c2 + 1, 2, UINT32_MAX, &cl) < 0) {
      snprintf(err, errlen, "--data-facts: '%.200s' is not TRAIN,TEST,CLASSES (positive "
               "sample counts and at least 2 classes)", o_data_facts);
      return -EINVAL;
    }
    o->data_train = (uint32_t)tr;
    o->data_test = (uint32_t)te;
    o->data_classes = (uint32_t)cl;
  }
  o->grad_limit = o_grad_limit;
  o->clip_norm = o_clip_norm;
  if (!(o_grad_norm_factor == 0 || (o_grad_norm_factor > 1 && o_grad_norm_factor <= 1e30))) {
    snprintf(err, errlen, "--grad-norm-factor must be 0 (off) or in (1, 1e30]");
    return -EINVAL;
  }
  o->grad_norm_factor = o_grad_norm_factor;
  if (pst_enc_parse_push(o_push_compress, &o->push_enc, &o->topk_fraction) < 0) {
    snprintf(err, errlen, "--push-compress: '%.200s' is not %s", o_push_compress,
             pst_enc_push_choices());
    return -EINVAL;
  }
  if (!(o_topk_warmup >= 0 && o_topk_warmup <= 1e6)) {
    snprintf(err, errlen, "--topk-warmup must be between 0 and 1e6 epochs");
    return -EINVAL;
  }
  if (o_topk_warmup > 0 && o->push_enc != PST_ENC_TOPK) {
    snprintf(err, errlen, "--topk-warmup needs --push-compress topk:FRACTION");
    return -EINVAL;
  }
  o->topk_warmup = o_topk_warmup;
  if (pst_enc_parse(o_pull_compress, &o->pull_enc) < 0) {
    snprintf(err, errlen, "--pull-compress: '%.200s' is not %s", o_pull_compress, pst_enc_choices());
    return -EINVAL;
  }
  if (!(o_status_interval >= 0 && o_status_interval <= 86400)) {
    snprintf(err, errlen, "--status-interval must be between 0 and 86400 seconds");
    return -EINVAL;
  }
  if (!(o_hello_timeout >= 0.1 && o_hello_timeout <= 3600)) {
    snprintf(err, errlen, "--hello-timeout must be between 0.1 and 3600 seconds");
    return -EINVAL;
  }
  if (!(o_worker_timeout >= 0.2 && o_worker_timeout <= 86400)) {
    snprintf(err, errlen, "--worker-timeout must be between 0.2 and 86400 seconds");
    return -EINVAL;
  }
  if (!(o_eval_timeout >= 0 && o_eval_timeout <= 86400)) {
    snprintf(err, errlen, "--eval-timeout must be between 0 and 86400 seconds");
    return -EINVAL;
  }
  o->eval_timeout = o_eval_timeout;
  if (!(o_rejoin_timeout >= 0 && o_rejoin_timeout <= 604800)) {
    snprintf(err, errlen, "--rejoin-timeout must be between 0 and 604800 seconds");
    return -EINVAL;
  }
  if (!(o_ckpt_seconds >= 0 && o_ckpt_seconds <= 604800)) {
    snprintf(err, errlen, "--checkpoint-seconds must be between 0 and 604800");
    return -EINVAL;
  }
  if (!(o_step_factor == 0 || (o_step_factor >= 2 && o_step_factor <= 1e6))) {
    snprintf(err, errlen, "--step-factor must be 0 (off) or between 2 and 1000000");
    return -EINVAL;
  }
  if (!(o_step_timeout >= 0 && o_step_timeout <= 604800)) {
    snprintf(err, errlen, "--step-timeout must be between 0 and 604800 seconds");
    return -EINVAL;
  }
  if (strcmp(o_on_loss, "continue") != 0 && strcmp(o_on_loss, "wait") != 0) {
    snprintf(err, errlen, "--on-worker-loss: '%.200s' is not continue or wait", o_on_loss);
    return -EINVAL;
  }
  if (strcmp(o_on_finish, "exit") != 0 && strcmp(o_on_finish, "wait") != 0) {
    snprintf(err, errlen, "--on-finish: '%.200s' is not exit or wait", o_on_finish);
    return -EINVAL;
  }
  if (!o_resume[0]) {
    snprintf(err, errlen, "--resume: give auto, never or a checkpoint file");
    return -EINVAL;
  }
  o->opt.lr = (float)o_lr;
  o->opt.momentum = (float)o_momentum;
  o->opt.beta1 = (float)o_beta1;
  o->opt.beta2 = (float)o_beta2;
  o->opt.eps = (float)o_eps;
  o->opt.weight_decay = (float)o_wd;
  /* Momentum correction: applied by the ps to sums of top-k pushes, momentum would act on
   * each value only in the steps it is sent, as a burst of the steps it waited (Lin et al.,
   * Deep Gradient Compression, 2018, section 3.2); each worker applies it to its own
   * gradients before selecting instead, and the ps's step is then plain SGD. */
  o->topk_momentum = 0;
  if (o->push_enc == PST_ENC_TOPK && o->opt.kind == PST_OPT_MOMENTUM && o_topk_correction) {
    o->topk_momentum = o->opt.momentum;
    o->opt.momentum = 0;
  }
  /* --workers N or MIN:MAX (docs/modes.md, elastic jobs). */
  int64_t lo = 0, hi = 0;
  const char *colon = strchr(o_workers, ':');
  /* Each part a whole integer: sscanf's %ld read "2x" as 2 and "1e300" as 1. */
  if (colon ? pst_parse_int_n(o_workers, (size_t)(colon - o_workers), 1, 4096, &lo) < 0 ||
                  pst_parse_int(colon + 1, 1, 4096, &hi) < 0
            : pst_parse_int(o_workers, 1, 4096, &lo) < 0)
    lo = 0;
  else if (!colon)
    hi = lo;
  if (lo < 1 || hi < lo || hi > 4096) {
    snprintf(err, errlen, "--workers: '%.200s' is not N or MIN:MAX with 1 <= MIN <= MAX <= 4096",
             o_workers);
    return -EINVAL;
  }
  o->workers = (int)hi;
  o->workers_min = (int)lo;
  if (strcmp(o_data_order, "auto") != 0 && strcmp(o_data_order, "ps") != 0 &&
      strcmp(o_data_order, "shards") != 0) {
    snprintf(err, errlen, "--data-order: '%.200s' is not shards, ps or auto", o_data_order);
    return -EINVAL;
  }
  o->data_handout = !strcmp(o_data_order, "ps") || (!strcmp(o_data_order, "auto") && lo < hi);
  if (lo < hi && !o->data_handout) {
    snprintf(err, errlen, "--workers %.60s: workers that come and go need the ps to hand out "
                          "the data (--data-order ps), not fixed shards", o_workers);
    return -EINVAL;
  }
  if (o->data_handout) {
    /* Each epoch's evaluation by the ps: the workers' test slices follow their indices, which
     * come and go. Dense evaluations are split the same way, and backup workers, waiting for a
     * lost worker and checkpoints need the slots' fixed shards (issue 28 leaves them out). */
    const char *no = o_backup > 0 ? "--backup-workers"
                     : o_eval_every > 0 ? "--eval-every"
                     : !strcmp(o_on_loss, "wait") ? "--on-worker-loss wait"
                     : o->shard_count > 1 ? "--shard I/K with K > 1"
                     : NULL;
    if (no) {
      snprintf(err, errlen, "%s: not with the data handed out by the ps (--data-order ps, or "
                            "--workers MIN:MAX)", no);
      return -EINVAL;
    }
    snprintf(o_eval_on, sizeof o_eval_on, "ps");
  }
  o->staleness = (int)o_staleness;
  o->backup_workers = (int)o_backup;
  if (strcmp(o_lr_scaling, "none") != 0 && strcmp(o_lr_scaling, "linear") != 0) {
    snprintf(err, errlen, "--lr-scaling: '%.200s' is not none or linear", o_lr_scaling);
    return -EINVAL;
  }
  o->lr_linear = !strcmp(o_lr_scaling, "linear");
  if (o->lr_linear && (!o->data_handout || o->mode != PST_MODE_SYNC)) {
    snprintf(err, errlen, "--lr-scaling linear needs --mode sync and workers that come and go "
                          "(--workers MIN:MAX, or --data-order ps): with a fixed set the "
                          "batch never changes");
    return -EINVAL;
  }
  if (pst_lr_schedule_parse(o_lr_schedule, &o->lr_schedule) < 0) {
    snprintf(err, errlen, "--lr-schedule: '%.200s' is not constant or cosine", o_lr_schedule);
    return -EINVAL;
  }
  if (o->lr_schedule == PST_LR_COSINE && o->data_handout) {
    snprintf(err, errlen, "--lr-schedule cosine: not with the data handed out by the ps "
                          "(--workers MIN:MAX, or --data-order ps): its steps are not known ahead");
    return -EINVAL;
  }
  o->staleness_lr = o_staleness_lr;
  if (o_staleness_lr && o->mode == PST_MODE_SYNC) {
    snprintf(err, errlen, "--staleness-lr needs --mode async or ssp (sync gradients are never stale)");
    return -EINVAL;
  }
  if (o_backup > 0 && (o->mode != PST_MODE_SYNC || o_backup >= hi)) {
    snprintf(err, errlen, "--backup-workers K needs --mode sync and K < --workers");
    return -EINVAL;
  }
  o->epochs = (int)o_epochs;
  o->batch_size = (int)o_batch;
  o->seed = (uint64_t)o_seed;
  o->chunk_floats = (uint32_t)(o_chunk_kib * 1024 / 4);
  o->layer_chunks = o_layer_chunks;
  /* One by default: helper threads pay off only on cores nobody else needs. Where the ps
   * shares its cores with workers (one machine, the tests), 2 threads on 2 cores cost async
   * mlp runs 10-25% of their speed (docs/benchmarks.md); a dedicated ps host asks for 0. */
  o->threads = o_threads > 0 ? (int)o_threads : pst_proc_cores();
  o->io_min = (uint32_t)(o_io_kib * 1024);
  o->shm = o_shm != 0;
  o->report_every = (int)o_report_every;
  o->eval_every = (int)o_eval_every;
  o->eval_samples = (int)o_eval_samples;
  o->status_interval = o_status_interval;
  o->model_name = o_model;
  o->metrics_path = o_metrics;
  o->summary_path = o_summary;
  o->hello_timeout = o_hello_timeout;
  o->max_connections = (int)o_max_conns;
  o->worker_timeout = o_worker_timeout;
  o->rejoin_timeout = o_rejoin_timeout;
  o->wait_on_loss = !strcmp(o_on_loss, "wait");
  o->step_factor = o_step_factor;
  o->step_timeout = o_step_timeout;
  o->checkpoint_dir = o_ckpt_dir;
  o->checkpoint_every = (uint64_t)o_ckpt_every;
  o->checkpoint_seconds = o_ckpt_seconds;
  o->checkpoint_keep = (int)o_ckpt_keep;
  o->resume = o_resume;
  return 0;
}

int main(int argc, char **argv) {
  char err[512];
  pst_cfg cfg = {
      .prog = "pstrain-ps",
      .section = "ps",
      .default_file = "/etc/pstrain/ps.conf",
      .env_prefix = "PSTRAIN_PS_",
      .usage_extra = "The ps holds the weights, applies the optimizer and serves pulls and pushes.\n"
                     "It exits by itself when every worker has finished its epochs.\n",
      .opts = g_opts,
      .n_opts = (int)(sizeof g_opts / sizeof g_opts[0]),
  };
  pst_log_init("pstrain-ps", PST_LOG_INFO);
  pst_log_guard_signals();
  /* The optimizer's state decays into denormals, which cost ~100x on Intel CPUs: they are
   * flushed to zero (common/fpenv.h), so a step's cost never depends on the values. */
  if (pst_fp_flush_denormals() < 0)
    LOG_WARN("this CPU's denormals are not flushed to zero; optimizer steps may slow down");

  /* 1. Configuration, then the model spec, whose optimizer line fills in what the
   * configuration left at its defaults (so --print-config shows those values too). */
  ps_options opt;
  static pst_model model;
  if (pst_cfg_load(&cfg, argc, argv, err, sizeof err) < 0 ||
      (!cfg.help && (pst_cluster_configure(&cfg, PST_ROLE_PS, err, sizeof err) < 0 ||
                     pst_model_configure(&cfg, o_model, &model, err, sizeof err) < 0)) ||
      build_options(&opt, err, sizeof err) < 0) {
    LOG_ERR("%s", err);
    return PST_EXIT_USAGE;
  }
  if (cfg.help) return 0;
  int level = pst_log_level_parse(o_log_level);
  if (level < 0) {
    LOG_ERR("--log-level: '%.200s' is not error, warning, info or debug", o_log_level);
    return 2;
  }
  pst_log_init("pstrain-ps", level);
  if (cfg.print_config) {
    pst_cfg_print(&cfg, stdout);
    return 0;
  }

  /* The cluster secret and the TLS files, read and checked before any work: a bad one is a
   * configuration error (exit 2) in one line naming the file. */
  static pst_secret secret;
  if (pst_secret_load(o_secret_file, &secret, err, sizeof err) < 0) {
    LOG_ERR("%s", err);
    return PST_EXIT_USAGE;
  }
  char tls_desc[512];
  if (pst_tls_config_load(PST_TLS_SERVER, &o_tls, &opt.tls, tls_desc, sizeof tls_desc, err,
                          sizeof err) < 0) {
    LOG_ERR("%s", err);
    return PST_EXIT_USAGE;
  }

  /* Everything the run will write, checked before any work: a place that does not exist or
   * takes no file is a configuration error now, not a failure once the job has trained. */
  if ((o_summary[0] && pst_check_output_file("--summary-json", o_summary, err, sizeof err) < 0) ||
      (o_metrics[0] && pst_check_output_file("--metrics", o_metrics, err, sizeof err) < 0) ||
      (o_tensorboard[0] &&
       pst_check_output_dir("--tensorboard", o_tensorboard, 1, err, sizeof err) < 0) ||
      (o_ckpt_dir[0] && pst_check_output_dir("--checkpoint-dir", o_ckpt_dir, 1, err, sizeof err) < 0)) {
    LOG_ERR("%s", err);
    pst_tls_ctx_free(opt.tls);
    return PST_EXIT_USAGE;
  }
  char tl_name[32];
  snprintf(tl_name, sizeof tl_name, "ps shard %d", opt.shard_index);
  if (o_timeline[0] && pst_tl_open(o_timeline, tl_name, (uint64_t)o_tl_skip,
                                   (uint64_t)o_tl_steps, err, sizeof err) < 0) {
    LOG_ERR("--timeline: %s", err);
    pst_tls_ctx_free(opt.tls);
    return PST_EXIT_USAGE;
  }
  pst_tl_thread("loop"); /* this thread runs the loop */

  /* This shard's part of the weights (kernels/partition.h), and its own checkpoint
   * directory: shards write their checkpoints at different moments, and a shard must never
   * resume from another's slice. */
  if (pst_partition_range(model.n_params, opt.shard_count, opt.shard_index, &opt.shard_offset,
                          &opt.shard_floats) < 0) {
    LOG_ERR("--shard %s: the model's %zu parameters are too few to split %d ways", o_shard,
            model.n_params, opt.shard_count);
    pst_tls_ctx_free(opt.tls);
    return PST_EXIT_USAGE;
  }
  /* --eval-on ps: the ps loads the data and evaluates every epoch itself; the workers must
   * then have exactly that data (its facts are the ps's), and the whole model must be here. */
  static ps_evaluator *evaluator;
  static ps_eval_hook eval_hook;
  if (!strcmp(o_eval_on, "ps")) {
    ps_eval_config ec = {.data_dir = o_data, .batch = opt.batch_size, .seed = opt.seed,
                         .threads = opt.threads > 0 ? opt.threads : 1};
    char desc[512] = "";
    if (opt.shard_count > 1) {
      snprintf(err, sizeof err, "--eval-on ps needs the whole model: not with --shard %.64s", o_shard);
    } else if (pst_data_flags_parse(&o_dataf, &ec.image, err, sizeof err) == 0) {
      /* The forward passes use OpenBLAS: its kernels, as a worker chooses them. */
      char blas_note[320];
      if (pst_blas_choose(blas_note, sizeof blas_note) == PST_BLAS_REEXEC) {
        LOG_INFO("%s", blas_note);
        execv("/proc/self/exe", argv);
      }
      if (ps_eval_open(&ec, &model, &evaluator, desc, sizeof desc, err, sizeof err) == 0)
        err[0] = '\0';
    }
    if (!evaluator) {
      LOG_ERR("%s", err);
      pst_tls_ctx_free(opt.tls);
      return PST_EXIT_USAGE;
    }
    ps_eval_bind(evaluator, &eval_hook);
    opt.evaluator = &eval_hook;
    ps_eval_data_facts(evaluator, &opt.data_train, &opt.data_test, &opt.data_classes);
    LOG_INFO("--eval-on ps: the ps evaluates every epoch itself on %s", desc);
  }
  static char shard_ckpt_dir[PST_CFG_STR_MAX + 32];
  if (opt.shard_count > 1 && o_ckpt_dir[0]) {
    pst_ckpt_shard_dir(o_ckpt_dir, opt.shard_index, opt.shard_count, shard_ckpt_dir,
                       sizeof shard_ckpt_dir);
    opt.checkpoint_dir = shard_ckpt_dir;
  }

  /* 2. The model's initial weights: the whole vector from the seed, as without shards, so
   * that every shard's slice is the one an unsharded run starts from. */
  float *init = malloc(model.n_params * sizeof(float));
  if (!init) {
    LOG_ERR("cannot allocate %zu parameters", model.n_params);
    pst_tls_ctx_free(opt.tls);
    return 1;
  }
  pst_model_init_params(&model, opt.seed, init);
  pst_model_summary(&model, stdout);
  fflush(stdout);

  /* 3. Listen (on a host name's address, resolved once here). */
  char ip[64];
  if (pst_resolve_listen(opt.listen_host, ip, sizeof ip, err, sizeof err) < 0) {
    LOG_ERR("%s", err);
    free(init);
    pst_tls_ctx_free(opt.tls);
    return 2;
  }
  snprintf(opt.listen_host, sizeof opt.listen_host, "%s", ip);

  /* 4. Who may connect: the cluster secret and/or mutual TLS, one of them required off the
   * loopback interface (redis's protected mode), and enough descriptors for
   * --max-connections. Mutual TLS authenticates every peer (a certificate signed by the
   * cluster's CA), so it meets that rule by itself; the secret's handshake, when given too,
   * runs inside TLS unchanged. */
  int loopback = !strncmp(ip, "127.", 4) || !strcmp(ip, "::1");
  if (!secret.set && !opt.tls && !loopback && !o_insecure) {
    LOG_ERR("--listen %s:%d is reachable from other hosts, and there is neither a cluster secret "
            "nor TLS: give a secret (--secret-file, or systemd's LoadCredential=%s) or mutual "
            "TLS (--tls-cert, --tls-key, --tls-ca), or --insecure to let anyone who reaches the "
            "port read and change the weights", ip, opt.listen_port, PST_AUTH_CREDENTIAL);
    free(init);
    return PST_EXIT_USAGE;
  }
  if (opt.tls) LOG_INFO("connections use mutual TLS 1.3: %s", tls_desc);
  if (secret.set) LOG_INFO("connections authenticate with the cluster secret from %s", secret.source);
  else if (!opt.tls && !loopback) LOG_WARN("--insecure: anyone who reaches %s:%d can train this model", ip, opt.listen_port);
  opt.secret = &secret;
  struct rlimit nofile;
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    rlim_t was = nofile.rlim_cur;
    nofile.rlim_cur = nofile.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &nofile) == 0)
      LOG_DEBUG("descriptor limit raised from %llu to %llu", (unsigned long long)was,
                (unsigned long long)nofile.rlim_max);
  }
  /* Descriptors the ps needs besides its connections: the standard ones, the listeners, the
   * loop's own, the I/O threads' wake-ups, checkpoint and metrics files, libuv's spare for a
   * full table. The connections get what is left: past it an accept fails,
   * and the worker would see its connection refused, not a ps that said why. */
  const rlim_t reserve = 64 + (rlim_t)opt.threads;
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY &&
      nofile.rlim_cur < (rlim_t)opt.max_connections + reserve) {
    int fit = nofile.rlim_cur > reserve + 8 ? (int)(nofile.rlim_cur - reserve) : 8;
    LOG_WARN("only %llu descriptors (ulimit -n): --max-connections lowered from %d to %d",
             (unsigned long long)nofile.rlim_cur, opt.max_connections, fit);
    opt.max_connections = fit;
  }
  uv_loop_t loop;
  uv_loop_init(&loop);
  static ps_server srv;
  /* /metrics on its own port, served from this loop (ps/obs/obs.h); opened first, so that a
   * port in use is a configuration error before any training state exists. */
  static pst_metrics_port obs;
  int rc = pst_metrics_port_start(&obs, &loop, o_metrics_listen, ps_obs_render, &srv, err,
                                  sizeof err);
  obs.other = ps_dashboard_handle; /* `/` and /status.json (ps/obs/dashboard.h) */
  obs.other_arg = &srv;
  /* TensorBoard scalars, written by the metrics (ps/obs/tensorboard.h). */
  static pst_tb tb;
  if (rc == 0 && o_tensorboard[0]) rc = pst_tb_open(&tb, o_tensorboard, err, sizeof err);
  if (rc == 0) rc = ps_server_start(&srv, &loop, &opt, &model, init + opt.shard_offset, err, sizeof err);
  srv.obs.metrics.tb = tb.file ? &tb : NULL;
  srv.obs.metrics.lr = pst_prom_float(opt.opt.lr);
  free(init);
  if (rc == -EALREADY) { /* resumed a finished job: done, not failed */
    LOG_INFO("%s", err);
    pst_notify_status("finished: %s", err);
    pst_metrics_port_close(&obs);
    pst_tb_close(&tb);
    uv_run(&loop, UV_RUN_NOWAIT);
    ps_server_free(&srv);
    ps_eval_free(evaluator);
    pst_tls_ctx_free(opt.tls);
    uv_loop_close(&loop);
    return strcmp(o_on_finish, "wait") == 0 ? ps_linger(o_metrics_listen, err) : PST_EXIT_OK;
  }
  if (rc < 0) {
    LOG_ERR("%s", err);
    pst_metrics_port_close(&obs);
    pst_tb_close(&tb);
    uv_run(&loop, UV_RUN_NOWAIT);
    ps_server_free(&srv);
    ps_eval_free(evaluator);
    pst_tls_ctx_free(opt.tls);
    uv_loop_close(&loop);
    return 1;
  }
  char io_line[96] = "";
  if (opt.threads > 1 && opt.io_min > 0)
    snprintf(io_line, sizeof io_line, " (%d I/O threads for payloads from %u KiB)",
             opt.threads - 1, opt.io_min / 1024);
  LOG_INFO("listening on %s:%d; model %s (%zu parameters, fingerprint %016" PRIx64
           "); %s mode, %d workers, %s lr %g, batch %d x %d, %d epochs, %d thread%s%s",
           opt.listen_host, opt.listen_port, o_model, model.n_params, model.fingerprint,
           o_mode, opt.workers, o_optimizer, o_lr, opt.workers, opt.batch_size, opt.epochs,
           opt.threads, opt.threads == 1 ? "" : "s", io_line);
  if (opt.shard_count > 1) {
    char parts[1024];
    pst_partition_describe(&model, opt.shard_offset, opt.shard_floats, parts, sizeof parts);
    LOG_INFO("shard %d/%d: parameters [%zu, %zu) of %zu: %s", opt.shard_index, opt.shard_count,
             opt.shard_offset, opt.shard_offset + opt.shard_floats, model.n_params, parts);
  }
  /* Under systemd: ready once listening, then status and watchdog pings from this loop. */
  static pst_heartbeat hb;
  pst_heartbeat_start(&hb, &loop, ps_obs_heartbeat_line, &srv);
  pst_notify_status("listening on %s:%d, waiting for %d workers", opt.listen_host, opt.listen_port,
                    opt.workers);
  pst_notify_ready();

  /* 5. Serve until training is over or a signal stops us. */
  static pst_keep_awake awake;
  if (o_keep_awake) {
    pst_keep_awake_start(&awake, NULL, err, sizeof err);
    LOG_INFO("%s", err);
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  pst_keep_awake_stop(&awake);

  /* 6. Shut down: the server's handles are closed by now; the heartbeat's timers (which
   * never keep the loop alive) close next, and then the loop must close cleanly. */
  pst_heartbeat_close(&hb);
  pst_metrics_port_close(&obs);
  uv_run(&loop, UV_RUN_DEFAULT);
  pst_tb_close(&tb);
  if (pst_tl_opened()) { /* the helpers are idle: nothing records any more */
    if (pst_tl_write(err, sizeof err) < 0) LOG_ERR("%s", err);
    else LOG_INFO("timeline written to %s", o_timeline);
  }
  int exit_code = ps_server_exit_code(&srv);
  char rollback[sizeof srv.life.rollback_path];
  snprintf(rollback, sizeof rollback, "%s", srv.life.rollback_path);
  uint64_t rollback_version = srv.life.rollback_version;
  ps_server_free(&srv);
  ps_eval_free(evaluator); /* the loop has ended: no evaluation runs */
  pst_tls_ctx_free(opt.tls); /* after every connection made from it is gone */
  rc = uv_loop_close(&loop);
  if (rc != 0) {
    LOG_ERR("event loop did not close cleanly: %s", uv_strerror(rc));
    return PST_EXIT_FAILED;
  }

  /* 7. Going back to an older version (another shard resumed from it): this process starts
   * again from its own checkpoint of it, with the same flags and --resume FILE last (the last
   * of a flag wins), after setting aside the newer checkpoints of the timeline it leaves. */
  if (rollback[0]) {
    int n = pst_ckpt_abandon_after(opt.checkpoint_dir, rollback_version);
    if (n > 0) LOG_INFO("%d newer checkpoint%s set aside as *.abandoned", n, n == 1 ? "" : "s");
    static char resume_arg[sizeof rollback + 16];
    snprintf(resume_arg, sizeof resume_arg, "--resume=%s", rollback);
    char **args = calloc((size_t)argc + 2, sizeof *args);
    if (!args) return PST_EXIT_FAILED;
    for (int i = 0; i < argc; i++) args[i] = argv[i];
    args[argc] = resume_arg;
    LOG_INFO("starting again from %s", rollback);
    fflush(stdout);
    execv("/proc/self/exe", args);
    LOG_ERR("cannot start again from %s: %s", rollback, strerror(errno));
    free(args);
    return PST_EXIT_FAILED;
  }
  if (exit_code == PST_EXIT_OK && strcmp(o_on_finish, "wait") == 0)
    return ps_linger(o_metrics_listen, "training complete");
  LOG_INFO("exiting with status %d (%s)", exit_code,
           exit_code == PST_EXIT_OK        ? "training finished"
           : exit_code == PST_EXIT_STOPPED ? "stopped on request before training finished"
           : exit_code == PST_EXIT_CHECKPOINT ? "the final checkpoint was not written"
           : exit_code == PST_EXIT_INCOMPLETE ? "training ended with data never trained"
                                              : "training aborted");
  return exit_code;
}
