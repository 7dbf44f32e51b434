/* What a worker shows to the outside while it runs: /metrics on its own port
 * (--metrics-listen), served by common/http.h from the worker's loop.
 *
 * The timings only /metrics needs (how long pulls and pushes take, how a step's time splits
 * between computing and waiting) are kept here, in wk_obs, fed by a few calls from the
 * trainer; every other figure is read at scrape time from the trainer's own state, the
 * same state its log and STATUS line come from (worker/status.h, which renders both). wk_obs
 * knows nothing of the trainer. */
#ifndef PSTRAIN_WORKER_OBS_H
#define PSTRAIN_WORKER_OBS_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/http.h"
#include "common/prom.h"

#define WK_STEP_PARTS 7

typedef struct {
  pst_hist pull_seconds;    /* PULL sent .. the reply's last chunk in */
  pst_hist push_seconds;    /* push queued .. its last chunk handed to the kernel */
  pst_hist step_seconds;    /* one training step to the next, all included */
  double pull_at, push_at;  /* monotonic seconds of the pending pull and push (0: none) */
  double last_step_at;      /* monotonic seconds the newest step's compute finished */
  double first_step_at;     /* ... and the first's began */
  double compute_seconds;   /* on the threadpool, training steps */
  double wait_seconds;      /* between steps, not computing: pulls, pushes, the others */
  double data_seconds;      /* of compute_seconds, gathering the batches */
  double gather_seconds;    /* the step on the threadpool: its gather (written there; read
                             * only by wk_obs_step_done, after the step's work is done) */
  uint64_t samples;         /* trained */
  int epochs_trained;       /* the newest epoch whose steps are all done (1-based; 0: none) */
  /* A training step's time, part by part in the order they come (monotonic seconds of the
   * step in progress, and each part's sum over the steps): queued for the threadpool,
   * computing (waits for streamed weights included), back to the loop, the push's exposed
   * part, the round trip (the push's last byte out to the reply's first in), the rest of the
   * reply, and the loop until the next step is queued. Parts that the layer-by-layer flags
   * overlap with others count 0. */
  double queued_at, run_at, ran_at, done_at, in_at;
  double part[WK_STEP_PARTS];
  uint64_t parted_steps;
  double epoch_loss;        /* its training loss */
} wk_obs;

void wk_obs_init(wk_obs *o);
/* A PULL went out; its weights are all in. */
void wk_obs_pull_sent(wk_obs *o);
void wk_obs_weights_in(wk_obs *o);
/* A training step's compute finished (seconds it took, samples), and its push starts. */
void wk_obs_step_done(wk_obs *o, double compute_seconds, int samples);
/* The push has left. */
void wk_obs_push_sent(wk_obs *o);
/* A training step is queued for the threadpool (closing the step before's time, given its
 * push's last byte out and its reply's first byte in, 0 when unknown); it runs from run_at
 * to ran_at (threadpool seconds); its end reaches the loop. */
void wk_obs_step_queued(wk_obs *o, double pushed_at, double reply_at);
void wk_obs_step_ran(wk_obs *o, double run_at, double ran_at);
/* One line of the parts' means (wk_obs's part), for the log. */
void wk_obs_step_parts(const wk_obs *o, char *buf, size_t len);
#endif
