/* The training steps: the work on the threadpool (a training step, an evaluation, a dense
 * evaluation point) and what follows each on the loop: the push, the reports, the next
 * pull. trainer.c keeps the sessions with the ps (connecting, registering, reconnecting,
 * liveness) and calls in here once the weights are in (wk_next_work) and once every shard
 * has welcomed this worker (wk_enter_session). This file calls registration (register.c)
 * and the shards' group (shards.c), never trainer.c. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/fnv.h"
#include "common/log.h"
#include "common/notify.h"
#include "common/timeline.h"
#include "worker/grad_clip.h"
#include "worker/layer_push.h"
#include "worker/position.h"
#include "worker/register.h"
#include "worker/shards.h"
#include "worker/status.h"
#include "worker/step.h"

static void send_simple(wk_trainer *t, Pstrain__MsgType type, uint64_t version) {
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  h.type = type;
  h.version = version;
  wk_send_all(t, &h);
}

/* checksum: an evaluation's, of the whole weights it was taken on (0 for training figures). */
static void send_report(wk_trainer *t, int is_eval, double loss, uint64_t correct,
                        uint64_t samples, double seconds, double data_wait, uint64_t checksum) {
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  Pstrain__Report r = PSTRAIN__REPORT__INIT;
  r.epoch = (uint32_t)(is_eval ? t->eval_due : t->epoch + 1);
  r.step = t->steps;
  r.is_eval = is_eval != 0;
  r.loss_sum = loss;
  r.correct = correct;
  r.samples = samples;
  r.compute_seconds = seconds;
  r.data_wait_seconds = data_wait;
  if (is_eval) r.weights_version = t->version;
  r.weights_checksum = checksum;
  h.type = PSTRAIN__MSG_TYPE__REPORT;
  h.report = &r;
  wk_send_all(t, &h);
}

/* A new reply is coming from every shard: nothing of it is in yet. */
static void reset_shards(wk_trainer *t) {
  uv_mutex_lock(&t->pull_mu);
  for (int i = 0; i < t->n_ps; i++) {
    wk_shard *sh = &t->ps[i];
    sh->pulled = sh->pull_begun = sh->pull_done = 0;
    sh->pull_got = 0;
  }
  uv_mutex_unlock(&t->pull_mu);
}

static void pull_reset(wk_trainer *t) {
  t->state = WK_PULLING;
  t->pull_streaming = 0;
  t->pull_ahead = t->pull_ahead_done = 0; /* a reconnection's pull replaces one sent ahead */
  t->pull_step = t->steps;
  reset_shards(t);
}

static void send_pull(wk_trainer *t);

/* Which version to ask for next. sync: the one after ours (answered once every worker's
 * gradient for ours is in). async and ssp: whatever is newest (ssp's bound is the ps's). */
static void pull(wk_trainer *t) {
  /* The timeline's step begins with the PULL of its weights (worker/state.h). */
  pst_tl_step(t->steps);
  t->tl_pull_at = pst_now();
  t->tl_pull_eval = t->eval_due != 0;
  pull_reset(t);
  send_pull(t);
}

/* The PULL of the weights after t->version (sync) or the newest, to every shard. */
static void send_pull(wk_trainer *t) {
  wk_obs_pull_sent(&t->obs);
  int sync = t->mode == PSTRAIN__MODE__MODE_SYNC;
  /* sync, just (re)registered: the version of the step the slot stands at, which the ps may
   * still be building (a slot whose push was in whole when its connection broke stands at
   * the next step): asking for whatever is newest would have a step's batch computed on
   * another step's weights. A shard a step ahead answers its newest, as it always has. */
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  h.type = PSTRAIN__MSG_TYPE__PULL;
  h.version = !sync ? 0 : t->have_weights ? t->version + 1 : t->steps;
  /* Delta pulls: the weights of an epoch's evaluation must be the ps's own, in float32. The
   * ps decides the rest (a connection's first reply, the final weights, a dense
   * evaluation's are float32 too: ps/net/pull.c). */
  h.delta = t->ps[0].client.pull_enc == PST_ENC_DELTA && !t->eval_due;
  wk_send_all(t, &h);
  if (pst_tl_on()) {
    /* Recording: each step asks every shard for its clock, so that the offset between the
     * clocks is taken from the narrowest of many brackets, not the registration's alone (a
     * busy host made that one a few ms wide). An older ps does not answer. */
    Pstrain__Header p = PSTRAIN__HEADER__INIT;
    p.type = PSTRAIN__MSG_TYPE__HEARTBEAT;
    for (int i = 0; i < t->n_ps; i++) {
      p.clock_probe = pst_now();
      wk_client_send(&t->ps[i].client, &p);
    }
  }
}

