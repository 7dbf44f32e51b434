/* The worker's state: its options, each ps shard's connection, and the trainer's struct,
 * shared by every module of the training loop (trainer.c, step.c, register.c, shards.c,
 * obs.c). Types only: no code here calls any of them. */
#ifndef PSTRAIN_WORKER_STATE_H
#define PSTRAIN_WORKER_STATE_H

#include <stdatomic.h>
#include <stdint.h>
#include <uv.h>

#include "common/keep_awake.h"

#include "kernels/backend.h"
#include "kernels/partition.h"
#include "model/model.h"
#include "kernels/net.h"
#include "kernels/pipeline/pipeline.h"
#include "worker/client.h"
#include "data/data.h"
#include "data/imageops.h"
#include "worker/prefetch.h"
#include "worker/obs.h"

typedef struct {
  char host[256];
  int port;
} wk_ps_addr;

/* --push-by-layer and --pull-by-layer not given: on for a device that is not the CPU (a
 * GPU's compute is short against its transfers, and the null device stands for one), off
 * for the CPU, whose compute is the step (docs/benchmarks.md, issue 26). */
#define WK_LAYERED_AUTO (-1)

typedef struct {
  wk_ps_addr ps[PST_MAX_SHARDS]; /* the ps shards, in order (one without sharding) */
  int n_ps;
  const char *name;
  const char *data_dir;
  pst_image_opts image;      /* --image-size, --augment, --normalize, the folder split */
  const char *device;        /* auto, cpu, cuda, cuda:N */
  int threads;               /* CPU backend GEMM threads */
  int requested_index;       /* -1: any */
  const char *model;         /* "" to take the ps's model; else checked against it */
  double connect_timeout;    /* seconds to reach the ps at start */
  double reconnect_timeout;  /* seconds to keep reconnecting to a ps that was lost */
  size_t gpu_memory_limit_mib;
  /* Stages and micro-batches (issue 40, kernels/pipeline/pipeline.h): --stages, --place,
   * --micro-batches, --virtual-devices, --device-mem (MiB; 0: no cap). */
  int stages;
  const char *place;
  int micro_batches;
  int virtual_devices;
  size_t device_mem_mib;
  int log_placement;
  double slow_factor;        /* >1: sleep (factor-1) x compute time after each step */
  double delay_ms;           /* >0: each step's weights come and its push leaves this much
                              * later (a slow link, for experiments) */
  int push_by_layer;         /* push each layer's gradient as the backward pass makes it
                              * (last layer first) instead of the whole gradient after it */
  int pull_by_layer;         /* start each training step while its weights are arriving,
                              * each layer's forward pass once that layer's are in */
                             /* (either WK_LAYERED_AUTO until the device is open) */
  int layer_pieces;          /* run large dense layers in pieces of rows that follow the
                              * wire's chunks (kernels/net.h, pst_net_set_row_cuts), so that
                              * their transfers overlap their compute; WK_LAYERED_AUTO: on
                              * for a GPU or null device with push_by_layer or pull_by_layer */
  int shm;                   /* payloads through shared memory with a ps on this host
                              * (proto/ring.h, worker/client_ring.c) */
  int keep_awake;            /* keep the CPUs out of sleep states while training
                              * (common/keep_awake.h); WK_LAYERED_AUTO: on for a GPU or
                              * null device, off for the CPU */
  const pst_secret *secret;  /* the cluster secret, or NULL/unset */
  pst_tls_ctx *tls;          /* mutual TLS with the ps, or NULL */
  const char *tls_name;      /* with TLS: the name the ps's certificate must carry, or NULL */
  uint64_t leave_after_step; /* >0: leave the job after this many steps (the data handout) */
} wk_options;

typedef enum {
  WK_CONNECTING = 0,
  WK_REGISTERING,
  WK_PULLING,      /* a PULL is out, weights arriving */
  WK_COMPUTING,    /* a step or an evaluation is on the threadpool */
  WK_FINISHING,    /* BYE sent, waiting for SHUTDOWN */
  WK_STOPPED,
} wk_state;

/* WK_WORK_SUBSET: a dense evaluation on this worker's part of the test subset. */
typedef enum { WK_WORK_TRAIN, WK_WORK_EVAL, WK_WORK_SUBSET } wk_work_kind;

