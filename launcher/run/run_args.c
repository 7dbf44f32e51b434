/* The command lines of a local job's processes (launcher/run/run_args.h). */
#include "launcher/run/run_args.h"

#include "launcher/common/helpers.h"
#include "launcher/run/run_timeline.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;


/* The data flags (data/dataset.h), for the workers, an all-reduce job's ranks and a ps that
 * evaluates. */
void pl_data_flags_argv(pl_argv *a, const pl_run_options *o) {
  if (!o->data_flags) return;
  const pst_data_flags *d = o->data_flags;
  pl_argv_add(a, "--image-size=%s", d->image_size);
  pl_argv_add(a, "--augment=%s", d->augment);
  pl_argv_add(a, "--normalize=%s", d->normalize);
  pl_argv_add(a, "--test-fraction=%.17g", d->test_fraction);
  pl_argv_add(a, "--split-seed=%lld", (long long)d->split_seed);
}

/* --timeline: process `who` number i records its part in the run directory, which `pstrain
 * local` merges at the end (run_timeline.h). */
static void timeline_args(pl_argv *a, const pl_run_options *o, const char *who, int i) {
  if (!o->timeline) return;
  char path[PATH_MAX];
  pl_timeline_part(o, who, i, path, sizeof path);
  pl_argv_add(a, "--timeline=%s", path);
  pl_argv_add(a, "--timeline-steps=%d", o->timeline_steps);
  pl_argv_add(a, "--timeline-skip=%d", o->timeline_skip);
}

void pl_ps_argv(const pl_run_options *o, const pl_job *j, int s, pl_argv *a) {
  a->n = 0;
  a->argv[0] = NULL;
  pl_argv_add(a, "%s", j->ps_bin);
  pl_argv_add(a, "--listen=%s:%d", j->shard_host[s][0] ? j->shard_host[s] : "127.0.0.1",
              j->ports[s]);
  if (j->n_ps > 1) pl_argv_add(a, "--shard=%d/%d", s, j->n_ps);
  /* An elastic job (issue 28): the ps starts with MIN and admits up to MAX; a schedule also
   * needs the ps to hand out the data where MIN = MAX (auto picks it only for MIN < MAX). */
  if (o->workers_max > j->workers) pl_argv_add(a, "--workers=%d:%d", j->workers, o->workers_max);
  else pl_argv_add(a, "--workers=%d", j->workers);
  if (o->n_sched > 0) pl_argv_add(a, "--data-order=ps");
  pl_argv_add(a, "--mode=%s", o->mode);
  pl_argv_add(a, "--staleness=%d", o->staleness);
  if (o->backup_workers) pl_argv_add(a, "--backup-workers=%d", o->backup_workers);
  if (o->staleness_lr) pl_argv_add(a, "--staleness-lr");
  pl_argv_add(a, "--model=%s", o->model);
  pl_argv_add(a, "--epochs=%d", o->epochs);
  pl_argv_add(a, "--batch-size=%d", o->batch_size);
  pl_argv_add(a, "--lr=%.9g", o->lr);
  pl_argv_add(a, "--optimizer=%s", o->optimizer);
  if (o->lr_schedule) pl_argv_add(a, "--lr-schedule=%s", o->lr_schedule);
  if (o->lr_scaling) pl_argv_add(a, "--lr-scaling=%s", o->lr_scaling);
  pl_argv_add(a, "--seed=%lld", o->seed);
  pl_argv_add(a, "--chunk-kib=%d", o->chunk_kib);
  pl_argv_add(a, "--threads=%d", j->ps_threads);
  if (o->eval_every > 0) pl_argv_add(a, "--eval-every=%d", o->eval_every);
  if (o->eval_samples > 0) pl_argv_add(a, "--eval-samples=%d", o->eval_samples);
  if (o->report_every > 0) pl_argv_add(a, "--report-every=%d", o->report_every);
  /* Shard 0 speaks for the job (every shard sees every report); the others' summaries are
   * kept beside it for their own figures. */
  if (s == 0) {
    pl_argv_add(a, "--metrics=%s", j->metrics);
    pl_argv_add(a, "--summary-json=%s", j->summary);
    if (o->tensorboard_dir) pl_argv_add(a, "--tensorboard=%s", o->tensorboard_dir);
    if (o->metrics_listen) pl_argv_add(a, "--metrics-listen=%s", o->metrics_listen);
  } else {
    pl_argv_add(a, "--summary-json=%s/summary-shard%d.json", o->run_dir, s);
  }
  /* One checkpoint directory for the job: each shard keeps its part in a directory of its
   * own inside it (shard-I-of-K, made by the ps), and resumes from there. The other flags
   * go on as given, so that the ps's defaults hold where none was. */
  if (o->checkpoint_dir) pl_argv_add(a, "--checkpoint-dir=%s", o->checkpoint_dir);
  if (o->checkpoint_every) pl_argv_add(a, "--checkpoint-every=%s", o->checkpoint_every);
  if (o->checkpoint_seconds) pl_argv_add(a, "--checkpoint-seconds=%s", o->checkpoint_seconds);
  if (o->checkpoint_keep) pl_argv_add(a, "--checkpoint-keep=%s", o->checkpoint_keep);
  if (o->resume) pl_argv_add(a, "--resume=%s", o->resume);
  if (o->grad_limit) pl_argv_add(a, "--grad-limit=%s", o->grad_limit);
  if (o->clip_norm) pl_argv_add(a, "--clip-norm=%s", o->clip_norm);
  if (o->grad_norm_factor) pl_argv_add(a, "--grad-norm-factor=%s", o->grad_norm_factor);
  if (o->push_compress) pl_argv_add(a, "--push-compress=%s", o->push_compress);
  if (o->topk_warmup && o->push_compress && strncmp(o->push_compress, "topk:", 5) == 0)
    pl_argv_add(a, "--topk-warmup=%s", o->topk_warmup);
  if (o->pull_compress) pl_argv_add(a, "--pull-compress=%s", o->pull_compress);
  if (o->eval_on) {
    /* --eval-on ps: the ps loads the data as the workers do, with their flags. */
    pl_argv_add(a, "--eval-on=%s", o->eval_on);
    pl_argv_add(a, "--data-dir=%s", o->data_dir);
    pl_data_flags_argv(a, o);
  }
  if (j->secret[0]) pl_argv_add(a, "--secret-file=%s", j->secret);
  if (!pl_shm_on(o)) pl_argv_add(a, "--shm=false");
  timeline_args(a, o, "ps", s);
  if (o->tls) {
    pl_argv_add(a, "--tls-cert=%s", j->tls_srv);
    pl_argv_add(a, "--tls-key=%s", j->tls_srv_key);
    pl_argv_add(a, "--tls-ca=%s", j->tls_ca);
  }
}