void wk_pull_ahead(wk_trainer *t) {
  /* Only where nothing else may come between this step's end and the next one's pull: one
   * shard, sync, no evaluation, leave or epoch end after this step, no delta pull (its chunks
   * add to the weights). Not on the CPU: its backward pass reads the host weights, which
   * the reply overwrites; a GPU's (and the null device's) read the device's own copy, and
   * this step's forward pass is over. */
  if (t->pull_ahead || t->state != WK_COMPUTING || t->work_kind != WK_WORK_TRAIN ||
      !t->work_running || !t->layer_push || t->pull_streaming || t->n_ps != 1 ||
      t->mode != PSTRAIN__MODE__MODE_SYNC || !t->opt.pull_by_layer ||
      strncmp(t->backend->name, "cpu", 3) == 0 || t->data_ranges || t->eval_every > 0 ||
      t->eval_due || t->subset_due || t->subset_asked || t->stop_requested ||
      t->leave_pending || t->opt.leave_after_step > 0 || !t->have_weights ||
      t->ps[0].client.pull_enc == PST_ENC_DELTA || t->epoch >= t->epochs ||
      t->step_in_epoch + 1 >= t->steps_per_epoch || !wk_client_head_out(&t->ps[0].client))
    return;
  t->tl_pull_at = pst_now();
  t->tl_pull_eval = 0;
  t->pull_step = t->steps + 1;
  reset_shards(t);
  send_pull(t);
  t->pull_ahead = 1;
  t->pulls_ahead++;
}

void wk_on_grad_async(uv_async_t *a) {
  wk_on_grad_ready(a);
  wk_pull_ahead(a->data); /* the first layer's chunk 0 may have gone just now */
}

/* The end of a step whose successor's PULL went ahead: that pull is this step's now. */
static void take_pull_ahead(wk_trainer *t) {
  int done = t->pull_ahead_done;
  t->pull_ahead = t->pull_ahead_done = 0;
  t->state = WK_PULLING;
  pst_tl_step(t->steps);
  if (done) {
    t->weights_fresh = 1;
    if (!t->push_in_flight) wk_next_work(t); /* else on_push_sent's */
  } else {
    wk_try_early_step(t);
  }
}

/* After the last push: BYE (no more gradients from us), then the final weights, which the
 * ps sends once every worker has said BYE, so the last evaluation sees the final model in
 * every mode. */
static void pull_final(wk_trainer *t) {
  send_simple(t, PSTRAIN__MSG_TYPE__BYE, t->version);
  t->bye_sent = 1;
  pull_reset(t);
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  h.type = PSTRAIN__MSG_TYPE__PULL;
  h.last = 1;
  wk_send_all(t, &h);
}

/* The first exchange of a session with the ps (after every WELCOME): weights to train on,
 * or, with every epoch done, the final weights for the last evaluation. */
void wk_begin_session(wk_trainer *t) {
  if (t->epoch < t->epochs)
    pull(t);
  else
    pull_final(t);
}

/* Every shard has welcomed this worker (register.c's wk_on_welcome said so): start where the
 * slot stands, and begin the session, or leave that to the end of a stale work item. */
void wk_enter_session(wk_trainer *t, const wk_welcomed *w) {
  uint64_t start = w->start_step;
  int again = w->again;
  wk_take_position(t, start, w->evals_done);
  if (t->data_ranges && (again || start > 0))
    LOG_INFO("%s: the ps hands out the data; this worker takes part from version %" PRIu64,
             again ? "registered again" : "joined a running job", start);
  else if (again || start > 0)
    LOG_INFO("%s at step %" PRIu64 " of the shard: epoch %d/%d, step %d of %d%s",
             again ? "registered again" : "resuming", start,
             t->epoch < t->epochs ? t->epoch + 1 : t->epochs, t->epochs, t->step_in_epoch,
             t->steps_per_epoch, t->eval_due ? ", evaluating the last epoch first" : "");
  if (!again) pst_notify_ready(); /* registered and set up: under systemd, the service is up */
  if (t->work_running) {
    t->state = WK_REGISTERING; /* the stale work item's end starts the session */
    t->restart_pending = 1;
    return;
  }
  wk_begin_session(t);
}

