#include "launcher/run/run.h"

#include "common/clock.h"
#include "common/config.h"
#include "common/proc.h"
#include "common/tls_pki.h"
#include "kernels/partition.h"
#include "launcher/links/link.h"
#include "launcher/common/helpers.h"
#include "launcher/run/run_allreduce.h"
#include "launcher/run/run_args.h"
#include "launcher/run/run_timeline.h"
#include "launcher/run/run_children.h"
#include "launcher/run/run_ctx.h"
#include "launcher/run/run_elastic.h"
#include "launcher/run/run_files.h"
#include "launcher/run/run_place.h"
#include "launcher/run/schedule.h"
#include "ps/state/atomic_file.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>
#include <uv.h>
#include <zlib.h>

#include <cjson/cJSON.h>




/* Samples in the training split, read from the IDX header only. */
static long train_samples(const char *dir) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte.gz", dir);
  gzFile f = gzopen(path, "rb");
  if (!f) {
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte", dir);
    f = gzopen(path, "rb");
  }
  if (!f) return -1;
  unsigned char h[8];
  int n = gzread(f, h, 8);
  gzclose(f);
  if (n != 8) return -1;
  return ((long)h[4] << 24) | (h[5] << 16) | (h[6] << 8) | h[7];
}

/* ---- progress ---- */


/* A number field of a parsed record, or -1. */
static double num(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static void handle_metric(run_ctx *r, const char *line) {
  cJSON *o = cJSON_Parse(line);
  const char *event = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "event"));
  if (!event) {
    cJSON_Delete(o);
    return;
  }
  if (pl_elastic_record(r, event, o)) {
    /* The data handout's records and the workers': launcher/run/run_elastic.c. */
  } else if (!strcmp(event, "train")) {
    long step = (long)num(o, "step");
    if (step > r->steps_seen) r->steps_seen = step;
    r->train_loss = num(o, "loss");
  } else if (!strcmp(event, "eval")) {
    int epoch = (int)num(o, "epoch");
    r->epochs_done = epoch;
    if (!r->o->quiet) {
      if (r->tty) fprintf(stdout, "\r\033[K");
      fprintf(stdout, "%sepoch %d/%d  train loss %.4f  test loss %.4f  test accuracy %.4f  (%.1f s)\n",
              r->o->label ? r->o->label : "", epoch, r->o->epochs, r->train_loss,
              num(o, "loss"), num(o, "accuracy"), pst_now() - r->t0);
      fflush(stdout);
    }
  }
  cJSON_Delete(o);
}

static void read_metrics(run_ctx *r) {
  if (!r->metrics) r->metrics = fopen(r->metrics_path, "r");
  if (!r->metrics) return;
  /* A file kept for a job that may resume (pl_run_local) is cut back to nothing when the ps
   * starts afresh instead: then it is read from its start. */
  struct stat st;
  if (fstat(fileno(r->metrics), &st) == 0 && st.st_size < ftell(r->metrics)) {
    fseek(r->metrics, 0, SEEK_SET);
    r->line_len = 0;
  }
  int ch;
  clearerr(r->metrics);
  while ((ch = fgetc(r->metrics)) != EOF) {
    if (ch == '\n') {
      r->line[r->line_len] = '\0';
      handle_metric(r, r->line);
      r->line_len = 0;
    } else if (r->line_len + 1 < sizeof r->line) {
      r->line[r->line_len++] = (char)ch;
    }
  }
}

static void on_tick(uv_timer_t *t) {
  run_ctx *r = t->data;
  read_metrics(r);
  pl_elastic_tick(r);
  if (r->drain_deadline > 0 && pst_now() > r->drain_deadline) {
    r->drain_deadline = 0;
    pl_stop_all(r, SIGTERM);
  }
  if (r->tty && !r->o->quiet && r->total_steps > 0 && !r->stopping) {
    double frac = (double)r->steps_seen / (double)r->total_steps;
    if (frac > 1) frac = 1;
    int filled = (int)(frac * 30);
    char bar[31];
    for (int i = 0; i < 30; i++) bar[i] = i < filled ? '#' : '.';
    bar[30] = '\0';
    fprintf(stdout, "\r\033[K%s[%s] %3.0f%%  epoch %d/%d  train loss %.4f  %.0f s",
            r->o->label ? r->o->label : "", bar, frac * 100, r->epochs_done + 1 > r->o->epochs
            ? r->o->epochs : r->epochs_done + 1, r->o->epochs, r->train_loss < 0 ? 0 : r->train_loss,
            pst_now() - r->t0);
    fflush(stdout);
  }
}

