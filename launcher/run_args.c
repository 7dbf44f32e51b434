/* The command lines of a local job's processes (launcher/run_internal.h). */
#include "launcher/run_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void arg(pl_argv *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void arg(pl_argv *a, const char *fmt, ...) {
  if (a->n >= PL_MAX_ARGS) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(a->store[a->n], PATH_MAX, fmt, ap);
  va_end(ap);
  a->argv[a->n] = a->store[a->n];
  a->argv[++a->n] = NULL;
}

/* The data flags (worker/dataset.h), for the workers and a ps that evaluates. */
static void data_flags(pl_argv *a, const pl_run_options *o) {
  if (!o->data_flags) return;
  const pst_data_flags *d = o->data_flags;
  arg(a, "--image-size=%s", d->image_size);
  arg(a, "--augment=%s", d->augment);
  arg(a, "--normalize=%s", d->normalize);
  arg(a, "--test-fraction=%.17g", d->test_fraction);
  arg(a, "--split-seed=%lld", (long long)d->split_seed);
}

void pl_ps_argv(const pl_run_options *o, const pl_job *j, int s, pl_argv *a) {
  a->n = 0;
  a->argv[0] = NULL;
  arg(a, "%s", j->ps_bin);
  arg(a, "--listen=%s:%d", j->ps_host[0] ? j->ps_host : "127.0.0.1", j->ports[s]);
  if (j->n_ps > 1) arg(a, "--shard=%d/%d", s, j->n_ps);
  /* An elastic job (issue 28): the ps starts with MIN and admits up to MAX; a schedule also
   * needs the ps to hand out the data where MIN = MAX (auto picks it only for MIN < MAX). */
  if (o->workers_max > j->workers) arg(a, "--workers=%d:%d", j->workers, o->workers_max);
  else arg(a, "--workers=%d", j->workers);
  if (o->n_sched > 0) arg(a, "--data-order=ps");
  arg(a, "--mode=%s", o->mode);
  arg(a, "--staleness=%d", o->staleness);
  if (o->backup_workers) arg(a, "--backup-workers=%d", o->backup_workers);
  if (o->staleness_lr) arg(a, "--staleness-lr");
  arg(a, "--model=%s", o->model);
  arg(a, "--epochs=%d", o->epochs);
  arg(a, "--batch-size=%d", o->batch_size);
  arg(a, "--lr=%.9g", o->lr);
  arg(a, "--optimizer=%s", o->optimizer);
  if (o->lr_schedule) arg(a, "--lr-schedule=%s", o->lr_schedule);
  arg(a, "--seed=%lld", o->seed);
  arg(a, "--chunk-kib=%d", o->chunk_kib);
  arg(a, "--threads=%d", j->ps_threads);
  if (o->eval_every > 0) arg(a, "--eval-every=%d", o->eval_every);
  if (o->eval_samples > 0) arg(a, "--eval-samples=%d", o->eval_samples);
  if (o->report_every > 0) arg(a, "--report-every=%d", o->report_every);
  /* Shard 0 speaks for the job (every shard sees every report); the others' summaries are
   * kept beside it for their own figures. */
  if (s == 0) {
    arg(a, "--metrics=%s", j->metrics);
    arg(a, "--summary-json=%s", j->summary);
    if (o->tensorboard_dir) arg(a, "--tensorboard=%s", o->tensorboard_dir);
    if (o->metrics_listen) arg(a, "--metrics-listen=%s", o->metrics_listen);
  } else {
    arg(a, "--summary-json=%s/summary-shard%d.json", o->run_dir, s);
  }
  /* One checkpoint directory for the job: each shard keeps its part in a directory of its
   * own inside it (shard-I-of-K, made by the ps), and resumes from there. The other flags
   * go on as given, so that the ps's defaults hold where none was. */
  if (o->checkpoint_dir) arg(a, "--checkpoint-dir=%s", o->checkpoint_dir);
  if (o->checkpoint_every) arg(a, "--checkpoint-every=%s", o->checkpoint_every);
  if (o->checkpoint_seconds) arg(a, "--checkpoint-seconds=%s", o->checkpoint_seconds);
  if (o->checkpoint_keep) arg(a, "--checkpoint-keep=%s", o->checkpoint_keep);
  if (o->resume) arg(a, "--resume=%s", o->resume);
  if (o->grad_limit) arg(a, "--grad-limit=%s", o->grad_limit);
  if (o->clip_norm) arg(a, "--clip-norm=%s", o->clip_norm);
  if (o->push_compress) arg(a, "--push-compress=%s", o->push_compress);
  if (o->topk_warmup && o->push_compress && strncmp(o->push_compress, "topk:", 5) == 0)
    arg(a, "--topk-warmup=%s", o->topk_warmup);
  if (o->pull_compress) arg(a, "--pull-compress=%s", o->pull_compress);
  if (o->eval_on) {
    /* --eval-on ps: the ps loads the data as the workers do, with their flags. */
    arg(a, "--eval-on=%s", o->eval_on);
    arg(a, "--data-dir=%s", o->data_dir);
    data_flags(a, o);
  }
  if (j->secret[0]) arg(a, "--secret-file=%s", j->secret);
  if (o->tls) {
    arg(a, "--tls-cert=%s", j->tls_srv);
    arg(a, "--tls-key=%s", j->tls_srv_key);
    arg(a, "--tls-ca=%s", j->tls_ca);
  }
}

