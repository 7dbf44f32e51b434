/* Inside `pstrain local` (launcher/run/run.c): the run's state and its child processes, shared
 * by run.c, run_children.c (launcher/run/run_children.h) and run_elastic.c; types only. */
#ifndef PSTRAIN_LAUNCHER_RUN_CTX_H
#define PSTRAIN_LAUNCHER_RUN_CTX_H

#include <limits.h>
#include <stdio.h>
#include <uv.h>

#include "kernels/partition.h"
#include "launcher/links/link.h"
#include "launcher/run/options.h"

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
  int scheduled;           /* started by --schedule (asks the ps for any index) */
  int leaving;             /* asked to leave by --schedule (SIGTERM): exit 0 is its goodbye */
  double t_start, t_exit;  /* seconds since the run began */
} child;

/* The ps's "workers" records kept for the summary: the count of training workers over time. */
#define PL_MAX_SERIES 512
typedef struct {
  double time, train_time;
  int workers;
  char why[12];            /* joined, departed, lost */
} pl_workers_point;

/* A worker that dies (a crash, kill -9, out of memory) is started again with its index, the
 * way systemd's Restart=on-failure does for the units: it rejoins its slot and the job goes
 * on. Past this many restarts of one worker, its failure ends the job. */
#define PL_WORKER_RESTARTS 3

/* Once every ps has finished the run, its workers are told so and exit by themselves; only
 * one still running after this long is stopped. (Stopping them at once raced with their own
 * exit: a worker that had just read "training complete" could take the SIGTERM first and exit
 * as stopped.) */
#define PL_DRAIN_S 10.0

typedef struct pl_run_ctx {
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
  /* An elastic job (issue 28, launcher/run/run_elastic.c). workers has room for every process
   * the schedule may start (cap_workers); job is what their command lines are made from. */
  const struct pl_job_s *job;
  int cap_workers;
  double epoch_samples;    /* samples per epoch, from the ps's data_epoch records */
  double trained;          /* samples trained, every epoch: the "trained" ranges' counts */
  int sched_next;          /* the next point of o->sched to act on */
  double sched_wait_since; /* a departure waiting for newcomers to join (0: none) */
  int ps_workers;          /* training workers, the ps's last "workers" record */
  int most_workers, joined, departed, lost;
  pl_workers_point series[PL_MAX_SERIES];
  int n_series;
} run_ctx;

#endif