/* ---- work on the threadpool ---- */

/* Sleeps on the threadpool for `s` seconds, in slices, until the loop abandons the step. */
static void idle(wk_trainer *t, double s) {
  double end = pst_now() + s;
  for (double left = s; left > 0 && !atomic_load(&t->work_abandoned); left = end - pst_now()) {
    double slice = left < 0.02 ? left : 0.02;
    struct timespec ts = {(time_t)slice, (long)((slice - floor(slice)) * 1e9)};
    nanosleep(&ts, NULL);
  }
}

/* --delay-ms: the link's delay, slept on the threadpool so that the loop stays free. */
static void delay_step(wk_trainer *t) {
  if (t->work_kind != WK_WORK_TRAIN || !(t->opt.delay_ms > 0)) return;
  idle(t, t->opt.delay_ms / 1e3);
}

/* --pull-by-layer, on the threadpool: whether params[0, upto) is in, under pull_mu. The
 * vector is the shards' parts in order, and each shard's reply fills its part in order; a
 * shard whose reply has ended has all of its part in, whatever order its chunks came in
 * (pull_got stops at a chunk out of order: a lying ps once hung a step that waited on it). */
static int params_in(const wk_trainer *t, size_t upto) {
  for (int i = 0; i < t->n_ps; i++) {
    const wk_shard *sh = &t->ps[i];
    if (sh->offset >= upto || sh->pull_done) continue;
    if (upto >= sh->offset + sh->floats || sh->pull_got < upto - sh->offset) return 0;
  }
  return 1;
}

/* The forward pass's wait for its weights (kernels/net.h): until they are in, or the step
 * is abandoned (a connection broke, or a signal came), which ends the step. */
static int params_wait(void *ctx, size_t upto) {
  wk_trainer *t = ctx;
  double t0 = pst_now();
  uv_mutex_lock(&t->pull_mu);
  while (!atomic_load(&t->work_abandoned) && !params_in(t, upto))
    uv_cond_wait(&t->pull_cond, &t->pull_mu);
  int rc = atomic_load(&t->work_abandoned) ? -ECANCELED : 0;
  /* Under the lock: with stages, each stage's thread waits for its own layers. */
  double t1 = pst_now();
  t->w_weights_wait += t1 - t0;
  uv_mutex_unlock(&t->pull_mu);
  if (pst_tl_on() && t1 - t0 > 1e-6)
    pst_tl_span("worker", "wait for weights", t0, t1, PST_TL_STEP(t->tl_step, -1));
  return rc;
}

