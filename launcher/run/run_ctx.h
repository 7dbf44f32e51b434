/* Inside `pstrain local` (launcher/run/run.c): the run's state, and its child processes
 * (launcher/run/run_children.c: starting them, restarting a worker that died, stopping them,
 * and what their logs say when one fails). */
#ifndef PSTRAIN_LAUNCHER_RUN_CTX_H
#define PSTRAIN_LAUNCHER_RUN_CTX_H

#include <limits.h>
#include <stdio.h>
#include <uv.h>

#include "kernels/partition.h"
#include "launcher/links/link.h"
#include "launcher/run/run.h"

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

/* launcher/run/run_elastic.c. A metrics record that concerns an elastic job (the data handout's
 * and the "workers" records); 1 when it was one. */
int pl_elastic_record(run_ctx *r, const char *event, const void *record);
/* Acts on the schedule's points that training has reached: called from the run's timer. */
void pl_elastic_tick(run_ctx *r);
/* At the end: the workers over time on stdout (unless quiet) and, with every process's
 * outcome, in run_dir/elastic.json; fills res's figures. */
void pl_elastic_report(run_ctx *r, pl_run_result *res);

/* Starts c with argv (behind --link, in its namespace), its output in c->log. 0 or a
 * negative error code, said on stderr. */
int pl_spawn(run_ctx *r, child *c, char **argv);
/* Tells c, or every process, to stop with sig: once each, except SIGKILL. */
void pl_stop_one(child *c, int sig);
void pl_stop_all(run_ctx *r, int sig);
/* A heap copy of argv[0..n) with its NULL, or NULL. */
char **pl_argv_dup(char **argv, int n);
/* Every ps shard has exited (or never started). */
int pl_ps_all_exited(const run_ctx *r);
/* The last line of a log, without its level prefix ("" when none). */
void pl_last_line(const char *log, char *out, size_t outlen);

#endif
