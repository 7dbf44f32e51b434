/* An all-reduce job's command line and its failure, for `pstrain local` (run_allreduce.h). */
#include "launcher/run/run_allreduce.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "launcher/common/helpers.h"

/* Of the stall watch's grace (1 s, worker/allreduce/ar_watch.c): a waiting rank reports
 * within a tick (0.1 s) of its limit, a rank stopped in its sum only after the grace. */
#define PL_AR_WATCH_SLACK_S 0.6

int pl_ar_mode(const pl_run_options *o) { return !strcmp(o->mode, "allreduce"); }

int pl_ar_check(const pl_run_options *o) {
  const char *bad = o->ps_shards > 1                  ? "--ps-shards"
                    : o->workers_max > 0 || o->n_sched ? "--workers MIN:MAX and --schedule"
                    : o->ps_placement && strcmp(o->ps_placement, "one-host") &&
                            strcmp(o->ps_placement, "one")
                        ? "--ps-placement (the ranks sit in the workers' namespaces)"
                    : o->tls                          ? "--tls"
                    : o->backup_workers               ? "--backup-workers"
                    : o->staleness_lr                 ? "--staleness-lr"
                    : o->lr_scaling && strcmp(o->lr_scaling, "none")
                        ? "--lr-scaling linear (an elastic ps job's steps, scaled by their samples)"
                    : o->push_compress || o->pull_compress ? "--push-compress and --pull-compress"
                    : o->resume && strcmp(o->resume, "auto") && strcmp(o->resume, "never")
                        ? "--resume FILE (the ranks resume from --checkpoint-dir: auto or never)"
                    : o->eval_on                      ? "--eval-on"
                    : o->grad_norm_factor             ? "--grad-norm-factor (a ps's check on its workers)"
                    : o->metrics_listen               ? "--dashboard"
                    : o->tensorboard_dir              ? "--tensorboard"
                    : o->push_by_layer >= 0 || o->pull_by_layer >= 0 || o->layer_pieces >= 0
                        ? "--push-by-layer, --pull-by-layer and --layer-pieces (see --bucket-kib)"
                    : o->keep_awake >= 0 ? "--keep-awake (a ps worker's)"
                    : o->stages > 1 || o->place || o->micro_batches > 1 ||
                            o->virtual_devices > 0 || o->device_mem > 0
                        ? "--stages, --place, --micro-batches, --virtual-devices and --device-mem "
                          "(a rank runs the model on one device)"
                        : NULL;
  if (!bad) return 0;
  fprintf(stderr, "pstrain: --mode allreduce has no ps: %s cannot be used with it\n", bad);
  return 2;
}