/* Shared memory between the ps and its workers (proto/ring.h): as given, else on; never behind
 * --link, whose emulated network the bytes must cross (a worker in its own network namespace
 * still shares the host's memory). */
int pl_shm_on(const pl_run_options *o) {
  return o->shm != 0 && !o->link && !o->link_worker;
}

void pl_worker_argv(const pl_run_options *o, const pl_job *j, int i, pl_argv *w) {
  pl_worker_argv_slot(o, j, i, i, w);
}

void pl_worker_argv_slot(const pl_run_options *o, const pl_job *j, int index, int i,
                         pl_argv *w) {
  w->n = 0;
  w->argv[0] = NULL;
  pl_argv_add(w, "%s", j->wk_bin);
  pl_argv_add(w, "--ps=%s", j->ps_list);
  pl_argv_add(w, "--index=%d", index);
  pl_argv_add(w, "--name=worker%d", i);
  pl_argv_add(w, "--data-dir=%s", o->data_dir);
  pl_data_flags_argv(w, o);
  pl_argv_add(w, "--threads=%d", o->threads);
  pl_argv_add(w, "--connect-timeout=60");
  if (j->n_gpus > 0) pl_argv_add(w, "--device=cuda:%d", j->gpu_ids[i / o->workers_per_gpu]);
  else if (o->device) pl_argv_add(w, "--device=%s", o->device);
  if (o->gpu_memory_limit) pl_argv_add(w, "--gpu-memory-limit=%d", o->gpu_memory_limit);
  if (o->log_placement) pl_argv_add(w, "--log-placement");
  if (o->stages > 1) pl_argv_add(w, "--stages=%d", o->stages);
  if (o->place) pl_argv_add(w, "--place=%s", o->place);
  if (o->micro_batches > 1) pl_argv_add(w, "--micro-batches=%d", o->micro_batches);
  if (o->virtual_devices > 0) pl_argv_add(w, "--virtual-devices=%d", o->virtual_devices);
  if (o->device_mem > 0) pl_argv_add(w, "--device-mem=%d", o->device_mem);
  if (o->push_by_layer >= 0)
    pl_argv_add(w, "--push-by-layer=%s", o->push_by_layer ? "true" : "false");
  if (o->pull_by_layer >= 0)
    pl_argv_add(w, "--pull-by-layer=%s", o->pull_by_layer ? "true" : "false");
  if (o->layer_pieces >= 0)
    pl_argv_add(w, "--layer-pieces=%s", o->layer_pieces ? "true" : "false");
  if (o->keep_awake >= 0) pl_argv_add(w, "--keep-awake=%s", o->keep_awake ? "true" : "false");
  if (!pl_shm_on(o)) pl_argv_add(w, "--shm=false");
  if (o->slow_factor[i] > 1) pl_argv_add(w, "--slow-factor=%g", o->slow_factor[i]);
  if (o->delay_ms[i] > 0) pl_argv_add(w, "--delay-ms=%g", o->delay_ms[i]);
  if (j->secret[0]) pl_argv_add(w, "--secret-file=%s", j->secret);
  timeline_args(w, o, "worker", i);
  if (o->tls) {
    pl_argv_add(w, "--tls-cert=%s", j->tls_cli);
    pl_argv_add(w, "--tls-key=%s", j->tls_cli_key);
    pl_argv_add(w, "--tls-ca=%s", j->tls_ca);
  }
}

int pl_check_ps_flags(const pl_run_options *o, const pl_job *j) {
  static pl_argv a;
  pl_ps_argv(o, j, 0, &a);
  return pl_check_flags(&a, "the ps");
}

int pl_check_flags(pl_argv *cmd, const char *who) {
  static pl_argv a; /* 256 KiB: not on the stack */
  a = *cmd;
  for (int i = 0; i < a.n; i++) a.argv[i] = a.store[i];
  pl_argv_add(&a, "--print-config");
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
  if (!reason[0]) snprintf(reason, sizeof reason, "%s refuses its flags (no reason given)", who);
  fprintf(stderr, "pstrain: %s\n", reason);
  return WIFEXITED(status) && WEXITSTATUS(status) == 2 ? 2 : 1;
}