static void work_run(uv_work_t *req) {
  wk_trainer *t = req->data;
  if (pst_tl_on()) pst_tl_thread("threadpool");
  delay_step(t); /* the pulled weights arrive late */
  double t0 = pst_now();
  t->w_loss = 0;
  t->w_correct = 0;
  t->w_samples = 0;
  t->w_wait = 0;
  t->w_weights_wait = 0;
  t->w_rc = t->work_streamed ? pst_pipe_load_params_streamed(t->net, t->params, params_wait, t)
                             : pst_pipe_load_params(t->net, t->params);
  if (t->w_rc < 0) return;
  if (t->work_kind == WK_WORK_TRAIN && t->data_ranges) {
    /* The ps's range (wk_take_range): a short one trains its samples alone; none, a zero
     * share, so that the sync step goes on without waiting for this worker. */
    int n = (int)t->rg_count;
    if (n == 0) {
      memset(t->grad, 0, t->model.n_params * sizeof(float));
    } else {
      double d0 = pst_now();
      t->w_wait = wk_prefetch_take_swap(&t->prefetch, t->steps, t->rg_idx, &t->xb, &t->yb,
                                        (size_t)t->batch * t->model.input_size);
      t->obs.gather_seconds = pst_now() - d0;
      if (pst_tl_on())
        pst_tl_span("worker", "gather batch", d0, d0 + t->obs.gather_seconds,
                    PST_TL_STEP(t->tl_step, -1));
      float scale = 1.0f / ((float)t->batch * (float)t->world);
      pst_pipe_set_seed(t->net, (t->seed * 0x9e3779b97f4a7c15ull + (uint64_t)t->index) *
                                       0xbf58476d1ce4e5b9ull +
                                   t->steps);
      t->w_rc = pst_pipe_train_step(t->net, t->xb, t->yb, n, scale, t->grad, &t->w_loss,
                                   &t->w_correct);
      if (t->w_rc == 0 && t->clip_norm > 0)
        t->clipped += (uint64_t)wk_clip_gradient(&t->model, t->grad, t->world, t->clip_norm);
    }
    t->w_samples = n;
  } else if (t->work_kind == WK_WORK_TRAIN) {
    const int32_t *idx = t->order + (size_t)t->step_in_epoch * t->batch;
    double d0 = pst_now();
    t->w_wait = wk_prefetch_take_swap(&t->prefetch, t->steps, idx, &t->xb, &t->yb,
                                      (size_t)t->batch * t->model.input_size);
    t->obs.gather_seconds = pst_now() - d0; /* taken in by wk_obs_step_done, on the loop */
    if (pst_tl_on())
      pst_tl_span("worker", "gather batch", d0, d0 + t->obs.gather_seconds,
                  PST_TL_STEP(t->tl_step, -1));
    /* The next batch of this epoch is made while this step computes (the next epoch's
     * first batch is asked for once its order is drawn, in after_train). */
    if (t->step_in_epoch + 1 < t->steps_per_epoch)
      wk_prefetch_ask(&t->prefetch, t->steps + 1, idx + t->batch);
    /* The loss is the sum over this worker's batch divided by the global batch b x N. */
    float scale = 1.0f / ((float)t->batch * (float)t->world);
    /* Dropout masks: a pure function of the job seed, this worker's index and the global
     * step, so that a sync run (or a resumed one, which replays the same steps) draws the
     * same masks, while workers and steps all draw different ones. */
    pst_pipe_set_seed(t->net, (t->seed * 0x9e3779b97f4a7c15ull + (uint64_t)t->index) *
                                     0xbf58476d1ce4e5b9ull +
                                 t->steps);
    t->w_rc = pst_pipe_train_step(t->net, t->xb, t->yb, t->batch, scale, t->grad, &t->w_loss,
                                 &t->w_correct);
    if (t->w_rc == 0 && t->clip_norm > 0)
      t->clipped += (uint64_t)wk_clip_gradient(&t->model, t->grad, t->world, t->clip_norm);
    t->w_samples = t->batch;
  } else {
    int32_t *idx = malloc((size_t)t->batch * sizeof *idx);
    if (!idx) {
      t->w_rc = -ENOMEM;
      return;
    }
    /* The test shard [test_begin, test_end), or this worker's part of the subset. */
    const int32_t *list = t->work_kind == WK_WORK_SUBSET ? t->subset_idx : NULL;
    int lo = list ? 0 : t->test_begin, hi = list ? t->subset_n : t->test_end;
    for (int b = lo; b < hi && t->w_rc == 0; b += t->batch) {
      int n = hi - b < t->batch ? hi - b : t->batch;
      for (int i = 0; i < n; i++) idx[i] = list ? list[b + i] : b + i;
      pst_batch_fill(&t->test_prep, idx, n, 0, 0, t->xb, t->yb);
      double loss = 0;
      int correct = 0;
      t->w_rc = pst_pipe_evaluate(t->net, t->xb, t->yb, n, &loss, &correct);
      t->w_loss += loss;
      t->w_correct += correct;
      t->w_samples += n;
    }
    free(idx);
  }
  /* Compute time: a wait for streamed weights is the link's, as a pull's is. */
  t->w_ran_at = pst_now();
  t->w_run_at = t0;
  if (t->work_kind == WK_WORK_TRAIN && pst_tl_on()) {
    pst_tl_span("worker", "compute", t0, t->w_ran_at, PST_TL_STEP(t->tl_step, -1));
  }
  t->w_seconds = t->w_ran_at - t0 - t->w_weights_wait;
  if (t->work_kind == WK_WORK_TRAIN && t->opt.slow_factor > 1.0) {
    /* A straggler for experiments: idle in proportion to the real compute time. */
    idle(t, (t->opt.slow_factor - 1.0) * t->w_seconds);
  }
  delay_step(t); /* the push leaves late */
}