int pl_ar_argv(const pl_run_options *o, const pl_job *j, int with_mpirun, pl_argv *a) {
  a->n = 0;
  a->argv[0] = NULL;
  if (with_mpirun) {
    char mpirun[PATH_MAX];
    if (pl_find_program("mpirun", NULL, mpirun, sizeof mpirun) < 0) {
      fprintf(stderr, "pstrain: --mode allreduce runs its ranks with Open MPI's mpirun, which is "
                      "not on PATH (Debian: openmpi-bin and libopenmpi-dev; ./pstrain "
                      "ensure_packages installs them)\n");
      return 2;
    }
    /* Behind --link the ranks sit in other network namespaces than mpirun, whose PMIx
     * server they reach over TCP (PMIx 4 has no other transport), by default on the
     * loopback, which is each namespace's own. mpirun's environment tells its PMIx server to
     * take connections on the hub's bridge (10.214.0.1, which exists only inside this run's
     * namespaces) and to tell the ranks that address. */
    if (j->ns_ip) {
      char env[PATH_MAX];
      if (pl_find_program("env", NULL, env, sizeof env) < 0) snprintf(env, sizeof env, "/usr/bin/env");
      pl_argv_add(a, "%s", env);
      pl_argv_add(a, "PMIX_MCA_ptl_tcp_remote_connections=1");
      pl_argv_add(a, "PMIX_MCA_ptl_tcp_if_include=br0");
    }
    pl_argv_add(a, "%s", mpirun);
    /* Root may run it only when it says so; the ranks may outnumber the cores; and
     * everything stays on the loopback interface: the ranks' traffic and mpirun's own.
     * Binding is Open MPI's default (a core each for 2 ranks, none once oversubscribed), and
     * a rank waiting for its sum yields the core between polls (mpi_yield_when_idle): on the
     * shared 2-core VM (load 5, mlp, 2 ranks, 1 epoch, 3 runs each, 2026-11-28) the median
     * was 20.5k samples/s bound without yielding, 33.8k bound and yielding, 29.7k unbound and
     * yielding, 21.1k unbound without; a rank that spins while the other computes on a
     * shared core takes that core from it. */
    if (geteuid() == 0) pl_argv_add(a, "--allow-run-as-root");
    pl_argv_add(a, "--oversubscribe");
    pl_argv_add(a, "--mca");
    pl_argv_add(a, "mpi_yield_when_idle");
    pl_argv_add(a, "1");
    pl_argv_add(a, "--mca");
    pl_argv_add(a, "btl");
    pl_argv_add(a, "self,tcp");
    /* Behind --link the ranks' sums go over the links: the TCP BTL takes only the links'
     * net (each rank's eth0 in its namespace; Open MPI takes a CIDR here). mpirun itself runs
     * in the hub's namespace, and its own traffic stays on that namespace's loopback: on one
     * host it speaks to its ranks through PMIx's Unix sockets, which a network namespace does
     * not separate. */
    pl_argv_add(a, "--mca");
    pl_argv_add(a, "btl_tcp_if_include");
    pl_argv_add(a, "%s", j->ns_ip ? "10.214.0.0/24" : "lo");
    pl_argv_add(a, "--mca");
    pl_argv_add(a, "oob_tcp_if_include");
    pl_argv_add(a, "lo");
    /* Behind --link, each send of up to 1 MiB goes eagerly: a larger one waits for Open
     * MPI's rendezvous (a request, then a clear-to-send back) before its data, a round trip
     * of two links for each of a ring's 2(n-1) steps. 4 ranks, mlp, 1gbit,1ms, ring
     * (2026-11-28): 74.6 ms a step with the default 64 KiB, 39.6 ms eager. */
    if (j->ns_ip) {
      pl_argv_add(a, "--mca");
      pl_argv_add(a, "btl_tcp_eager_limit");
      pl_argv_add(a, "1048576");
      pl_argv_add(a, "--mca");
      pl_argv_add(a, "btl_tcp_max_send_size");
      pl_argv_add(a, "1048576");
    }
    pl_argv_add(a, "-np");
    pl_argv_add(a, "%d", j->workers);
    /* Each rank in its worker's namespace: a shell picks it from the rank Open MPI gives the
     * process (OMPI_COMM_WORLD_RANK) and execs `ip netns exec NS pstrain-worker ...`, so the
     * rank is that process. (One app context per rank, `-np 1 ip netns exec NS0 ... : -np 1
     * ...`, works too, but repeats the ranks' command line N times.) */
    if (j->ns_ip) {
      pl_argv_add(a, "/bin/sh");
      pl_argv_add(a, "-c");
      pl_argv_add(a, "exec \"$0\" netns exec \"%s$OMPI_COMM_WORLD_RANK\" \"$@\"", j->ns_prefix);
      pl_argv_add(a, "%s", j->ns_ip);
    }
  }
  pl_argv_add(a, "%s", j->wk_bin);
  pl_argv_add(a, "--mode=allreduce");
  pl_argv_add(a, "--data-dir=%s", o->data_dir);
  pl_data_flags_argv(a, o);
  pl_argv_add(a, "--threads=%d", o->threads);
  if (o->device) pl_argv_add(a, "--device=%s", o->device);
  /* --gpus: rank i's GPU, as a ps job's worker i gets it (run_args.c); each rank takes the
   * entry of its local rank, which on this one host is its rank. */
  if (j->n_gpus > 0) {
    char ids[PL_MAX_WORKERS * 8] = "";
    size_t len = 0;
    for (int i = 0; i < j->workers && len + 8 < sizeof ids; i++)
      len += (size_t)snprintf(ids + len, sizeof ids - len, "%s%d", i ? "," : "",
                              j->gpu_ids[i / (o->workers_per_gpu > 0 ? o->workers_per_gpu : 1)]);
    pl_argv_add(a, "--gpus=%s", ids);
  }
  if (o->collective) pl_argv_add(a, "--collective=%s", o->collective);
  if (o->gpu_memory_limit) pl_argv_add(a, "--gpu-memory-limit=%d", o->gpu_memory_limit);
  pl_argv_add(a, "--model=%s", o->model);
  pl_argv_add(a, "--epochs=%d", o->epochs);
  pl_argv_add(a, "--batch-size=%d", o->batch_size);
  pl_argv_add(a, "--lr=%.9g", o->lr);
  pl_argv_add(a, "--optimizer=%s", o->optimizer);
  if (o->lr_schedule) pl_argv_add(a, "--lr-schedule=%s", o->lr_schedule);
  pl_argv_add(a, "--seed=%lld", o->seed);
  if (o->grad_limit) pl_argv_add(a, "--grad-limit=%s", o->grad_limit);
  if (o->clip_norm) pl_argv_add(a, "--clip-norm=%s", o->clip_norm);
  if (o->report_every > 0) pl_argv_add(a, "--report-every=%d", o->report_every);
  pl_argv_add(a, "--metrics=%s", j->metrics);
  pl_argv_add(a, "--summary-json=%s", j->summary);
  /* Rank 0 writes the ps's checkpoint format there, and the job resumes from it. */
  if (o->checkpoint_dir) pl_argv_add(a, "--checkpoint-dir=%s", o->checkpoint_dir);
  if (o->checkpoint_every) pl_argv_add(a, "--checkpoint-every=%s", o->checkpoint_every);
  if (o->checkpoint_keep) pl_argv_add(a, "--checkpoint-keep=%s", o->checkpoint_keep);
  if (o->resume) pl_argv_add(a, "--resume=%s", o->resume);
  pl_argv_add(a, "--ar-algorithm=%s", o->ar_algorithm ? o->ar_algorithm : "auto");
  pl_argv_add(a, "--bucket-kib=%d", o->bucket_kib);
  if (o->checkpoint_seconds) pl_argv_add(a, "--checkpoint-seconds=%s", o->checkpoint_seconds);
  if (o->eval_every > 0) {
    pl_argv_add(a, "--eval-every=%d", o->eval_every);
    if (o->eval_samples > 0) pl_argv_add(a, "--eval-samples=%d", o->eval_samples);
  }
  /* --slow-worker and --delay-worker: mpirun gives every rank one command line, so each
   * flag is the list by rank, and each rank takes its own entry. */
  char slow[PL_MAX_WORKERS * 24] = "", delay[PL_MAX_WORKERS * 24] = "";
  int any_slow = 0, any_delay = 0;
  size_t ls = 0, ld = 0;
  for (int i = 0; i < j->workers && i < PL_MAX_WORKERS; i++) {
    double f = o->slow_factor[i] > 1 ? o->slow_factor[i] : 1, d = o->delay_ms[i];
    any_slow |= f > 1;
    any_delay |= d > 0;
    ls += (size_t)snprintf(slow + ls, ls < sizeof slow ? sizeof slow - ls : 0, "%s%g", i ? "," : "", f);
    ld += (size_t)snprintf(delay + ld, ld < sizeof delay ? sizeof delay - ld : 0, "%s%g", i ? "," : "", d);
  }
  if (any_slow) pl_argv_add(a, "--slow-factor=%s", slow);
  if (any_delay) pl_argv_add(a, "--delay-ms=%s", delay);
  if (a->n >= PL_MAX_ARGS) {
    fprintf(stderr, "pstrain: the all-reduce job's command line is too long\n");
    return 2;
  }
  return 0;
}