/* Ctrl-C, SIGTERM or the terminal's hangup: each ps is told to stop (SIGTERM); it saves a
 * checkpoint when it has a directory for them and tells its workers to stop, and workers
 * still running when every ps has ended are told then (on_child_exit). Stopping the workers
 * first would let a sync ps go on without them for a step before it stops, and its last
 * checkpoint would then hold weights that a run straight through never has. A second
 * Ctrl-C ends everything at once. */
static void on_signal(uv_signal_t *h, int signum) {
  run_ctx *r = h->data;
  if (r->interrupted && signum == SIGINT) {
    fprintf(stderr, "pstrain: interrupted again; killing every process\n");
    pl_stop_all(r, SIGKILL);
    return;
  }
  if (!r->interrupted && r->o->checkpoint_dir)
    fprintf(stderr, "\npstrain: interrupted; stopping every process (the ps saves a checkpoint "
                    "in %s: the same command resumes the job; Ctrl-C again kills them at "
                    "once)\n", r->o->checkpoint_dir);
  else if (!r->interrupted)
    fprintf(stderr, "\npstrain: interrupted; stopping every process (Ctrl-C again kills them "
                    "at once)\n");
  r->interrupted = 1;
  r->stopping = 1;
  for (int i = 0; i < r->n_ps; i++) pl_stop_one(&r->ps[i], SIGTERM);
  if (pl_ps_all_exited(r)) pl_stop_all(r, SIGTERM);
}

/* ---- the run ---- */


static void argv_free(char **argv) {
  for (int i = 0; argv && argv[i]; i++) free(argv[i]);
  free(argv);
}


/* The checks and files of a run, before any process starts: its outputs (a missing or
 * unwritable place is a configuration error, exit 2, not a failure after training), the
 * checkpoint directory with the lock that keeps a second job out of it, and the cluster
 * secret. Fills j's paths; returns 0 or the exit code with the reason printed. */
static int prepare(const pl_run_options *o, run_ctx *r, pl_job *j, int *lock_fd) {
  char err[700];
  if (o->metrics_path) snprintf(r->metrics_path, sizeof r->metrics_path, "%s", o->metrics_path);
  else snprintf(r->metrics_path, sizeof r->metrics_path, "%s/metrics.jsonl", o->run_dir);
  if (o->summary_path) snprintf(j->summary, sizeof j->summary, "%s", o->summary_path);
  else snprintf(j->summary, sizeof j->summary, "%s/summary.json", o->run_dir);
  snprintf(j->metrics, sizeof j->metrics, "%s", r->metrics_path);
  if (pst_check_output_file("--summary-json", j->summary, err, sizeof err) < 0 ||
      pst_check_output_file("--metrics", j->metrics, err, sizeof err) < 0 ||
      (o->tensorboard_dir &&
       pst_check_output_dir("--tensorboard", o->tensorboard_dir, 0, err, sizeof err) < 0) ||
      (o->timeline && pst_check_output_file("--timeline", o->timeline, err, sizeof err) < 0) ||
      (o->checkpoint_dir &&
       pst_check_output_dir("--checkpoint-dir", o->checkpoint_dir, 1, err, sizeof err) < 0)) {
    fprintf(stderr, "pstrain: %s\n", err);
    return 2;
  }
  if (o->checkpoint_dir && (*lock_fd = pl_lock_dir(o->checkpoint_dir, err, sizeof err)) < 0) {
    fprintf(stderr, "pstrain: --checkpoint-dir %s\n", err);
    return 2;
  }
  /* A job that may resume keeps its metrics file, which the ps goes on appending to, and
   * shows only what comes after (read_metrics starts again from the top if the ps begins
   * it afresh); any other job's is removed, so that nothing stale is shown. */
  int resumable = o->checkpoint_dir || (o->resume && strcmp(o->resume, "never"));
  if (resumable) {
    r->metrics = fopen(r->metrics_path, "r");
    if (r->metrics) fseek(r->metrics, 0, SEEK_END);
  } else {
    unlink(r->metrics_path);
  }
  unlink(j->summary);
  /* The cluster secret (common/auth.h), made for this run only: without it any user of this
   * machine could join the job on 127.0.0.1 and change its weights. */
  j->secret[0] = '\0';
  if (!o->insecure && pl_make_secret(o->run_dir, j->secret, sizeof j->secret, err, sizeof err) < 0) {
    fprintf(stderr, "pstrain: %s\n", err);
    return 1;
  }
  /* --tls: a throwaway CA and certificates for this run only, beside its logs; a real
   * cluster's come from its own CA (README.md, "TLS"). */
  if (o->tls) {
    if (pst_tls_pki_make(o->run_dir, "tls", err, sizeof err) < 0) {
      fprintf(stderr, "pstrain: %s\n", err);
      return 1;
    }
    pst_tls_pki_path(j->tls_ca, sizeof j->tls_ca, o->run_dir, "tls", "ca.pem");
    pst_tls_pki_path(j->tls_srv, sizeof j->tls_srv, o->run_dir, "tls", "server.pem");
    pst_tls_pki_path(j->tls_srv_key, sizeof j->tls_srv_key, o->run_dir, "tls", "server.key");
    pst_tls_pki_path(j->tls_cli, sizeof j->tls_cli, o->run_dir, "tls", "client.pem");
    pst_tls_pki_path(j->tls_cli_key, sizeof j->tls_cli_key, o->run_dir, "tls", "client.key");
  }
  return 0;
}


