/* Inside `pstrain local` (launcher/run.c): the run's state, and its child processes
 * (launcher/run_children.c: starting them, restarting a worker that died, stopping them,
 * and what their logs say when one fails). */
#ifndef PSTRAIN_LAUNCHER_RUN_CTX_H
#define PSTRAIN_LAUNCHER_RUN_CTX_H

#include <limits.h>
#include <stdio.h>
#include <uv.h>

#include "kernels/partition.h"
#include "launcher/link.h"
#include "launcher/run.h"

typedef struct {
  uv_process_t proc;
  int started, exited;
  int64_t status;
  int term_signal;
  char name[32];
  char log[PATH_MAX];
  char **argv;             /* a worker's command line, kept to restart it */
  int ns;                  /* --link: the namespace it runs in (-1: the ps's, i: worker i's) */
  int restarts;
  int signalled;           /* told to stop: once only, see stop_all */
} child;

/* A worker that dies (a crash, kill -9, out of memory) is started again with its index, the
 * way systemd's Restart=on-failure does for the units: it rejoins its slot and the job goes
 * on. Past this many restarts of one worker, its failure ends the job. */
#define PL_WORKER_RESTARTS 3

/* Once every ps has finished the run, its workers are told so and exit by themselves; only
 * one still running after this long is stopped. (Stopping them at once raced with their own
 * exit: a worker that had just read "training complete" could take the SIGTERM first and exit
 * as stopped.) */
#define PL_DRAIN_S 10.0

typedef struct {
  const pl_run_options *o;
  uv_loop_t loop;
  uv_timer_t tick;
  uv_signal_t sig_int, sig_term, sig_hup;
  child ps[PST_MAX_SHARDS]; /* the ps shards; ps[0] writes the metrics and the summary */
  int n_ps;
  child *workers;
  int n_workers;
  int alive;
  int failed;              /* some process failed: everything is being stopped */
  int interrupted;
  int stopping;
  double drain_deadline;   /* every ps finished: workers still running then are stopped */
  char first_failure[1024];
  int failure_rank;        /* how telling first_failure is: see on_child_exit */
  FILE *metrics;
  char metrics_path[PATH_MAX];
  char line[4096];
  size_t line_len;
  int tty;
  long total_steps;        /* per worker, all epochs */
  long steps_seen;
  double train_loss;
  int epochs_done;
  double t0;
  pl_links links;          /* --link's namespaces (links.up: in use) */
} run_ctx;

/* Starts c with argv (behind --link, in its namespace), its output in c->log. 0 or a
 * negative error code, said on stderr. */
int pl_spawn(run_ctx *r, child *c, char **argv);
/* Tells c, or every process, to stop with sig: once each, except SIGKILL. */
void pl_stop_one(child *c, int sig);
void pl_stop_all(run_ctx *r, int sig);
/* Every ps shard has exited (or never started). */
int pl_ps_all_exited(const run_ctx *r);
/* The last line of a log, without its level prefix ("" when none). */
void pl_last_line(const char *log, char *out, size_t outlen);

#endif
