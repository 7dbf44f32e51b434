/* The worker's own timings for /metrics (worker/obs.h). The status line and /metrics text,
 * which read the whole trainer, are in status.c. */
#include "worker/obs.h"

#include <stdio.h>
#include <string.h>

#include "common/clock.h"

void wk_obs_init(wk_obs *o) {
  memset(o, 0, sizeof *o);
  pst_hist_init_seconds(&o->pull_seconds);
  pst_hist_init_seconds(&o->push_seconds);
  pst_hist_init_seconds(&o->step_seconds);
}

void wk_obs_pull_sent(wk_obs *o) { o->pull_at = pst_now(); }

void wk_obs_weights_in(wk_obs *o) {
  o->in_at = pst_now();
  if (o->pull_at > 0) pst_hist_observe(&o->pull_seconds, o->in_at - o->pull_at);
  o->pull_at = 0;
}

void wk_obs_step_done(wk_obs *o, double compute_seconds, int samples) {
  double now = pst_now();
  if (o->last_step_at > 0) {
    double step = now - o->last_step_at;
    pst_hist_observe(&o->step_seconds, step);
    /* What of the step was not this step's compute: waiting for the weights, the push of
     * the step before, and (sync) the slowest worker. */
    if (step > compute_seconds) o->wait_seconds += step - compute_seconds;
  } else {
    o->first_step_at = now - compute_seconds;
  }
  o->last_step_at = now;
  o->compute_seconds += compute_seconds;
  o->data_seconds += o->gather_seconds;
  o->samples += (uint64_t)(samples > 0 ? samples : 0);
  o->push_at = now;
}

void wk_obs_push_sent(wk_obs *o) {
  if (o->push_at > 0) pst_hist_observe(&o->push_seconds, pst_now() - o->push_at);
  o->push_at = 0;
}

void wk_obs_step_ran(wk_obs *o, double run_at, double ran_at) {
  o->run_at = run_at;
  o->ran_at = ran_at;
  o->done_at = pst_now();
}

static double span(double from, double to) { return from > 0 && to > from ? to - from : 0; }

void wk_obs_step_queued(wk_obs *o, double pushed_at, double reply_at) {
  double now = pst_now();
  if (o->queued_at > 0 && o->done_at > o->queued_at) {
    /* The weights were all in at in_at (0 when the step started before: --pull-by-layer). */
    double in = o->in_at > o->done_at ? o->in_at : 0;
    double p[WK_STEP_PARTS] = {
        span(o->queued_at, o->run_at),
        span(o->run_at, o->ran_at),
        span(o->ran_at, o->done_at),
        pushed_at > o->done_at ? span(o->done_at, pushed_at) : 0,
        pushed_at > o->done_at ? span(pushed_at, reply_at) : span(o->done_at, reply_at),
        in ? span(reply_at > o->done_at ? reply_at : o->done_at, in) : 0,
        span(in ? in : reply_at, now),
    };
    for (int i = 0; i < WK_STEP_PARTS; i++) o->part[i] += p[i];
    o->parted_steps++;
  }
  o->queued_at = now;
  o->in_at = 0;
}

void wk_obs_step_parts(const wk_obs *o, char *buf, size_t len) {
  static const char *const names[WK_STEP_PARTS] = {"to the threadpool", "computing",
                                                  "back to the loop", "pushing",
                                                  "round trip", "pulling", "to the next step"};
  size_t n = 0;
  buf[0] = '\0';
  for (int i = 0; i < WK_STEP_PARTS && n < len; i++)
    n += (size_t)snprintf(buf + n, len - n, "%s%s %.3f", i ? ", " : "", names[i],
                          o->parted_steps ? o->part[i] * 1e3 / (double)o->parted_steps : 0.0);
}