int pl_run_local(const pl_run_options *o, pl_run_result *res) {
  memset(res, 0, sizeof *res);
  static run_ctx r;
  static pl_job j;
  memset(&r, 0, sizeof r);
  memset(&j, 0, sizeof j);
  r.o = o;
  r.tty = isatty(1);
  if (pl_find_binary("pstrain-ps", "ps", j.ps_bin, sizeof j.ps_bin) < 0 ||
      pl_find_binary("pstrain-worker", "worker", j.wk_bin, sizeof j.wk_bin) < 0) {
    fprintf(stderr, "pstrain: cannot find pstrain-ps and pstrain-worker next to this program "
                    "(build with `bazel build //...` or set PSTRAIN_PS_BIN / PSTRAIN_WORKER_BIN)\n");
    return 1;
  }
  j.n_gpus = pl_parse_int_list(o->gpus ? o->gpus : "", j.gpu_ids, 64, 0, PL_MAX_GPU_ID);
  if (j.n_gpus < 0) {
    fprintf(stderr, "pstrain: --gpus wants a list like 0,2,3 (up to 64 ids in 0..%d)\n", PL_MAX_GPU_ID);
    return 2;
  }
  int rc0, workers = pl_job_workers(o);
  if (workers < 1 || workers > PL_MAX_WORKERS) {
    fprintf(stderr, "pstrain: --workers must be in 1..%d\n", PL_MAX_WORKERS);
    return 2;
  }
  /* Checked against the count the job starts, which --gpus decides where it is given. */
  if (o->backup_workers >= workers) {
    fprintf(stderr, "pstrain: --backup-workers %d must be less than the %d worker%s this job "
                    "starts\n", o->backup_workers, workers, workers > 1 ? "s" : "");
    return 2;
  }
  /* An elastic job's workers are counted and started by the schedule, on loopback: --gpus
   * and --link give each worker of a fixed count its GPU or its namespace. */
  if (pl_elastic(o) && (j.n_gpus > 0 || o->link || o->link_worker)) {
    fprintf(stderr, "pstrain: --workers MIN:MAX and --schedule cannot be used with %s (it "
                    "places a fixed number of workers)\n", j.n_gpus > 0 ? "--gpus" : "--link");
    return 2;
  }
  /* --mode allreduce has no ps: the flags of one refused here, in one line. */
  int allreduce = pl_ar_mode(o);
  if (allreduce && (rc0 = pl_ar_check(o)) != 0) return rc0;
  if (allreduce && o->timeline) {
    fprintf(stderr, "pstrain: --timeline records a job with a ps (--mode allreduce has none)\n");
    return 2;
  }
  j.workers = workers;
  r.n_ps = j.n_ps = o->ps_shards > 1 ? o->ps_shards : 1;
  if (r.n_ps > PST_MAX_SHARDS) {
    fprintf(stderr, "pstrain: --ps-shards must be in 1..%d\n", PST_MAX_SHARDS);
    return 2;
  }
  /* Each shard resumes from its own part of the checkpoint directory; one file cannot hold
   * every part. */
  if (r.n_ps > 1 && o->resume && strcmp(o->resume, "auto") && strcmp(o->resume, "never")) {
    fprintf(stderr, "pstrain: --resume %s names one checkpoint file, but --ps-shards %d each "
                    "resume from their own: give auto (with --checkpoint-dir) or never\n",
            o->resume, r.n_ps);
    return 2;
  }
  /* --link: the links are parsed here (--link-worker needs the worker count), and made once
   * the run's checks have passed. */
  static pl_link_spec link_all, link_per[PL_MAX_WORKERS];
  memset(&link_all, 0, sizeof link_all);
  memset(link_per, 0, sizeof link_per);
  snprintf(j.ps_host, sizeof j.ps_host, "127.0.0.1");
  if (o->link || o->link_worker) {
    char lerr[400];
    if ((o->link && pl_link_parse(o->link, &link_all, lerr, sizeof lerr) < 0) ||
        (o->link_worker &&
         pl_link_parse_workers(o->link_worker, workers, link_per, lerr, sizeof lerr) < 0)) {
      fprintf(stderr, "pstrain: %s%s\n", o->link && !strstr(lerr, "--link-worker") ? "--link: " : "",
              lerr);
      return 2;
    }
    for (int i = 0; !o->link && i < workers; i++)
      if (!link_per[i].set) {
        fprintf(stderr, "pstrain: --link-worker gives no link for worker %d (and no --link "
                        "gives the others')\n", i);
        return 2;
      }
    if (o->metrics_listen) {
      fprintf(stderr, "pstrain: --dashboard cannot be used with --link (the ps listens inside "
                      "a network namespace of its own)\n");
      return 2;
    }
    snprintf(j.ps_host, sizeof j.ps_host, "%s", PL_LINK_PS_ADDR);
  }
  /* Where the shards sit (--ps-placement), or the ranks behind their links: each shard
   * listens on its node's address. */
  static pl_place_plan plan;
  int linked = o->link || o->link_worker;
  if ((rc0 = pl_place_prepare(o, workers, r.n_ps, allreduce, linked, &plan)) != 0) return rc0;
  if (plan.extra > 0 && !o->link) {
    fprintf(stderr, "pstrain: --ps-placement separate gives each shard a link of --link's rate: "
                    "give --link (--link-worker sets only the workers')\n");
    return 2;
  }
  for (int i = 0; i < r.n_ps; i++) {
    if (linked) pl_place_addr(plan.shard_node[i], j.shard_host[i], sizeof j.shard_host[i]);
    else snprintf(j.shard_host[i], sizeof j.shard_host[i], "127.0.0.1");
  }
  /* --port is shard 0's; the others take the ports after it. */
  for (int i = 0; i < r.n_ps; i++) {
    j.ports[i] = o->port ? o->port + i : pl_free_port();
    if (j.ports[i] <= 0) {
      fprintf(stderr, "pstrain: cannot find a free port on 127.0.0.1\n");
      return 1;
    }
    size_t used = strlen(j.ps_list);
    snprintf(j.ps_list + used, sizeof j.ps_list - used, "%s%s:%d", i ? "," : "", j.shard_host[i],
             j.ports[i]);
  }
  /* The ps shares this machine with the workers: its shards get the cores they leave free,
   * as many as their part of the model has use for (launcher/run/options.h). */
  j.ps_threads = pl_default_ps_threads(pst_proc_cores(), workers * (o->threads > 0 ? o->threads : 1),
                                       r.n_ps, o->model_params / (size_t)r.n_ps);
  if (o->ps_threads > 0) j.ps_threads = o->ps_threads;
  int lock_fd = -1;
  int rc = prepare(o, &r, &j, &lock_fd);
  static pl_argv ar_cmd; /* --mode allreduce: mpirun and its ranks' command line */
  if (rc == 0 && allreduce) {
    /* The ranks' own check of their flags (pstrain-worker --mode allreduce --print-config),
     * then mpirun's command line, which must be found on PATH. */
    rc = pl_ar_argv(o, &j, 0, &ar_cmd);
    if (rc == 0) rc = pl_check_flags(&ar_cmd, "pstrain-worker --mode allreduce");
  } else if (rc == 0) {
    rc = pl_check_ps_flags(o, &j);
  }
  /* Shards that would resume from different versions (stopped between one shard's step and
   * another's) first set aside what the others lack: a sync job must stand at one version. */
  if (rc == 0 && o->checkpoint_dir && (!o->resume || !strcmp(o->resume, "auto"))) {
    char note[600];
    int arc = pl_align_shard_checkpoints(o->checkpoint_dir, r.n_ps, note, sizeof note);
    if (arc != 0) fprintf(stderr, "pstrain: %s\n", note);
    if (arc < 0) rc = 1;
  }
  if (rc == 0 && (link_all.set || o->link_worker)) {
    char lerr[600];
    rc = pl_links_up(&r.links, workers, plan.extra, plan.peers, link_all.set ? &link_all : NULL,
                     link_per, lerr, sizeof lerr);
    if (rc != 0) fprintf(stderr, "pstrain: %s\n", lerr);
    else if (!o->quiet) {
      pl_links_describe(&r.links, lerr, sizeof lerr);
      fprintf(stderr, "pstrain: %s\n", lerr);
    }
  }
  /* mpirun's command line once the links are up: behind them each rank starts in its
   * worker's namespace (launcher/run/run_allreduce.h). */
  if (rc == 0 && allreduce) {
    if (r.links.up) {
      j.ns_ip = r.links.ip;
      pl_links_worker_prefix(&r.links, j.ns_prefix, sizeof j.ns_prefix);
    }
    rc = pl_ar_argv(o, &j, 1, &ar_cmd);
    if (rc != 0) pl_links_down(&r.links, NULL, NULL);
  }
  if (rc != 0) {
    if (r.metrics) fclose(r.metrics);
    if (lock_fd >= 0) close(lock_fd);
    return rc;
  }
  if (o->starting) o->starting(o, j.workers);
  long n_train = train_samples(o->data_dir);
  if (n_train > 0) r.total_steps = (long)o->epochs * ((n_train / workers) / o->batch_size);

  uv_loop_init(&r.loop);
  r.loop.data = &r;
  r.t0 = pst_now();

  if (rc == 0 && allreduce) {
    /* One process to follow, in the ps's place: mpirun, whose ranks are the workers. Its
     * exit is the job's (a rank that dies ends them all), and rank 0 writes the metrics and
     * the summary where a ps would. */
    r.ps[0].ns = -1;
    snprintf(r.ps[0].name, sizeof r.ps[0].name, "mpirun (%d ranks)", workers);
    snprintf(r.ps[0].log, sizeof r.ps[0].log, "%s/ranks.log", o->run_dir);
    rc = pl_spawn(&r, &r.ps[0], ar_cmd.argv);
  }
  for (int s = 0; rc == 0 && !allreduce && s < r.n_ps; s++) {
    static pl_argv a;
    pl_ps_argv(o, &j, s, &a);
    /* ps.log is shard 0's, as without shards; ps-shard1.log, ... the others'. */
    r.ps[s].ns = linked ? plan.shard_node[s] : -1;
    if (r.n_ps > 1) snprintf(r.ps[s].name, sizeof r.ps[s].name, "pstrain-ps shard %d", s);
    else snprintf(r.ps[s].name, sizeof r.ps[s].name, "pstrain-ps");
    if (s == 0) snprintf(r.ps[s].log, sizeof r.ps[s].log, "%s/ps.log", o->run_dir);
    else snprintf(r.ps[s].log, sizeof r.ps[s].log, "%s/ps-shard%d.log", o->run_dir, s);
    rc = pl_spawn(&r, &r.ps[s], a.argv);
  }

  /* Room for every worker the schedule may start besides the first: a slot each, never
   * reused, so that each keeps its own log. */
  r.cap_workers = o->n_sched > 0 ? pl_schedule_processes(o) : workers;
  r.job = &j;
  r.workers = calloc((size_t)r.cap_workers, sizeof *r.workers);
  r.n_workers = allreduce ? 0 : workers;
  for (int i = 0; rc == 0 && !allreduce && i < workers; i++) {
    static pl_argv w;
    pl_worker_argv(o, &j, i, &w);
    snprintf(r.workers[i].name, sizeof r.workers[i].name, "worker %d", i);
    r.workers[i].ns = i;
    snprintf(r.workers[i].log, sizeof r.workers[i].log, "%s/worker%d.log", o->run_dir, i);
    r.workers[i].argv = pl_argv_dup(w.argv, w.n);
    rc = r.workers[i].argv ? pl_spawn(&r, &r.workers[i], w.argv) : -ENOMEM;
    r.workers[i].t_start = pst_now() - r.t0;
  }
  uv_timer_init(&r.loop, &r.tick);
  r.tick.data = &r;
  /* A schedule acts when training reaches its points: the metrics are read more often then,
   * so that a point lands within a few steps of where it was asked for. */
  uint64_t tick_ms = o->n_sched > 0 ? 50 : 200;
  uv_timer_start(&r.tick, on_tick, tick_ms, tick_ms);
  uv_signal_init(&r.loop, &r.sig_int);
  uv_signal_init(&r.loop, &r.sig_term);
  uv_signal_init(&r.loop, &r.sig_hup);
  r.sig_int.data = r.sig_term.data = r.sig_hup.data = &r;
  uv_signal_start(&r.sig_int, on_signal, SIGINT);
  uv_signal_start(&r.sig_term, on_signal, SIGTERM);
  uv_signal_start(&r.sig_hup, on_signal, SIGHUP);
  if (rc < 0) {
    r.failed = 1;
    r.stopping = 1;
    pl_stop_all(&r, SIGTERM);
    if (r.alive == 0) {
      uv_close((uv_handle_t *)&r.tick, NULL);
      uv_close((uv_handle_t *)&r.sig_int, NULL);
      uv_close((uv_handle_t *)&r.sig_term, NULL);
      uv_close((uv_handle_t *)&r.sig_hup, NULL);
    }
  }
  uv_run(&r.loop, UV_RUN_DEFAULT);
  read_metrics(&r);
  if (r.tty && !o->quiet) fprintf(stdout, "\r\033[K");
  pl_elastic_report(&r, res);
  if (r.metrics) fclose(r.metrics);
  int loop_rc = uv_loop_close(&r.loop);
  for (int i = 0; i < r.n_workers; i++) argv_free(r.workers[i].argv);
  free(r.workers);
  if (lock_fd >= 0) close(lock_fd);

  res->wall_seconds = pst_now() - r.t0;
  res->interrupted = r.interrupted;
  FILE *f = fopen(j.summary, "r");
  if (f) {
    if (fgets(res->summary_json, sizeof res->summary_json, f)) {
      /* A line cut short is no JSON at all: every figure read from it would be missing. */
      if (!strchr(res->summary_json, '\n') && !feof(f))
        fprintf(stderr, "pstrain: %s: the summary is longer than %zu bytes; its figures are not "
                "read\n", j.summary, sizeof res->summary_json - 1);
      res->summary_json[strcspn(res->summary_json, "\n")] = '\0';
      res->test_accuracy = pl_json_num(res->summary_json, "test_accuracy");
      res->samples_per_sec = pl_json_num(res->summary_json, "samples_per_sec");
    }
    fclose(f);
  }
  /* Every process has exited (finished, failed or stopped by Ctrl-C): the links' bytes are
   * read, set beside the model's, and the links go. */
  pl_place_finish(o, &plan, allreduce, &r.links, res);
  if (r.interrupted) return 130;
  if (!r.failed && rc == 0 && loop_rc == 0 && !res->summary_json[0]) {
    /* Every process ended well, but the ps wrote no summary: it found nothing to do (a
     * checkpoint of a finished job), and its last line says so. */
    char why[400];
    pl_last_line(r.ps[0].log, why, sizeof why);
    fprintf(stderr, "pstrain: the ps wrote no summary: %s\n", why);
  }
  if (allreduce && r.failed && !r.interrupted)
    pl_ar_failure(r.ps[0].log, workers, r.steps_seen, r.total_steps, r.first_failure,
                  sizeof r.first_failure);
  /* The processes' timelines onto one clock, once all have written theirs. */
  char tl_err[4300];
  if (o->timeline && !r.failed && rc == 0 && !allreduce &&
      pl_timeline_merge(o, r.n_ps, r.n_workers > workers ? r.n_workers : workers, tl_err,
                        sizeof tl_err) < 0) {
    fprintf(stderr, "pstrain: %s\n", tl_err);
    return 1;
  }
  if (o->timeline && !o->quiet && !r.failed && rc == 0)
    printf("timeline: %s (every process on ps shard 0's clock; Perfetto or chrome://tracing "
           "open it, tools/timeline_text.py prints a step)\n", o->timeline);
  if (r.failed || rc < 0) {
    fprintf(stderr, "pstrain: %s\npstrain: logs are in %s\n",
            r.first_failure[0] ? r.first_failure : "a process could not be started", o->run_dir);
    return 1;
  }
  if (loop_rc != 0) {
    fprintf(stderr, "pstrain: event loop did not close cleanly\n");
    return 1;
  }
  res->ok = 1;
  return 0;
}
