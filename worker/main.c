/* pstrain-worker: pulls weights, computes gradients on its shard, pushes them back.
 *
 * The story: read the configuration (defaults < /etc/pstrain/worker.conf <
 * PSTRAIN_WORKER_* < flags), answer --list-devices if asked, then start the trainer on an
 * event loop (it connects, registers, trains every epoch and exits when the ps says so),
 * and on the way out close every handle and check the loop is empty. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "common/cluster.h"
#include "common/config.h"
#include "common/fpenv.h"
#include "common/http.h"
#include "common/k8s.h"
#include "common/log.h"
#include "common/notify.h"
#include "common/tls_config.h"
#include "kernels/blas_setup.h"
#include "kernels/device.h"
#include "kernels/pipeline/flags.h"
#include "common/timeline.h"
#include "data/dataset.h"
#include "worker/trainer.h"
#include "worker/status.h"

static char o_ps[PST_CFG_STR_MAX], o_name[PST_CFG_STR_MAX], o_data[PST_CFG_STR_MAX];
static char o_device[PST_CFG_STR_MAX], o_model[PST_CFG_STR_MAX], o_log_level[PST_CFG_STR_MAX];
static char o_tf_config[PST_CFG_STR_MAX], o_instance[PST_CFG_STR_MAX], o_k8s_ps[PST_CFG_STR_MAX];
static char o_secret_file[PST_CFG_STR_MAX], o_tls_name[PST_CFG_STR_MAX];
static char o_metrics_listen[PST_CFG_STR_MAX], o_timeline[PST_CFG_STR_MAX];
static pst_tls_files o_tls;
static pst_data_flags o_dataf;
static int64_t o_threads, o_index, o_gpu_mem, o_k8s_replicas, o_leave_after;
static int64_t o_stages, o_micro, o_vdev, o_device_mem;
static char o_place[PST_CFG_STR_MAX];
static int64_t o_tl_steps, o_tl_skip;
static double o_timeout, o_slow, o_reconnect, o_delay;
static int o_list, o_placement, o_push_by_layer, o_pull_by_layer, o_layer_pieces, o_keep_awake, o_shm;
static char o_mode[PST_CFG_STR_MAX];

static pst_cfg_opt g_opts[] = {
    PST_OPT("mode", PST_CFG_STRING, o_mode, "ps", "ps (train with a pstrain-ps, the default) or allreduce (no ps: a rank of an mpirun job; --mode allreduce --help lists its flags)", 0, 0),
    PST_OPT("ps", PST_CFG_STRING, o_ps, "127.0.0.1:7070", "address:port of the ps (names resolve); several ps shards: all of them, in order, comma-separated", 0, 0),
    PST_OPT("name", PST_CFG_STRING, o_name, "", "worker name in logs (default: host-pid)", 0, 0),
    PST_OPT("index", PST_CFG_INT, &o_index, "-1", "worker index to ask for (-1: any)", -1, 4095),
    PST_OPT("data-dir", PST_CFG_STRING, o_data, PST_DATA_DEFAULT_DIR, "directory of the data: IDX files, CIFAR-10/100 binary files or an image folder", 0, 0),
    PST_DATA_OPTS(o_dataf),
    PST_OPT("model", PST_CFG_STRING, o_model, "", "model the worker expects (checked against the ps's)", 0, 0),
    PST_OPT("device", PST_CFG_STRING, o_device, "auto", "auto, cpu, cuda, cuda:N, or null (no compute: a fixed gradient, the ceiling any device can reach; null:RATE paces each step like a device training RATE samples a second)", 0, 0),
    PST_OPT("threads", PST_CFG_INT, &o_threads, "1", "CPU backend threads", 1, 256),
    PST_OPT("gpu-memory-limit", PST_CFG_INT, &o_gpu_mem, "0", "GPU memory cap in MiB (0: none)", 0, 1 << 24),
    PST_OPT("stages", PST_CFG_INT, &o_stages, "1", "split the model's layers into N contiguous stages, each on a device of its own, balanced by measured per-layer time within --device-mem (kernels/pipeline)", 1, 16),
    PST_OPT("place", PST_CFG_STRING, o_place, "", "the stages by hand: LAYERS=DEVICE,... e.g. 1-4=cpu:0,5-9=cpu:1 (layers as --log-placement numbers them; contiguous, in order)", 0, 0),
    PST_OPT("micro-batches", PST_CFG_INT, &o_micro, "1", "cut each batch into M micro-batches pipelined through the stages (GPipe); the gradient is summed over them", 1, 65536),
    PST_OPT("virtual-devices", PST_CFG_INT, &o_vdev, "0", "split the CPU into V devices cpu:0 .. cpu:V-1, each stage's thread on its own cores, or with --device cuda:N the GPU into cuda:N.0 .. cuda:N.V-1, each its own backend with a V-th of --gpu-memory-limit (0: none)", 0, 256),
    PST_OPT("device-mem", PST_CFG_INT, &o_device_mem, "0", "each device's memory cap in MiB for the model's weights, gradients, activations and workspace (0: none); a model over it is refused at start with the --stages that fit", 0, 1 << 24),
    PST_OPT("log-placement", PST_CFG_BOOL, &o_placement, "false", "log each layer's stage, device and algorithm", 0, 0),
    PST_OPT("list-devices", PST_CFG_BOOL, &o_list, "false", "list the compute devices and exit", 0, 0),
    PST_OPT("secret-file", PST_CFG_STRING, o_secret_file, "", "cluster secret (default: systemd credential pstrain-secret)", 0, 0),
    PST_TLS_OPTS(o_tls),
    PST_OPT("tls-name", PST_CFG_STRING, o_tls_name, "", "mutual TLS: the name (DNS or IP) the ps's certificate must carry (default: any the CA signed)", 0, 0),
    PST_OPT("connect-timeout", PST_CFG_DOUBLE, &o_timeout, "30", "seconds to keep retrying the ps", 0, 0),
    PST_OPT("reconnect-timeout", PST_CFG_DOUBLE, &o_reconnect, "300", "seconds to keep reconnecting to a lost ps (0: exit at once)", 0, 0),
    PST_OPT("metrics-listen", PST_CFG_STRING, o_metrics_listen, "", "serve Prometheus /metrics on ADDR:PORT (a bare PORT: 127.0.0.1; empty: off)", 0, 0),
    PST_OPT("push-by-layer", PST_CFG_BOOL, &o_push_by_layer, "", "send each layer's gradient as the backward pass makes it, last layer first (default: on for GPU and null devices, off for the CPU)", 0, 0),
    PST_OPT("pull-by-layer", PST_CFG_BOOL, &o_pull_by_layer, "", "start each training step while its weights arrive, each layer's forward pass once its weights are in (default: on for GPU and null devices, off for the CPU)", 0, 0),
    PST_OPT("layer-pieces", PST_CFG_BOOL, &o_layer_pieces, "", "run each dense layer larger than the ps's chunk in pieces of rows, one per chunk, so that its gradient leaves piece by piece and its forward pass starts on its first weights back (default: on for GPU and null devices that push or pull layer by layer, off for the CPU)", 0, 0),
    PST_OPT("keep-awake", PST_CFG_BOOL, &o_keep_awake, "", "keep the CPUs out of their sleep states while training, so that the step's hand-offs between threads and the chunks' arrivals do not wait for a CPU to wake: a PM QoS request on /dev/cpu_dma_latency where it may write it, else a spinning thread per CPU at the lowest priority (SCHED_IDLE; never under a cgroup CPU quota). The CPUs draw more power (default: on for GPU and null devices, off for the CPU)", 0, 0),
    PST_OPT("shm", PST_CFG_BOOL, &o_shm, "true", "with a ps on this host under the same user: the payloads through shared memory instead of TCP, a sealed memfd each way that each end maps (proto/ring.h); a ps elsewhere, and TLS, keep to TCP by themselves", 0, 0),
    PST_OPT("slow-factor", PST_CFG_DOUBLE, &o_slow, "1", "run this many times slower (experiments)", 0, 0),
    PST_OPT("leave-after-step", PST_CFG_INT, &o_leave_after, "0", "leave the job after this many steps, as on SIGTERM: say goodbye, exit 0 (0: never; the ps must hand out the data, --workers MIN:MAX or --data-order ps)", 0, INT64_MAX),
    PST_OPT("delay-ms", PST_CFG_DOUBLE, &o_delay, "0", "delay each pull and push this long, as a slow link would (experiments)", 0, 0),
    PST_OPT("timeline", PST_CFG_STRING, o_timeline, "", "write this worker's timeline to FILE: Chrome trace-event JSON (Perfetto, chrome://tracing) of each step's layers, chunks and hand-offs (empty: off)", 0, 0),
    PST_OPT("timeline-steps", PST_CFG_INT, &o_tl_steps, "50", "steps the timeline keeps", 1, 1000000),
    PST_OPT("timeline-skip", PST_CFG_INT, &o_tl_skip, "5", "steps the timeline skips first (the warm-up)", 0, INT64_MAX),
    PST_OPT("log-level", PST_CFG_STRING, o_log_level, "info", "error, warning, info or debug", 0, 0),
    PST_OPT("tf-config", PST_CFG_STRING, o_tf_config, "", "TF_CONFIG cluster spec, JSON or @FILE (default: env TF_CONFIG)", 0, 0),
    PST_K8S_OPTS(o_k8s_ps, o_k8s_replicas),
    PST_OPT("instance", PST_CFG_STRING, o_instance, "", "systemd instance: N means --device cuda:N, cpuN --device cpu", 0, 0),
};

/* The systemd template's instance (pstrain-worker@0, pstrain-worker@cpu1) picks the device
 * and names the worker host-INSTANCE; like TF_CONFIG it only fills options left at their
 * defaults, so --device or a device key in the config file still win. */
