/* Inside a local run (launcher/run/run.h): what every process of the job is told besides the
 * options, built once by pl_run_local (launcher/run/run.c), and the command lines made from it
 * (launcher/run/run_args.c). */
#ifndef PSTRAIN_LAUNCHER_RUN_ARGS_H
#define PSTRAIN_LAUNCHER_RUN_ARGS_H

#include <limits.h>

#include "kernels/partition.h"
#include "launcher/run/options.h"

typedef struct pl_job_s {
  char ps_bin[PATH_MAX], wk_bin[PATH_MAX];
  int n_ps;                       /* ps shards (1: one ps) */
  int workers;
  int ps_threads;                 /* each ps's --threads */
  int ports[PST_MAX_SHARDS];      /* on ps_host, shard by shard */
  char ps_host[32];               /* 127.0.0.1, or the hub's address behind --link */
  char shard_host[PST_MAX_SHARDS][32]; /* each shard's address (its node's behind --link) */
  /* --mode allreduce behind --link: iproute2's ip and the workers' namespaces' name without
   * the rank (launcher/links/link.h), which each rank's wrapper completes; NULL: loopback. */
  const char *ns_ip;
  char ns_prefix[64];
  char ps_list[PST_MAX_SHARDS * 24]; /* the workers' --ps */
  int n_gpus, gpu_ids[64];        /* --gpus (0: none given) */
  char metrics[PATH_MAX], summary[PATH_MAX]; /* shard 0's */
  char secret[PATH_MAX];          /* the cluster secret's file; "" for none (--insecure) */
  /* --tls: the throwaway CA and certificates in the run directory. */
  char tls_ca[PATH_MAX], tls_srv[PATH_MAX], tls_srv_key[PATH_MAX], tls_cli[PATH_MAX],
      tls_cli_key[PATH_MAX];
} pl_job;

/* The command line of ps shard `shard`, and of worker `index`. */
void pl_ps_argv(const pl_run_options *o, const pl_job *j, int shard, pl_argv *a);
/* Whether the job's ps and workers use shared memory (--shm, never behind --link). */
int pl_shm_on(const pl_run_options *o);
void pl_worker_argv(const pl_run_options *o, const pl_job *j, int index, pl_argv *a);
/* A worker of slot `slot` (its log, name and per-worker flags) asking the ps for `index`
 * (-1: any free one, as workers a --schedule starts do). */
void pl_worker_argv_slot(const pl_run_options *o, const pl_job *j, int index, int slot,
                         pl_argv *a);
/* The data flags (--image-size, --augment, ...) as given to the launcher, for a process that
 * loads the data. */
void pl_data_flags_argv(pl_argv *a, const pl_run_options *o);
/* The ps's own check of every flag the launcher passes on (the checkpoint flags go to it as
 * given, so that its defaults and bounds are the only ones): shard 0's command line with
 * --print-config, before anything starts. Returns 0, or 2 with the ps's reason printed in one
 * line, or 1 when it could not be run. */
int pl_check_ps_flags(const pl_run_options *o, const pl_job *j);
/* The same check of any pstrain daemon's command line (who names it in the message when it
 * gives no reason): cmd with --print-config added, run once. */
int pl_check_flags(pl_argv *cmd, const char *who);

#endif