/* The rest of a split push (after_train): every shard's chunks not yet queued. */
static int push_rest(wk_trainer *t) {
  for (int i = 0; i < t->n_ps; i++) {
    int rc = wk_client_push_upto(&t->ps[i].client, 0);
    if (rc < 0) {
      wk_fail(t, "cannot push the gradient: %s", uv_strerror(rc));
      return rc;
    }
  }
  return 0;
}

static void after_train(wk_trainer *t) {
  wk_obs_step_ran(&t->obs, t->w_run_at, t->w_ran_at);
  t->steps++;
  wk_obs_step_done(&t->obs, t->w_seconds, t->w_samples);
  /* After the first step, so that the algorithms the backend picked are known. */
  if (t->steps == 1 && t->opt.log_placement) pst_pipe_log_placement(t->net);
  if (t->work_streamed) t->weights_wait += t->w_weights_wait;
  t->step_in_epoch++;
  t->r_loss += t->w_loss;
  t->r_correct += (uint64_t)t->w_correct;
  t->r_samples += (uint64_t)t->w_samples;
  t->r_seconds += t->w_seconds;
  t->r_wait += t->w_wait;
  t->e_loss += t->w_loss;
  t->e_correct += (uint64_t)t->w_correct;
  t->e_samples += (uint64_t)t->w_samples;
  t->e_seconds += t->w_seconds;
  t->e_wait += t->w_wait;
  t->weights_fresh = 0;
  /* Each shard its part, marked with the version of that part it was computed on: the whole
   * of it now, or (--push-by-layer) whatever the backward pass's wake-ups have not yet
   * queued, so that every chunk is queued before the REPORT and the PULL. */
  int layered = t->layer_push;
  t->layer_push = 0;
  if (!layered) t->push_in_flight = 1;
  else if (!t->push_in_flight) wk_obs_push_sent(&t->obs); /* all of it left during compute */
  /* Sync, layer by layer, to a ps that takes it (proto: Welcome.push_runs): the push's last
   * run stops after its chunk 0 until the PULL has gone (below), so that the ps streams the
   * next weights' chunk 0 while the rest of the first layer still arrives. Not for a push
   * sent whole at the end (a CPU worker's): on 2 cores the ps's one thread interleaving the
   * reply with the rest of two workers' pushes made the demo's job 7% slower
   * (docs/benchmarks.md). */
  int split = t->mode == PSTRAIN__MODE__MODE_SYNC && layered && !t->pull_ahead;
  for (int i = 0; i < t->n_ps && split; i++) split = t->ps[i].client.push_runs;
  for (int i = 0; i < t->n_ps; i++) {
    wk_shard *sh = &t->ps[i];
    if (!layered) sh->pushing = 1;
    t->chunks_pushed += sh->client.n_chunks;
    int rc;
    if (split) {
      rc = wk_client_push_head(&sh->client);
    } else {
      rc = layered ? wk_client_push_upto(&sh->client, 0)
                   : wk_client_push(&sh->client, sh->version, t->grad + sh->offset);
    }
    if (rc < 0) {
      wk_fail(t, "cannot push the gradient: %s", uv_strerror(rc));
      return;
    }
  }
  if (t->data_ranges) t->step_in_epoch = 0; /* the ps's epochs (wk_take_range) */
  if (t->steps % (uint64_t)t->report_every == 0 || t->step_in_epoch == t->steps_per_epoch) {
    send_report(t, 0, t->r_loss, t->r_correct, t->r_samples, t->r_seconds, t->r_wait, 0);
    t->r_loss = t->r_seconds = t->r_wait = 0;
    t->r_correct = t->r_samples = 0;
  }
  if (t->step_in_epoch == t->steps_per_epoch) {
    LOG_INFO("epoch %d/%d: train loss %.4f accuracy %.4f, %.0f samples/s computing, data wait "
             "%.3f s", t->epoch + 1, t->epochs, t->e_loss / (double)t->e_samples,
             (double)t->e_correct / (double)t->e_samples,
             t->e_seconds > 0 ? (double)t->e_samples / t->e_seconds : 0.0, t->e_wait);
    wk_obs_epoch_done(t, t->e_loss / (double)t->e_samples); /* the status line says so */
    t->e_loss = t->e_seconds = t->e_wait = 0;
    t->e_correct = t->e_samples = 0;
    t->epoch++;
    t->step_in_epoch = 0;
    t->eval_due = t->eval_on_ps ? 0 : t->epoch;
    if (t->epoch < t->epochs) {
      wk_new_epoch_order(t);
      wk_prefetch_ask(&t->prefetch, t->steps, t->order);
    }
  }
  /* The PULL goes after the push, or after its last run's chunk 0 (split, above). In sync
   * mode the ps streams the next version's chunks as they become final, so a worker whose
   * push is in while others' are still arriving gets its weights early. Sending the PULL
   * ahead of the whole push (pstrain-benchclient --pull-first) measured slower on 2 cores
   * (docs/benchmarks.md): the ps's one thread interleaves the two. */
  if (t->leave_pending || (t->opt.leave_after_step > 0 && t->steps >= t->opt.leave_after_step &&
                           t->data_ranges)) {
    if (split && push_rest(t) < 0) return;
    wk_leave(t);
    return;
  }
  if (t->pull_ahead) {
    take_pull_ahead(t);
  } else if (t->epoch < t->epochs) {
    pull(t);
    if (split) push_rest(t);
  } else {
    if (split && push_rest(t) < 0) return;
    pull_final(t);
  }
}