static int apply_instance(pst_cfg *cfg, char *err, size_t errlen) {
  const char *i = o_instance;
  if (!i[0]) return 0;
  size_t digits = strspn(i, "0123456789");
  int gpu = digits > 0 && i[digits] == '\0' && digits < 6;
  int cpu = !strncmp(i, "cpu", 3) && strlen(i + 3) > 0 &&
            strspn(i + 3, "0123456789") == strlen(i + 3) && strlen(i) < 10;
  if (!gpu && !cpu) {
    snprintf(err, errlen, "--instance: '%.60s' is not a GPU index (0, 1, ...) or cpu0, cpu1, ...",
             i);
    return -EINVAL;
  }
  char device[32], name[PST_CFG_STR_MAX], host[64] = "worker";
  snprintf(device, sizeof device, gpu ? "cuda:%s" : "cpu", i);
  gethostname(host, sizeof host - 1);
  snprintf(name, sizeof name, "%s-%s", host, i);
  if (pst_cfg_set_default(cfg, "device", device, PST_SRC_FLAG, "--instance", err, errlen) < 0 ||
      pst_cfg_set_default(cfg, "name", name, PST_SRC_FLAG, "--instance", err, errlen) < 0)
    return -EINVAL;
  return 0;
}

/* --ps: one host:port, or every ps shard's, in order, comma-separated. */
static int parse_ps_list(const char *text, wk_options *opt, char *err, size_t errlen) {
  char list[PST_CFG_STR_MAX], *save = NULL;
  snprintf(list, sizeof list, "%s", text);
  opt->n_ps = 0;
  for (const char *p = text; *p; p++)
    if (*p == ',' && (p == text || p[1] == ',' || !p[1])) {
      snprintf(err, errlen, "--ps: '%.200s' has an empty entry", text);
      return -EINVAL;
    }
  for (char *a = strtok_r(list, ",", &save); a; a = strtok_r(NULL, ",", &save)) {
    if (opt->n_ps == PST_MAX_SHARDS) {
      snprintf(err, errlen, "--ps: more than %d ps shards", PST_MAX_SHARDS);
      return -EINVAL;
    }
    wk_ps_addr *ps = &opt->ps[opt->n_ps];
    if (pst_parse_hostport(a, ps->host, sizeof ps->host, &ps->port) < 0) {
      snprintf(err, errlen, "--ps: '%.200s' is not host:port", a);
      return -EINVAL;
    }
    for (int i = 0; i < opt->n_ps; i++)
      if (!strcmp(opt->ps[i].host, ps->host) && opt->ps[i].port == ps->port) {
        snprintf(err, errlen, "--ps: %.200s is listed twice", a);
        return -EINVAL;
      }
    opt->n_ps++;
  }
  if (opt->n_ps == 0) {
    snprintf(err, errlen, "--ps: give host:port of the ps");
    return -EINVAL;
  }
  return 0;
}

