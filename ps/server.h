/* The ps's network side: one libuv loop, a listening socket, one connection struct per
 * peer, the worker registry, and the shutdown sequence. */
#ifndef PSTRAIN_PS_SERVER_H
#define PSTRAIN_PS_SERVER_H

#include <stdint.h>
#include <uv.h>

#include "kernels/model.h"
#include "ps/metrics.h"
#include "ps/optim.h"
#include "ps/store.h"
#include "ps/update.h"

/* Everything the ps is told at start (see ps/main.c for the flags). */
typedef struct {
  char listen_host[256];
  int listen_port;
  int workers;
  pst_mode mode;
  int staleness;          /* ssp bound */
  int backup_workers;     /* sync: steps need N-K gradients */
  int epochs;
  int batch_size;         /* per worker */
  uint64_t seed;
  uint32_t chunk_floats;
  int report_every;       /* steps between the workers' loss reports */
  double status_interval; /* seconds between status log lines; 0 = off */
  const char *model_name; /* as given: a preset name or a spec file */
  const char *metrics_path;
  const char *summary_path;
  pst_opt_config opt;
} ps_options;

typedef struct ps_conn ps_conn;

typedef struct {
  ps_conn *conn;
  char name[64];
  int done;               /* sent BYE */
  uint64_t last_version;  /* version its last push was computed on */
  uint64_t last_staleness;
  uint64_t pushes;
  uint64_t dropped;       /* gradients of this worker dropped (backup workers) */
} ps_worker;

typedef struct ps_server {
  uv_loop_t *loop;
  uv_tcp_t listener;
  uv_signal_t sig_int, sig_term;
  uv_timer_t status_timer;
  ps_options opt;
  const pst_model *model;
  pst_store store;
  pst_optimizer optim;
  pst_update upd;
  pst_metrics metrics;
  ps_worker *workers;     /* [opt.workers] */
  int registered, finished; /* finished: said BYE (no more pushes) */
  int final_evals;        /* evaluations of the last epoch received */
  ps_conn *conns;         /* every open connection, linked */
  uint64_t max_lead;      /* ssp: the largest lead any answered pull had over the slowest */
  int kicking, kick_again;
  int stopping;           /* shutdown begun */
  int exit_code;
} ps_server;

/* Sets up everything and starts listening. Returns 0 or a negative code with a one-line
 * reason in err (e.g. the address is in use). */
int ps_server_start(ps_server *s, uv_loop_t *loop, const ps_options *opt, const pst_model *model,
                    const float *init_params, char *err, size_t errlen);
/* Tells every worker why, closes every handle; the loop then ends by itself. */
void ps_server_stop(ps_server *s, const char *reason, int failed);
/* Frees what remains after the loop has ended. */
void ps_server_free(ps_server *s);

#endif