/* One ps shard's connection and what this worker knows of it. */
typedef struct {
  wk_client client;          /* client.data is the trainer */
  size_t offset, floats;     /* its part of the parameter vector */
  uint32_t chunk_floats;     /* its push chunk size */
  uint64_t version;          /* the version of its part in params */
  uint64_t start_step;       /* from its WELCOME this session */
  uint32_t eval_epoch;
  int welcomed;              /* its WELCOME of this session came */
  int pulled;                /* the last chunk of the pull in flight came */
  int pushing;               /* a push to it is still leaving */
  int shut;                  /* it said training is over */
  /* --pull-by-layer: how far its reply has come, under the trainer's pull_mu (the step
   * that waits for it reads them on the threadpool). pull_got: floats in, from its part's
   * start (the ps sends a reply's chunks in order); pull_done: the last chunk came. */
  int pull_begun;            /* its reply's first chunk has begun (loop only) */
  size_t pull_got;
  int pull_done;
  double hello_at;           /* its last HELLO went out (monotonic seconds; the clock offset) */
} wk_shard;
typedef struct wk_trainer {
  uv_loop_t *loop;
  wk_options opt;
  wk_state state;
  int n_ps;
  wk_shard ps[PST_MAX_SHARDS];
  const char *lost_why;      /* a shard was lost: every connection closes, then reconnects */
  char lost_buf[512];
  int losing;                /* closing the others after a loss */
  int refused;               /* a TLS refusal: a configuration error, no reconnection */
  uint64_t rollback_asked;   /* sync shards apart: 1 + the version the shards ahead were
                              * asked to go back to (0: none asked) */
  uv_signal_t sig_int, sig_term;
  uv_timer_t hb_timer;       /* heartbeats, and silence from the ps */
  double timeout_s;          /* from WELCOME: silence that means the ps is lost; 0 before */
  double hb_last_tick;       /* monotonic seconds of the timer's last run */
  int welcomed;              /* registered at least once: a lost ps is reconnected to */
  double reconnect_deadline; /* monotonic seconds; 0 while connected */
  double connect_deadline;   /* monotonic seconds: --connect-timeout from the start */
  int retry_unheard;         /* a connection closed before the ps said anything */
  int restart_pending;       /* a WELCOME came while a stale work item ran */
  int hello_pending;         /* reconnected while a stale work item ran: HELLO after it */
  uint32_t discarded;        /* gradients not pushed since the last HELLO (connection lost) */
  uv_work_t work;
  wk_work_kind work_kind;
  int work_running;
  /* Set on the loop when the connection breaks while a work item runs: the step is dropped
   * anyway, so its deliberate idling (--slow-factor, --delay-ms) on the threadpool ends at
   * once instead of holding back the HELLO (a SIGSTOP inside a slow step made --slow-factor
   * 4 sleep three times the stall, and the rejoin waited for it). */
  atomic_int work_abandoned;
  /* --push-by-layer: the backward pass (on the threadpool) stores how much of the gradient is
   * final (every float at or above grad_from) and wakes the loop, which queues those chunks
   * (on_grad_ready). layer_push: this step's push was begun that way and is still open. */
  uv_async_t grad_async;
  atomic_size_t grad_from;
  /* --layer-pieces: a layer made in rising pieces has [part_lo, part_hi) final
   * (kernels/net.h, pst_net_on_grad_part), under pull_mu; part_hi = 0: none this step. */
  size_t part_lo, part_hi;
  int layer_push;
  /* --pull-by-layer: a training step may start once shard 0's reply has begun (every EVAL
   * ask comes before it) and the last push has left; its forward pass then waits in
   * wk_params_wait, on the threadpool, for each layer's weights, which the loop marks in
   * under pull_mu and announces on pull_cond. pull_streaming: the step running started so
   * and its weights are not all in yet (loop only); work_streamed: the same, for the step
   * on the threadpool, fixed when it was queued. */
  uv_mutex_t pull_mu;
  uv_cond_t pull_cond;
  int pull_streaming, work_streamed;
  /* The next step's PULL sent during this step's backward pass, once the first layer's
   * chunk 0 is pushed (wk_pull_ahead; sync, one shard): its reply lands while this step
   * computes (pull_ahead), and may be in whole before it ends (pull_ahead_done); the end of
   * the step takes it as its pull (loop only). pull_step: the step a pull's chunks are for. */
  int pull_ahead, pull_ahead_done;
  uint64_t pull_step;
  uint64_t pulls_ahead;      /* pulls sent so, in all */
  int cuts_stale;            /* a WELCOME set the chunks: the net's pieces follow them at
                              * the next step (loop only; the net is the threadpool's while a
                              * step runs) */
  uint64_t steps_early;      /* training steps started before their weights were all in */
  uint64_t clipped;          /* gradients scaled down to the clip norm */
  double weights_wait;       /* seconds those steps waited in all for their weights */
  int closing;               /* the loop's handles are closing: the run is over */
  uint64_t chunks_pushed, chunks_early; /* push chunks, and of them those queued during compute */
  int stop_requested;
  /* From WELCOME. */
  int index, world;
  int mode;
  int epochs, batch;
  uint64_t seed;
  uint32_t chunk_floats;
  int report_every;
  int eval_every;                 /* steps between dense evaluations (0: off) */
  double clip_norm;               /* the job's gradient clip norm (0: none; WELCOME) */
  int eval_on_ps;                 /* the ps evaluates the epochs (WELCOME): none here */
  pst_model model;
  uint64_t model_fp;              /* --model's fingerprint, once read (0: none given yet) */
  /* Compute. */
  pst_backend *backend;           /* the first stage's (the pipeline owns it) */
  pst_pipe *net;                  /* the model on its stages (one by default)*/
  pst_dataset train, test;
  int classes;                    /* largest training label + 1 */
  int shard_begin, shard_end;     /* training samples of this worker */
  int test_begin, test_end;       /* test samples this worker evaluates */
  float data_mean[3], data_std[3];/* per data channel, for --normalize mean-std */
  pst_batch_prep prep;            /* how training batches are made for this model */
  pst_batch_prep test_prep;       /* the same for the test set (never augmented) */
  wk_prefetch prefetch;           /* the next training batch, prepared while a step runs */
  pst_keep_awake awake;           /* the CPUs kept out of sleep states (--keep-awake) */
  int32_t *order;                 /* [shard size]: this epoch's shuffled indices (the data
                                   * handout: [training samples], epoch order_epoch's order) */
  /* The data handout (issue 28; WELCOME data_ranges): the ps's range for the next step (its
   * DATA frame, rg_done: nothing left to train), its samples in rg_idx [batch] (padded with
   * its first when shorter), and a goodbye under way (leaving) or due after the step
   * (leave_pending: a SIGTERM, --leave-after-step). */
  int data_ranges;
  uint32_t rg_epoch, rg_count, order_epoch;
  uint64_t rg_start, rg_version;
  int rg_done, bye_sent, leaving, leave_pending;
  int32_t *rg_idx;
  pst_rng rng;
  float *params;                  /* [n_params] host: the pulled weights */
  float *grad;                    /* [n_params] host: the gradient being pushed */
  float *xb;                      /* [batch, input_size] */
  int32_t *yb;                    /* [batch] */
  uint64_t version;               /* version of params (the oldest shard's) */
  int have_weights;               /* params hold weights pulled in this session */
  int weights_fresh;              /* params hold a version not yet trained on */
  int push_in_flight;
  int epoch;                      /* 0-based epoch in progress */
  int step_in_epoch, steps_per_epoch;
  uint64_t steps;
  int eval_due;                   /* epoch `epoch` (1-based) finished, not yet evaluated */
  uint32_t subset_due;            /* dense evaluation point owed on params, or 0 */
  uint32_t subset_asked;          /* the ps's EVAL for the weights arriving, or 0 */
  int32_t *subset_idx;            /* [subset_n]: this worker's part of the test subset */
  int subset_n;
  /* Results of the last work item. */
  double w_loss;
  int w_correct, w_samples;
  double w_seconds;
  double w_wait;                  /* of w_seconds: the step's wait for its batch */
  double w_weights_wait;          /* not in w_seconds: its wait for streamed weights */
  double w_run_at, w_ran_at;      /* monotonic seconds the work item began and ended */
  int w_rc;
  /* The report window. */
  double r_loss, r_seconds, r_wait;
  uint64_t r_correct, r_samples;
  double e_loss;                  /* this epoch's training figures */
  uint64_t e_correct, e_samples;
  double e_seconds;
  double e_wait;                  /* this epoch's seconds of waiting for data */
  wk_obs obs;                     /* timings for /metrics (worker/obs.h) */
  /* The timeline (--timeline, common/timeline.h): the last PULL went out at tl_pull_at, for an
   * evaluation's weights (tl_pull_eval) or a step's; the training step on the threadpool is
   * step tl_step, its weights asked for at tl_step_at, queued at tl_queued_at. */
  double tl_pull_at, tl_step_at, tl_queued_at;
  int tl_pull_eval;
  uint64_t tl_step;
  int exit_code;
} wk_trainer;

/* The index of a shard of t's. */
static inline int wk_shard_index(const wk_trainer *t, const wk_shard *sh) {
  return (int)(sh - t->ps);
}

#endif
