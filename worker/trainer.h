/* The worker's training loop as a state machine on the event loop:
 *
 *   connect -> HELLO -> WELCOME (model, shard, epochs) -> load data, build the net
 *   -> PULL -> WEIGHTS (chunks land straight in the parameter buffer)
 *   -> compute on the threadpool (the loop stays free for the socket)
 *   -> PUSH (chunks straight from the gradient buffer) -> PULL -> ...
 *   after each epoch: PULL, evaluate the test shard, REPORT; after the last: BYE, and exit
 *   when the ps says SHUTDOWN. */
#ifndef PSTRAIN_WORKER_TRAINER_H
#define PSTRAIN_WORKER_TRAINER_H

#include <stdint.h>
#include <uv.h>

#include "kernels/backend.h"
#include "kernels/model.h"
#include "kernels/net.h"
#include "worker/client.h"
#include "worker/data.h"
#include "worker/obs.h"

typedef struct {
  char ps_host[256];
  int ps_port;
  const char *name;
  const char *data_dir;
  const char *device;        /* auto, cpu, cuda, cuda:N */
  int threads;               /* CPU backend GEMM threads */
  int requested_index;       /* -1: any */
  const char *model;         /* "" to take the ps's model; else checked against it */
  double connect_timeout;    /* seconds to reach the ps at start */
  double reconnect_timeout;  /* seconds to keep reconnecting to a ps that was lost */
  size_t gpu_memory_limit_mib;
  int log_placement;
  double slow_factor;        /* >1: sleep (factor-1) x compute time after each step */
  const pst_secret *secret;  /* the cluster secret, or NULL/unset */
  pst_tls_ctx *tls;          /* mutual TLS with the ps, or NULL */
  const char *tls_name;      /* with TLS: the name the ps's certificate must carry, or NULL */
} wk_options;

typedef enum {
  WK_CONNECTING = 0,
  WK_REGISTERING,
  WK_PULLING,      /* a PULL is out, weights arriving */
  WK_COMPUTING,    /* a step or an evaluation is on the threadpool */
  WK_FINISHING,    /* BYE sent, waiting for SHUTDOWN */
  WK_STOPPED,
} wk_state;

typedef enum { WK_WORK_TRAIN, WK_WORK_EVAL } wk_work_kind;

typedef struct wk_trainer {
  uv_loop_t *loop;
  wk_options opt;
  wk_state state;
  wk_client client;
  uv_signal_t sig_int, sig_term;
  uv_timer_t hb_timer;       /* heartbeats, and silence from the ps */
  double timeout_s;          /* from WELCOME: silence that means the ps is lost; 0 before */
  double hb_last_tick;       /* monotonic seconds of the timer's last run */
  int welcomed;              /* registered at least once: a lost ps is reconnected to */
  double reconnect_deadline; /* monotonic seconds; 0 while connected */
  int restart_pending;       /* a WELCOME came while a stale work item ran */
  int hello_pending;         /* reconnected while a stale work item ran: HELLO after it */
  uint32_t discarded;        /* gradients not pushed since the last HELLO (connection lost) */
  uv_work_t work;
  wk_work_kind work_kind;
  int work_running;
  int stop_requested;
  /* From WELCOME. */
  int index, world;
  int mode;
  int epochs, batch;
  uint64_t seed;
  uint32_t chunk_floats;
  int report_every;
  pst_model model;
  /* Compute. */
  pst_backend *backend;
  pst_net *net;
  pst_dataset train, test;
  int classes;                    /* largest training label + 1 */
  int shard_begin, shard_end;     /* training samples of this worker */
  int test_begin, test_end;       /* test samples this worker evaluates */
  int32_t *order;                 /* [shard size]: this epoch's shuffled indices */
  pst_rng rng;
  float *params;                  /* [n_params] host: the pulled weights */
  float *grad;                    /* [n_params] host: the gradient being pushed */
  float *xb;                      /* [batch, input_size] */
  int32_t *yb;                    /* [batch] */
  uint64_t version;               /* version of params */
  int have_weights;               /* params hold weights pulled in this session */
  int weights_fresh;              /* params hold a version not yet trained on */
  int push_in_flight;
  int epoch;                      /* 0-based epoch in progress */
  int step_in_epoch, steps_per_epoch;
  uint64_t steps;
  int eval_due;                   /* epoch `epoch` (1-based) finished, not yet evaluated */
  /* Results of the last work item. */
  double w_loss;
  int w_correct, w_samples;
  double w_seconds;
  int w_rc;
  /* The report window. */
  double r_loss, r_seconds;
  uint64_t r_correct, r_samples;
  double e_loss;                  /* this epoch's training figures */
  uint64_t e_correct, e_samples;
  double e_seconds;
  wk_obs obs;                     /* timings for /metrics (worker/obs.h) */
  int exit_code;
} wk_trainer;

/* Loads the data and starts connecting. 0, or a negative code with a reason in err. */
int wk_trainer_start(wk_trainer *t, uv_loop_t *loop, const wk_options *opt, char *err,
                     size_t errlen);
/* Frees everything after the loop has ended. */
void wk_trainer_free(wk_trainer *t);

#endif