void wk_leave(wk_trainer *t) {
  if (t->leaving) return;
  t->leaving = 1;
  t->leave_pending = 0;
  LOG_INFO("leaving the job after %" PRIu64 " steps: saying goodbye to the ps", t->steps);
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  h.type = PSTRAIN__MSG_TYPE__BYE;
  h.version = t->version;
  h.leaving = 1;
  wk_send_all(t, &h);
  /* The ps answers SHUTDOWN and closes: then this worker exits 0 (worker/trainer.c). */
  t->state = WK_FINISHING;
}

/* The final weights are in (and evaluated, unless the ps evaluates): what the run was. */
static void finish(wk_trainer *t, uint64_t checksum) {
  LOG_INFO("final weights: version %" PRIu64 ", checksum %016" PRIx64 " over %zu parameters",
           t->version, checksum, t->model.n_params);
  t->state = WK_FINISHING;
  LOG_INFO("finished %d epochs (%" PRIu64 " steps); waiting for the ps", t->epochs, t->steps);
  if (t->opt.push_by_layer)
    LOG_INFO("--push-by-layer: %" PRIu64 " of %" PRIu64 " gradient chunks left while the "
             "backward pass was still computing", t->chunks_early, t->chunks_pushed);
  if (t->clip_norm > 0)
    LOG_INFO("--clip-norm %g: %" PRIu64 " of %" PRIu64 " gradients clipped", t->clip_norm,
             t->clipped, t->steps);
  if (t->opt.pull_by_layer)
    LOG_INFO("--pull-by-layer: %" PRIu64 " of %" PRIu64 " steps started before their "
             "weights were all in; they waited %.3f s in all for the rest; %" PRIu64
             " pulls went out during the step before", t->steps_early, t->steps,
             t->weights_wait, t->pulls_ahead);
  if (t->obs.parted_steps > 0) {
    char parts[400];
    wk_obs_step_parts(&t->obs, parts, sizeof parts);
    LOG_INFO("a training step's time, ms on average over %" PRIu64 " steps: %s",
             t->obs.parted_steps, parts);
  }
  for (int i = 0; i < t->n_ps; i++) {
    const pst_quant *q = &t->ps[i].client.waits;
    if (q->n == 0) continue;
    char which[32] = "";
    if (t->n_ps > 1) snprintf(which, sizeof which, " with shard %d", i);
    LOG_INFO("round trip%s: each step's exposed wait (its push's last byte out to the next "
             "weights' first byte in) p50 %.3f ms, p99 %.3f ms over %" PRIu64 " steps", which,
             pst_quant_value(q, 0.5) * 1e3, pst_quant_value(q, 0.99) * 1e3, q->n);
  }
}