/* Whether argv or the environment asks for --mode allreduce. */
static int allreduce_wanted(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--mode=allreduce")) return 1;
    if (!strcmp(argv[i], "--mode") && i + 1 < argc) return !strcmp(argv[i + 1], "allreduce");
  }
  const char *env = getenv("PSTRAIN_WORKER_MODE");
  return env && !strcmp(env, "allreduce");
}

/* Runs pstrain-worker-allreduce in this process (the same pid, which mpirun follows) with
 * this command line: PSTRAIN_WORKER_ALLREDUCE_BIN, else beside this program (installed), else
 * in Bazel's layout (bazel-bin/worker/allreduce/). Only that program links Open MPI. */
static int exec_allreduce(char **argv) {
  char exe[PATH_MAX], path[PATH_MAX + 64];
  const char *env = getenv("PSTRAIN_WORKER_ALLREDUCE_BIN");
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = '\0';
  char *slash = strrchr(exe, '/');
  if (slash) *slash = '\0';
  for (int i = 0; i < 3; i++) {
    if (i == 0 && !(env && env[0])) continue;
    if (i == 0) snprintf(path, sizeof path, "%s", env);
    if (i == 1) snprintf(path, sizeof path, "%s/pstrain-worker-allreduce", exe);
    if (i == 2) snprintf(path, sizeof path, "%s/allreduce/pstrain-worker-allreduce", exe);
    if (access(path, X_OK) != 0) continue;
    argv[0] = path;
    execv(path, argv);
    break;
  }
  pst_log_init("pstrain-worker", PST_LOG_INFO);
  LOG_ERR("--mode allreduce runs pstrain-worker-allreduce, which is not beside %s/pstrain-worker "
          "(build //worker/allreduce:pstrain-worker-allreduce, or set "
          "PSTRAIN_WORKER_ALLREDUCE_BIN)", exe);
  return PST_EXIT_USAGE;
}