void pl_ar_failure(const char *log, int ranks, long step, long total, char *out,
                   size_t outlen) {
  /* In order of what tells the cause best: mpirun's line naming a rank whose process ended
   * on a signal (killed, crashed: the others' errors are only what that did to them); the
   * stall watch's lines (worker/allreduce/ar_watch.c), one from every rank that waited in a
   * sum too long, so that the ranks without one, or with one of an earlier step (a rank
   * stopped inside its sum says so too once mpirun wakes it to end it, of the step it was
   * stopped in), are those that stalled; a rank's own error line (a rank that cannot go on
   * says why, naming the step, and aborts the job). */
  char noticed[512] = "", error[512] = "", waited[512] = "", line[1024];
  long at[PL_MAX_WORKERS]; /* the step each rank said it waited in; -1: none said */
  long latest = -1;
  int n_waited = 0;
  for (int r = 0; r < PL_MAX_WORKERS; r++) at[r] = -1;
  FILE *f = fopen(log, "r");
  while (f && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    const char *p = line[0] == '<' && line[2] == '>' ? line + 3 : line;
    const char *w = strstr(p, "error: rank ");
    int r = -1;
    long st = -1;
    double waited_s = 0, limit_s = 0;
    if (strstr(p, "mpirun noticed that process rank") && strstr(p, "signal")) {
      snprintf(noticed, sizeof noticed, "%.500s", p);
    } else if (w && strstr(w, ": waited ") &&
               sscanf(w, "error: rank %d: step %ld: waited %lf s of a %lf s limit", &r, &st,
                      &waited_s, &limit_s) == 4 &&
               r >= 0 && r < ranks && r < PL_MAX_WORKERS) {
      if (at[r] < 0) n_waited++;
      /* A rank stopped inside a sum says it waited too, once mpirun wakes it to end it: past
       * the limit by the grace the first rank to give up waited before exiting (ar_watch.c),
       * where the ranks that were waiting are within a tick of it. Counted as not having
       * said so (step -1). */
      at[r] = waited_s > limit_s + PL_AR_WATCH_SLACK_S ? -1 : st;
      if (at[r] > latest) latest = at[r];
      if (!waited[0]) snprintf(waited, sizeof waited, "%.500s", w + strlen("error: "));
    } else if (strstr(p, "error: ") && !error[0]) {
      snprintf(error, sizeof error, "%.500s", p);
    }
  }
  if (f) fclose(f);
  char where[96] = "";
  if (total > 0) snprintf(where, sizeof where, " (training had reached step %ld of %ld)", step, total);
  if (noticed[0]) {
    snprintf(out, outlen, "all-reduce job failed: %s%s", noticed, where);
  } else if (n_waited > 0) {
    char stalled[256] = "";
    size_t len = 0;
    for (int r = 0; r < ranks && r < PL_MAX_WORKERS && len + 8 < sizeof stalled; r++)
      if (at[r] < latest) len += (size_t)snprintf(stalled + len, sizeof stalled - len, "%s%d", len ? ", " : "", r);
    if (stalled[0])
      snprintf(out, outlen, "all-reduce job failed: rank %s stalled at step %ld or before (the "
               "other ranks waited for it past the limit; %.300s)%s", stalled, latest, waited, where);
    else
      snprintf(out, outlen, "all-reduce job failed: every rank waited past the limit (%.300s)%s",
               waited, where);
  } else if (error[0]) {
    snprintf(out, outlen, "all-reduce job failed: %s%s", error, where);
  } else {
    snprintf(out, outlen, "all-reduce job failed (mpirun said nothing of why; see its log %.300s)%s",
             log, where);
  }
}