static void after_eval(wk_trainer *t) {
  LOG_INFO("epoch %d/%d: test shard [%d, %d): loss %.4f accuracy %.4f (version %" PRIu64 ")",
           t->eval_due, t->epochs, t->test_begin, t->test_end,
           t->w_samples ? t->w_loss / t->w_samples : 0.0,
           t->w_samples ? (double)t->w_correct / t->w_samples : 0.0, t->version);
  /* The weights evaluated, whole: one checksum however many shards held them, the same as
   * an unsharded ps's weights_checksum. The report carries it to every shard, whose summary
   * gives the last epoch's as the model's (reproducibility checks compare it). */
  uint64_t checksum = pst_fnv1a64(t->params, t->model.n_params * sizeof(float));
  send_report(t, 1, t->w_loss, (uint64_t)t->w_correct, (uint64_t)t->w_samples, t->w_seconds, 0,
              checksum);
  t->eval_due = 0;
  if (t->epoch >= t->epochs) finish(t, checksum);
}

static void after_subset(wk_trainer *t) {
  LOG_DEBUG("evaluation %u on %d test samples: loss %.4f accuracy %.4f (version %" PRIu64 ")",
            t->subset_due, t->w_samples, t->w_samples ? t->w_loss / t->w_samples : 0.0,
            t->w_samples ? (double)t->w_correct / t->w_samples : 0.0, t->version);
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  Pstrain__Report r = PSTRAIN__REPORT__INIT;
  r.epoch = (uint32_t)(t->epoch + 1);
  r.step = t->steps;
  r.is_eval = 1;
  r.loss_sum = t->w_loss;
  r.correct = (uint64_t)t->w_correct;
  r.samples = (uint64_t)t->w_samples;
  r.compute_seconds = t->w_seconds;
  r.subset_point = t->subset_due;
  r.weights_version = t->version;
  h.type = PSTRAIN__MSG_TYPE__REPORT;
  h.report = &r;
  wk_send_all(t, &h);
  t->subset_due = 0;
}

static void start_work(wk_trainer *t, wk_work_kind kind);

/* Decides what the fresh weights are for: an evaluation owed, then a training step, or
 * the end. */
void wk_next_work(wk_trainer *t) {
  if (t->state == WK_STOPPED || t->stop_requested) return;
  if (t->eval_due) {
    start_work(t, WK_WORK_EVAL);
  } else if (t->subset_due && t->subset_n > 0) {
    start_work(t, WK_WORK_SUBSET);
  } else if (t->epoch < t->epochs) {
    /* The gradient buffer is reused: wait until the previous push has left. */
    if (!t->push_in_flight) start_work(t, WK_WORK_TRAIN);
  } else if (t->data_ranges && !t->bye_sent) {
    /* The ps said every range is trained: BYE, and the final weights. */
    pull_final(t);
  } else if (t->state != WK_FINISHING) {
    /* The final weights came, and the ps evaluates them (--eval-on ps), or this slot's
     * evaluation was done before it came back for them. */
    finish(t, pst_fnv1a64(t->params, t->model.n_params * sizeof(float)));
  }
}

static void work_done(uv_work_t *req, int status) {
  wk_trainer *t = req->data;
  t->work_running = 0;
  if (t->closing) {
    uv_close((uv_handle_t *)&t->grad_async, NULL);
    return;
  }
  if (t->state == WK_STOPPED || t->stop_requested || status == UV_ECANCELED) {
    wk_close_all(t);
    return;
  }
  if (t->restart_pending || !wk_all_open(t) || t->state == WK_CONNECTING ||
      t->state == WK_REGISTERING) {
    /* The connection was lost while this ran: the ps may have moved on, and it says where
     * this worker stands when it registers again. */
    if (t->work_kind == WK_WORK_TRAIN) {
      t->discarded++;
      LOG_INFO("dropped the gradient computed on version %" PRIu64
               ": the connection to the ps was lost meanwhile", t->version);
    }
    if (t->hello_pending && wk_all_open(t)) {
      t->hello_pending = 0;
      wk_register_all(t);
    } else if (t->restart_pending) {
      t->restart_pending = 0;
      wk_begin_session(t);
    }
    return;
  }
  if (t->w_rc < 0) {
    /* The net says which layer, which operation, which shape and what the device's library
     * returned (kernels/net.h); the launcher shows this line when the worker exits. */
    const char *why = pst_pipe_error(t->net);
    wk_fail(t, "compute failed on %s: %s", t->backend->name, why[0] ? why : strerror(-t->w_rc));
    return;
  }
  if (t->work_kind == WK_WORK_TRAIN) {
    double back = pst_now();
    if (pst_tl_on()) {
      /* The hand-offs between the loop and the threadpool, and the loop's part after. */
      pst_tl_async("handoff", "to the threadpool", 1, t->tl_queued_at, t->w_run_at,
                   PST_TL_STEP(t->tl_step, -1));
      pst_tl_async("handoff", "back to the loop", 2, t->w_ran_at, back,
                   PST_TL_STEP(t->tl_step, -1));
    }
    uint64_t step = t->tl_step;
    after_train(t);
    if (pst_tl_on())
      pst_tl_span("worker", "after the step: push, report, pull", back, pst_now(),
                  PST_TL_STEP(step, -1));
  } else if (t->work_kind == WK_WORK_SUBSET) {
    after_subset(t);
    wk_next_work(t);
  } else {
    after_eval(t);
    if (t->state != WK_FINISHING) wk_next_work(t);
  }
}