void pl_worker_argv(const pl_run_options *o, const pl_job *j, int i, pl_argv *w) {
  pl_worker_argv_slot(o, j, i, i, w);
}

void pl_worker_argv_slot(const pl_run_options *o, const pl_job *j, int index, int i,
                         pl_argv *w) {
  w->n = 0;
  w->argv[0] = NULL;
  arg(w, "%s", j->wk_bin);
  arg(w, "--ps=%s", j->ps_list);
  arg(w, "--index=%d", index);
  arg(w, "--name=worker%d", i);
  arg(w, "--data-dir=%s", o->data_dir);
  data_flags(w, o);
  arg(w, "--threads=%d", o->threads);
  arg(w, "--connect-timeout=60");
  if (j->n_gpus > 0) arg(w, "--device=cuda:%d", j->gpu_ids[i / o->workers_per_gpu]);
  else if (o->device) arg(w, "--device=%s", o->device);
  if (o->gpu_memory_limit) arg(w, "--gpu-memory-limit=%d", o->gpu_memory_limit);
  if (o->log_placement) arg(w, "--log-placement");
  if (o->push_by_layer >= 0) arg(w, "--push-by-layer=%s", o->push_by_layer ? "true" : "false");
  if (o->pull_by_layer >= 0) arg(w, "--pull-by-layer=%s", o->pull_by_layer ? "true" : "false");
  if (o->slow_factor[i] > 1) arg(w, "--slow-factor=%g", o->slow_factor[i]);
  if (o->delay_ms[i] > 0) arg(w, "--delay-ms=%g", o->delay_ms[i]);
  if (j->secret[0]) arg(w, "--secret-file=%s", j->secret);
  if (o->tls) {
    arg(w, "--tls-cert=%s", j->tls_cli);
    arg(w, "--tls-key=%s", j->tls_cli_key);
    arg(w, "--tls-ca=%s", j->tls_ca);
  }
}

int pl_check_ps_flags(const pl_run_options *o, const pl_job *j) {
  static pl_argv a;
  pl_ps_argv(o, j, 0, &a);
  arg(&a, "--print-config");
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    fprintf(stderr, "pstrain: cannot check the ps's flags: %s\n", strerror(errno));
    return 1;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  pid_t pid;
  int rc = posix_spawn(&pid, a.argv[0], &fa, NULL, a.argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    fprintf(stderr, "pstrain: cannot start %s: %s\n", a.argv[0], strerror(rc));
    return 1;
  }
  /* Its reason is the line at error level (the daemons' lines start with journald's <N>). */
  char out[4096], reason[1024] = "";
  size_t len = 0;
  ssize_t n;
  while ((n = read(fds[0], out + len, sizeof out - 1 - len)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) len += (size_t)n;
  close(fds[0]);
  out[len] = '\0';
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
    char *e = strstr(line, "error: ");
    if (e) {
      snprintf(reason, sizeof reason, "%s", e + strlen("error: "));
      break;
    }
    if (!reason[0]) snprintf(reason, sizeof reason, "%s", line);
  }
  fprintf(stderr, "pstrain: %s\n", reason[0] ? reason : "the ps refuses its flags (no reason given)");
  return WIFEXITED(status) && WEXITSTATUS(status) == 2 ? 2 : 1;
}