int main(int argc, char **argv) {
  char err[512];
  pst_cfg cfg = {
      .prog = "pstrain-worker",
      .section = "worker",
      .default_file = "/etc/pstrain/worker.conf",
      .env_prefix = "PSTRAIN_WORKER_",
      .usage_extra = "The worker takes its model, shard, batch size and epochs from the ps.\n",
      .opts = g_opts,
      .n_opts = (int)(sizeof g_opts / sizeof g_opts[0]),
  };
  /* --mode allreduce: no ps, another program (worker/allreduce/allreduce.h). */
  if (allreduce_wanted(argc, argv)) return exec_allreduce(argv);
  pst_log_init("pstrain-worker", PST_LOG_INFO);
  pst_log_guard_signals();

  /* 1. Configuration. */
  wk_options opt;
  memset(&opt, 0, sizeof opt);
  if (pst_cfg_load(&cfg, argc, argv, err, sizeof err) < 0 ||
      (!cfg.help && (apply_instance(&cfg, err, sizeof err) < 0 ||
                     pst_cluster_configure(&cfg, PST_ROLE_WORKER, err, sizeof err) < 0))) {
    LOG_ERR("%s", err);
    return 2;
  }
  if (cfg.help) return 0;
  int level = pst_log_level_parse(o_log_level);
  if (level < 0) {
    LOG_ERR("--log-level: '%.200s' is not error, warning, info or debug", o_log_level);
    return 2;
  }
  if (strcmp(o_mode, "ps") != 0) {
    LOG_ERR("--mode: '%.200s' is not ps or allreduce", o_mode);
    return PST_EXIT_USAGE;
  }
  if (parse_ps_list(o_ps, &opt, err, sizeof err) < 0) {
    LOG_ERR("%s", err);
    return PST_EXIT_USAGE;
  }
  if (!(o_timeout >= 0 && o_timeout <= 604800) || !(o_reconnect >= 0 && o_reconnect <= 604800) ||
      !(o_slow >= 1 && o_slow <= 1000) || !(o_delay >= 0 && o_delay <= 600000)) {
    LOG_ERR("--connect-timeout and --reconnect-timeout must be between 0 and 604800 seconds, "
            "--slow-factor between 1 and 1000, --delay-ms between 0 and 600000");
    return PST_EXIT_USAGE;
  }
  if (pst_data_flags_parse(&o_dataf, &opt.image, err, sizeof err) < 0 ||
      pst_device_check_spec(o_device, err, sizeof err) < 0) {
    LOG_ERR("%s", err);
    return PST_EXIT_USAGE;
  }
  char name[128];
  if (o_name[0]) {
    snprintf(name, sizeof name, "%.100s", o_name);
  } else {
    char host[64] = "worker";
    gethostname(host, sizeof host - 1);
    snprintf(name, sizeof name, "%s-%d", host, (int)getpid());
  }
  /* Log lines name the worker: by its --name, else its --index, else host-pid. */
  char prog[160];
  if (o_name[0] || o_index < 0)
    snprintf(prog, sizeof prog, "pstrain-worker[%.100s]", name);
  else
    snprintf(prog, sizeof prog, "pstrain-worker[%lld]", (long long)o_index);
  pst_log_init(prog, level);
  if (cfg.print_config) {
    pst_cfg_print(&cfg, stdout);
    return 0;
  }
  if (o_list) {
    /* The CPU first, with the kernels a CPU worker would train with: where pstrain picks
     * better ones than OpenBLAS did (kernels/blas_setup.h), this runs itself again, as
     * training does, to list what it would use. */
    char note[320], cpu[768];
    if (pst_blas_choose(note, sizeof note) == PST_BLAS_REEXEC) execv("/proc/self/exe", argv);
    pst_cpu_describe(cpu, sizeof cpu);
    printf("%s\n", cpu);
    return pst_device_list(stdout) < 0 ? 1 : 0;
  }
  /* The timeline's file is made now: a place that cannot be written is a configuration
   * error before anything starts. */
  if (o_timeline[0] &&
      pst_tl_open(o_timeline, name, (uint64_t)o_tl_skip, (uint64_t)o_tl_steps, err, sizeof err) < 0) {
    LOG_ERR("--timeline: %s", err);
    return PST_EXIT_USAGE;
  }
  opt.name = name;
  opt.data_dir = o_data;
  opt.device = o_device;
  opt.threads = (int)o_threads;
  opt.requested_index = (int)o_index;
  opt.model = o_model;
  opt.connect_timeout = o_timeout;
  opt.reconnect_timeout = o_reconnect;
  /* Not given anywhere: the device decides once it is open (worker/register.c). */
  opt.push_by_layer = pst_cfg_find(&cfg, "push-by-layer")->source == PST_SRC_DEFAULT
                          ? WK_LAYERED_AUTO : o_push_by_layer;
  opt.pull_by_layer = pst_cfg_find(&cfg, "pull-by-layer")->source == PST_SRC_DEFAULT
                          ? WK_LAYERED_AUTO : o_pull_by_layer;
  opt.layer_pieces = pst_cfg_find(&cfg, "layer-pieces")->source == PST_SRC_DEFAULT
                         ? WK_LAYERED_AUTO : o_layer_pieces;
  opt.keep_awake = pst_cfg_find(&cfg, "keep-awake")->source == PST_SRC_DEFAULT ? WK_LAYERED_AUTO
                                                                              : o_keep_awake;
  opt.shm = o_shm != 0;
  opt.gpu_memory_limit_mib = (size_t)o_gpu_mem;
  opt.stages = (int)o_stages;
  opt.place = o_place[0] ? o_place : NULL;
  opt.micro_batches = (int)o_micro;
  opt.virtual_devices = (int)o_vdev;
  opt.device_mem_mib = (size_t)o_device_mem;
  {
    /* The stages' flags, checked as far as they can be without the model (which comes from
     * the ps) and the batch size: a bad one is one line and exit 2 before any connection.
     * What needs the model is checked again when the pipeline is made (worker/setup.c). */
    pst_pipe_options po = {.device = o_device, .stages = opt.stages, .place = opt.place,
                           .micro_batches = opt.micro_batches,
                           .virtual_devices = opt.virtual_devices,
                           .gpu_memory_limit_mib = opt.gpu_memory_limit_mib,
                           .device_mem_mib = opt.device_mem_mib};
    if (pst_pipe_check_flags(&po, NULL, 0, err, sizeof err) < 0) {
      LOG_ERR("%s", err);
      return PST_EXIT_USAGE;
    }
  }
  opt.log_placement = o_placement;
  opt.slow_factor = o_slow;
  opt.delay_ms = o_delay;
  opt.leave_after_step = (uint64_t)o_leave_after;
  static pst_secret secret;
  if (pst_secret_load(o_secret_file, &secret, err, sizeof err) < 0) {
    LOG_ERR("%s", err);
    return PST_EXIT_USAGE;
  }
  opt.secret = &secret;
  /* Bad TLS files are configuration errors (exit 2), found here in one line naming the file
   * rather than by the ps refusing every connection. */
  char tls_desc[512];
  if (pst_tls_config_load(PST_TLS_CLIENT, &o_tls, &opt.tls, tls_desc, sizeof tls_desc, err,
                          sizeof err) < 0) {
    LOG_ERR("%s", err);
    return PST_EXIT_USAGE;
  }
  if (o_tls_name[0] && !opt.tls) {
    LOG_ERR("--tls-name needs mutual TLS: give --tls-cert, --tls-key and --tls-ca too");
    return PST_EXIT_USAGE;
  }
  opt.tls_name = o_tls_name[0] ? o_tls_name : NULL;

  /* 2. Floating point before any work, once the configuration is known to be good (a
   * mistyped flag is then one line, whatever the CPU, and the lines below name the worker
   * and follow --log-level). OpenBLAS chose its kernels before main; when this CPU can run
   * better ones, the worker runs itself again with OPENBLAS_CORETYPE set
   * (kernels/blas_setup.h), and reads the same configuration again. Denormals are flushed in
   * every computing thread (common/fpenv.h); the CPU backend also restarts OpenBLAS's
   * threads to inherit that. */
  char blas_note[320];
  int blas = pst_blas_choose(blas_note, sizeof blas_note);
  if (blas == PST_BLAS_REEXEC) {
    LOG_INFO("%s", blas_note);
    execv("/proc/self/exe", argv);
    LOG_WARN("cannot run again with better OpenBLAS kernels (%s); going on with OpenBLAS's own",
             strerror(errno));
  } else {
    pst_log(blas == PST_BLAS_CHOSEN ? PST_LOG_INFO : PST_LOG_DEBUG, "%s", blas_note);
  }
  pst_fp_flush_denormals();
  if (opt.tls)
    LOG_INFO("connecting to the ps with mutual TLS 1.3: %s%s%s", tls_desc,
             opt.tls_name ? "; its certificate must name " : "", opt.tls_name ? opt.tls_name : "");

  /* 3. Set up and run. */
  uv_loop_t loop;
  uv_loop_init(&loop);
  static wk_trainer trainer;
  /* /metrics on its own port, served from this loop (worker/obs.h); opened first, so that a
   * port in use is a configuration error before the data is loaded. */
  static pst_metrics_port obs;
  int rc = pst_metrics_port_start(&obs, &loop, o_metrics_listen, wk_obs_render, &trainer, err,
                                  sizeof err);
  if (rc == 0) rc = wk_trainer_start(&trainer, &loop, &opt, err, sizeof err);
  if (rc < 0) {
    LOG_ERR("%s", err);
    pst_metrics_port_close(&obs);
    uv_run(&loop, UV_RUN_NOWAIT);
    wk_trainer_free(&trainer);
    uv_loop_close(&loop);
    pst_tls_ctx_free(opt.tls);
    return PST_EXIT_FAILED;
  }
  /* Under systemd: watchdog pings and status from this loop (the compute runs on the
   * threadpool, so the loop keeps turning); READY=1 comes once registered. */
  pst_tl_thread("loop"); /* this thread runs the loop */
  static pst_heartbeat hb;
  pst_heartbeat_start(&hb, &loop, wk_obs_status_line, &trainer);
  uv_run(&loop, UV_RUN_DEFAULT);

  /* 4. Shut down: the trainer's handles are closed by now; the heartbeat's next. */
  pst_notify_stopping();
  pst_heartbeat_close(&hb);
  pst_metrics_port_close(&obs);
  uv_run(&loop, UV_RUN_DEFAULT);
  int exit_code = trainer.exit_code;
  /* Before the net goes (its layers' names are the events'); nothing records any more. */
  if (pst_tl_opened()) {
    if (pst_tl_write(err, sizeof err) < 0) LOG_ERR("%s", err);
    else LOG_INFO("timeline written to %s", o_timeline);
  }
  wk_trainer_free(&trainer);
  pst_tls_ctx_free(opt.tls); /* after the connection made from it is gone */
  rc = uv_loop_close(&loop);
  if (rc != 0) {
    LOG_ERR("event loop did not close cleanly: %s", uv_strerror(rc));
    return PST_EXIT_FAILED;
  }
  LOG_INFO("exiting with status %d (%s)", exit_code,
           exit_code == PST_EXIT_OK        ? "finished"
           : exit_code == PST_EXIT_STOPPED ? "stopped before training finished"
           : exit_code == PST_EXIT_USAGE   ? "failed: a configuration error"
                                           : "failed");
  return exit_code;
}