static void start_work(wk_trainer *t, wk_work_kind kind) {
  if (t->cuts_stale) wk_set_row_cuts(t);
  t->state = WK_COMPUTING;
  t->work_kind = kind;
  t->work_running = 1;
  t->work_streamed = t->pull_streaming;
  atomic_store(&t->work_abandoned, 0);
  if (kind == WK_WORK_TRAIN) {
    wk_obs_step_queued(&t->obs, t->ps[0].client.pushed_at, t->ps[0].client.reply_at);
    t->tl_queued_at = pst_now();
    t->tl_step = t->steps;
    t->tl_step_at = t->tl_pull_at;
  }
  /* A streamed step's push is begun once its weights are all in (wk_pull_complete): each
   * shard's part is marked with the version that shard's reply names at its end. */
  if (kind == WK_WORK_TRAIN && !t->pull_streaming) wk_begin_layer_push(t);
  t->work.data = t;
  uv_queue_work(t->loop, &t->work, work_run, work_done);
}

/* ---- --pull-by-layer: a step that starts while its weights arrive ---- */

/* Starts the next training step before its weights are all in, when it is sure to be one:
 * shard 0's reply has begun (so any EVAL ask for these weights has come: it precedes them),
 * no evaluation is owed, and the last push has left (the step reuses the gradient buffer).
 * Not under --slow-factor or --delay-ms, whose steps wait on purpose. */
void wk_try_early_step(wk_trainer *t) {
  if (!t->opt.pull_by_layer || t->opt.slow_factor > 1.0 || t->opt.delay_ms > 0 ||
      t->state != WK_PULLING || t->stop_requested || t->work_running || t->push_in_flight ||
      t->weights_fresh || !t->ps[0].pull_begun || t->eval_due || t->subset_asked ||
      t->epoch >= t->epochs)
    return;
  t->pull_streaming = 1;
  t->steps_early++;
  start_work(t, WK_WORK_TRAIN);
}

/* A WEIGHTS chunk of shard sh's reply is in (after on_weights_done for its last): the step
 * waiting for it may go on. Chunks come in order; one out of order (only a faulty ps sends
 * it) moves nothing, and the step then waits for the reply's end. */
void wk_pull_progress(wk_trainer *t, wk_shard *sh, const Pstrain__Header *h) {
  uv_mutex_lock(&t->pull_mu);
  if (h->offset == sh->pull_got) sh->pull_got = h->offset + h->count;
  if (h->last) sh->pull_done = 1;
  uv_cond_broadcast(&t->pull_cond);
  uv_mutex_unlock(&t->pull_mu);
}

/* Every shard's reply to a streamed step's pull is in: its push may begin. */
void wk_pull_complete(wk_trainer *t) {
  t->pull_streaming = 0;
  if (t->work_running && t->work_kind == WK_WORK_TRAIN) wk_begin_layer_push(t);
}

/* The step on the threadpool is dropped: its waits and its idling end now. */
void wk_abandon_work(wk_trainer *t) {
  if (!t->work_running) return;
  atomic_store(&t->work_abandoned, 1);
  uv_mutex_lock(&t->pull_mu);
  uv_cond_broadcast(&t->pull_cond);
  uv_mutex_unlock(&t->pull_mu);
}
