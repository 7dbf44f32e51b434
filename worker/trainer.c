#include "worker/trainer.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/notify.h"
#include "kernels/device.h"

static void fail(wk_trainer *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Ends the run with an error: log it once, tell the ps why (so that it frees this worker's
 * slot with the reason in its log), close the connection, exit 1. */
static void fail(wk_trainer *t, const char *fmt, ...) {
  char why[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  if (t->state != WK_STOPPED) LOG_ERR("%s", why);
  if (t->state != WK_STOPPED && t->client.state == WK_CONN_OPEN) {
    Pstrain__Header h = PSTRAIN__HEADER__INIT;
    Pstrain__ErrorInfo e = PSTRAIN__ERROR_INFO__INIT;
    e.reason = why;
    h.type = PSTRAIN__MSG_TYPE__ERROR;
    h.error = &e;
    wk_client_send_now(&t->client, &h);
  }
  t->exit_code = PST_EXIT_FAILED;
  t->state = WK_STOPPED;
  wk_client_close(&t->client, NULL);
}

static void send_simple(wk_trainer *t, Pstrain__MsgType type, uint64_t version) {
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  h.type = type;
  h.version = version;
  wk_client_send(&t->client, &h);
}

static void send_report(wk_trainer *t, int is_eval, double loss, uint64_t correct,
                        uint64_t samples, double seconds) {
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  Pstrain__Report r = PSTRAIN__REPORT__INIT;
  r.epoch = (uint32_t)(is_eval ? t->eval_due : t->epoch + 1);
  r.step = t->steps;
  r.is_eval = is_eval != 0;
  r.loss_sum = loss;
  r.correct = correct;
  r.samples = samples;
  r.compute_seconds = seconds;
  h.type = PSTRAIN__MSG_TYPE__REPORT;
  h.report = &r;
  wk_client_send(&t->client, &h);
}

/* Which version to ask for next. sync: the one after ours (answered once every worker's
 * gradient for ours is in). async and ssp: whatever is newest (ssp's bound is the ps's). */
static void pull(wk_trainer *t) {
  t->state = WK_PULLING;
  wk_obs_pull_sent(&t->obs);
  int sync = t->mode == PSTRAIN__MODE__MODE_SYNC;
  send_simple(t, PSTRAIN__MSG_TYPE__PULL, sync && t->have_weights ? t->version + 1 : 0);
}

/* After the last push: BYE (no more gradients from us), then the final weights, which the
 * ps sends once every worker has said BYE, so the last evaluation sees the final model in
 * every mode. */
static void pull_final(wk_trainer *t) {
  send_simple(t, PSTRAIN__MSG_TYPE__BYE, t->version);
  t->state = WK_PULLING;
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  h.type = PSTRAIN__MSG_TYPE__PULL;
  h.last = 1;
  wk_client_send(&t->client, &h);
}

static void new_epoch_order(wk_trainer *t) {
  int n = t->shard_end - t->shard_begin;
  for (int i = 0; i < n; i++) t->order[i] = t->shard_begin + i;
  pst_rng_shuffle(&t->rng, t->order, n);
}

/* Puts this worker where the ps says its slot stands: `start_step` steps of the shard done
 * and the evaluations of epochs 1..evals_done done. The shuffles are replayed from the seed,
 * so a worker that rejoins, or any worker of a resumed ps, takes exactly the batches an
 * uninterrupted run would. */
static void take_position(wk_trainer *t, uint64_t start_step, uint32_t evals_done) {
  uint64_t spe = (uint64_t)t->steps_per_epoch;
  uint64_t epoch = start_step / spe;
  if (epoch > (uint64_t)t->epochs) epoch = (uint64_t)t->epochs;
  t->epoch = (int)epoch;
  t->step_in_epoch = epoch < (uint64_t)t->epochs ? (int)(start_step % spe) : 0;
  t->steps = start_step;
  pst_rng_seed(&t->rng, t->seed * 1000003u + (uint64_t)t->index);
  for (int e = 0; e <= t->epoch && e < t->epochs; e++) new_epoch_order(t);
  /* The newest finished epoch's evaluation share, if this slot still owes it (its worker
   * was lost around the epoch's end): evaluated on the weights it pulls now, so that the
   * epoch's figures cover the whole test set. */
  t->eval_due = t->epoch >= 1 && evals_done < (uint32_t)t->epoch ? t->epoch : 0;
  t->have_weights = 0;
  t->weights_fresh = 0;
  t->push_in_flight = 0;
  t->r_loss = t->r_seconds = 0;
  t->r_correct = t->r_samples = 0;
  t->e_loss = t->e_seconds = 0;
  t->e_correct = t->e_samples = 0;
}

/* The first exchange of a session with the ps (after every WELCOME): weights to train on,
 * or, with every epoch done, the final weights for the last evaluation. */
static void begin_session(wk_trainer *t) {
  if (t->epoch < t->epochs)
    pull(t);
  else
    pull_final(t);
}

/* ---- work on the threadpool ---- */

static void work_run(uv_work_t *req) {
  wk_trainer *t = req->data;
  double t0 = pst_now();
  t->w_loss = 0;
  t->w_correct = 0;
  t->w_samples = 0;
  t->w_rc = pst_net_load_params(t->net, t->params);
  if (t->w_rc < 0) return;
  if (t->work_kind == WK_WORK_TRAIN) {
    const int32_t *idx = t->order + (size_t)t->step_in_epoch * t->batch;
    double d0 = pst_now();
    pst_data_gather(&t->train, idx, t->batch, t->xb, t->yb);
    t->obs.gather_seconds = pst_now() - d0; /* taken in by wk_obs_step_done, on the loop */
    /* The loss is the sum over this worker's batch divided by the global batch b x N. */
    float scale = 1.0f / ((float)t->batch * (float)t->world);
    t->w_rc = pst_net_train_step(t->net, t->xb, t->yb, t->batch, scale, t->grad, &t->w_loss,
                                 &t->w_correct);
    t->w_samples = t->batch;
  } else {
    int32_t *idx = malloc((size_t)t->batch * sizeof *idx);
    if (!idx) {
      t->w_rc = -ENOMEM;
      return;
    }
    for (int b = t->test_begin; b < t->test_end && t->w_rc == 0; b += t->batch) {
      int n = t->test_end - b < t->batch ? t->test_end - b : t->batch;
      for (int i = 0; i < n; i++) idx[i] = b + i;
      pst_data_gather(&t->test, idx, n, t->xb, t->yb);
      double loss = 0;
      int correct = 0;
      t->w_rc = pst_net_evaluate(t->net, t->xb, t->yb, n, &loss, &correct);
      t->w_loss += loss;
      t->w_correct += correct;
      t->w_samples += n;
    }
    free(idx);
  }
  t->w_seconds = pst_now() - t0;
  if (t->work_kind == WK_WORK_TRAIN && t->opt.slow_factor > 1.0) {
    /* A straggler for experiments: idle in proportion to the real compute time. */
    double extra = (t->opt.slow_factor - 1.0) * t->w_seconds;
    struct timespec ts = {(time_t)extra, (long)((extra - floor(extra)) * 1e9)};
    nanosleep(&ts, NULL);
  }
}

static void after_train(wk_trainer *t) {
  t->steps++;
  wk_obs_step_done(&t->obs, t->w_seconds, t->w_samples);
  /* After the first step, so that the algorithms the backend picked are known. */
  if (t->steps == 1 && t->opt.log_placement) pst_net_log_placement(t->net);
  t->step_in_epoch++;
  t->r_loss += t->w_loss;
  t->r_correct += (uint64_t)t->w_correct;
  t->r_samples += (uint64_t)t->w_samples;
  t->r_seconds += t->w_seconds;
  t->e_loss += t->w_loss;
  t->e_correct += (uint64_t)t->w_correct;
  t->e_samples += (uint64_t)t->w_samples;
  t->e_seconds += t->w_seconds;
  t->weights_fresh = 0;
  t->push_in_flight = 1;
  int rc = wk_client_push(&t->client, t->version, t->grad);
  if (rc < 0) {
    fail(t, "cannot push the gradient: %s", uv_strerror(rc));
    return;
  }
  if (t->steps % (uint64_t)t->report_every == 0 || t->step_in_epoch == t->steps_per_epoch) {
    send_report(t, 0, t->r_loss, t->r_correct, t->r_samples, t->r_seconds);
    t->r_loss = t->r_seconds = 0;
    t->r_correct = t->r_samples = 0;
  }
  if (t->step_in_epoch == t->steps_per_epoch) {
    LOG_INFO("epoch %d/%d: train loss %.4f accuracy %.4f, %.0f samples/s computing", t->epoch + 1,
             t->epochs, t->e_loss / (double)t->e_samples,
             (double)t->e_correct / (double)t->e_samples,
             t->e_seconds > 0 ? (double)t->e_samples / t->e_seconds : 0.0);
    wk_obs_epoch_done(t, t->e_loss / (double)t->e_samples); /* the status line says so */
    t->e_loss = t->e_seconds = 0;
    t->e_correct = t->e_samples = 0;
    t->epoch++;
    t->step_in_epoch = 0;
    t->eval_due = t->epoch;
    if (t->epoch < t->epochs) new_epoch_order(t);
  }
  /* The PULL goes after the push. In sync mode the ps streams the next version's chunks as
   * they become final, so a worker whose push is in while others' are still arriving gets
   * its weights early. Sending the PULL ahead of the push (pstrain-benchclient --pull-first)
   * overlaps this worker's own push and pull too, but measured slower on 2 cores
   * (docs/benchmarks.md). */
  if (t->epoch < t->epochs)
    pull(t);
  else
    pull_final(t);
}

static void after_eval(wk_trainer *t) {
  LOG_INFO("epoch %d/%d: test shard [%d, %d): loss %.4f accuracy %.4f (version %" PRIu64 ")",
           t->eval_due, t->epochs, t->test_begin, t->test_end,
           t->w_samples ? t->w_loss / t->w_samples : 0.0,
           t->w_samples ? (double)t->w_correct / t->w_samples : 0.0, t->version);
  send_report(t, 1, t->w_loss, (uint64_t)t->w_correct, (uint64_t)t->w_samples, t->w_seconds);
  t->eval_due = 0;
  if (t->epoch >= t->epochs) {
    t->state = WK_FINISHING;
    LOG_INFO("finished %d epochs (%" PRIu64 " steps); waiting for the ps", t->epochs, t->steps);
  }
}

static void start_work(wk_trainer *t, wk_work_kind kind);
static void send_hello(wk_trainer *t);

/* Decides what the fresh weights are for: an evaluation owed, then a training step, or
 * the end. */
static void next_work(wk_trainer *t) {
  if (t->state == WK_STOPPED || t->stop_requested) return;
  if (t->eval_due) {
    start_work(t, WK_WORK_EVAL);
  } else if (t->epoch < t->epochs) {
    /* The gradient buffer is reused: wait until the previous push has left. */
    if (!t->push_in_flight) start_work(t, WK_WORK_TRAIN);
  } else {
    t->state = WK_FINISHING; /* the final weights came, nothing left to evaluate */
  }
}

static void work_done(uv_work_t *req, int status) {
  wk_trainer *t = req->data;
  t->work_running = 0;
  if (t->state == WK_STOPPED || t->stop_requested || status == UV_ECANCELED) {
    wk_client_close(&t->client, NULL);
    return;
  }
  if (t->restart_pending || t->client.state != WK_CONN_OPEN || t->state == WK_CONNECTING ||
      t->state == WK_REGISTERING) {
    /* The connection was lost while this ran: the ps may have moved on, and it says where
     * this worker stands when it registers again. */
    if (t->work_kind == WK_WORK_TRAIN) {
      t->discarded++;
      LOG_INFO("dropped the gradient computed on version %" PRIu64
               ": the connection to the ps was lost meanwhile", t->version);
    }
    if (t->hello_pending && t->client.state == WK_CONN_OPEN) {
      t->hello_pending = 0;
      send_hello(t);
    } else if (t->restart_pending) {
      t->restart_pending = 0;
      begin_session(t);
    }
    return;
  }
  if (t->w_rc < 0) {
    fail(t, "compute failed on %s: %s", t->backend->name, strerror(-t->w_rc));
    return;
  }
  if (t->work_kind == WK_WORK_TRAIN) {
    after_train(t);
  } else {
    after_eval(t);
    if (t->state != WK_FINISHING) next_work(t);
  }
}

static void start_work(wk_trainer *t, wk_work_kind kind) {
  t->state = WK_COMPUTING;
  t->work_kind = kind;
  t->work_running = 1;
  t->work.data = t;
  uv_queue_work(t->loop, &t->work, work_run, work_done);
}

/* ---- registration ---- */

/* The weights and the gradient live where the backend moves them fastest (pinned memory
 * for CUDA): pulls land there straight from the socket and pushes leave from there. */
static float *host_buffer(wk_trainer *t, size_t bytes) {
  if (t->backend->host_alloc) return t->backend->host_alloc(t->backend, bytes);
  return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}

static void host_buffer_free(wk_trainer *t, float *p) {
  if (p && t->backend && t->backend->host_free)
    t->backend->host_free(t->backend, p);
  else
    free(p);
}

static int setup_from_welcome(wk_trainer *t, const Pstrain__Welcome *w) {
  char err[512];
  t->index = (int)w->worker_index;
  t->world = (int)w->world_size;
  t->mode = (int)w->mode;
  t->epochs = (int)w->epochs;
  t->batch = (int)w->batch_size;
  t->seed = w->seed;
  t->chunk_floats = w->chunk_floats;
  t->report_every = w->report_every ? (int)w->report_every : 50;
  if (t->world < 1 || t->index >= t->world || t->batch < 1 || t->epochs < 1) {
    fail(t, "the ps sent an inconsistent registration (index %d of %d, batch %d)", t->index,
         t->world, t->batch);
    return -EPROTO;
  }
  if (pst_model_parse(w->model_spec, "model from the ps", &t->model, err, sizeof err) < 0 ||
      t->model.fingerprint != w->model_fingerprint || t->model.n_params != w->n_params) {
    fail(t, "cannot use the ps's model: %s", err);
    return -EPROTO;
  }
  /* Data (loaded at start): this worker's disjoint shard of the training and test sets. */
  if (t->train.rows * t->train.cols != t->model.input_size) {
    fail(t, "the model takes %d inputs but %s has %dx%d images", t->model.input_size,
         t->opt.data_dir, t->train.rows, t->train.cols);
    return -EINVAL;
  }
  pst_data_shard_range(t->train.n, t->index, t->world, &t->shard_begin, &t->shard_end);
  pst_data_shard_range(t->test.n, t->index, t->world, &t->test_begin, &t->test_end);
  /* Every worker takes the same number of steps per epoch, so sync steps line up: the
   * smallest shard's full batches (the shards differ by at most one sample). */
  t->steps_per_epoch = pst_steps_per_epoch(t->train.n, t->world, t->batch);
  if (t->steps_per_epoch < 1) {
    fail(t, "a shard of %d samples holds no full batch of %d", t->train.n / t->world, t->batch);
    return -EINVAL;
  }
  /* Compute. */
  int rc = pst_device_open(t->opt.device, t->opt.gpu_memory_limit_mib, t->opt.threads,
                           &t->backend, err, sizeof err);
  if (rc < 0) {
    fail(t, "%s", err);
    return rc;
  }
  if (err[0]) LOG_INFO("%s", err);
  rc = pst_net_create(&t->model, t->backend, t->batch, &t->net);
  if (rc < 0) {
    fail(t, "cannot build the model on %s: %s", t->backend->name, strerror(-rc));
    return rc;
  }
  size_t n = t->model.n_params;
  t->params = host_buffer(t, n * sizeof(float));
  t->grad = host_buffer(t, n * sizeof(float));
  t->xb = malloc((size_t)t->batch * (size_t)t->model.input_size * sizeof(float));
  t->yb = malloc((size_t)t->batch * sizeof(int32_t));
  t->order = malloc((size_t)(t->shard_end - t->shard_begin) * sizeof(int32_t));
  if (!t->params || !t->grad || !t->xb || !t->yb || !t->order ||
      wk_client_prepare_push(&t->client, n, t->chunk_floats) < 0) {
    fail(t, "out of memory for %zu parameters", n);
    return -ENOMEM;
  }
  LOG_INFO("worker %d of %d on %s: %s mode, shard [%d, %d), %d steps of %d per epoch, %d "
           "epochs%s%s", t->index, t->world, t->backend->name,
           t->mode == 0 ? "sync" : t->mode == 1 ? "async" : "ssp", t->shard_begin, t->shard_end,
           t->steps_per_epoch, t->batch, t->epochs, t->client.session[0] ? "; ps over " : "",
           t->client.session);
  return 0;
}

/* ---- the connection's callbacks ---- */

static void send_hello(wk_trainer *t) {
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  Pstrain__Hello hello = PSTRAIN__HELLO__INIT;
  hello.worker_name = (char *)t->opt.name;
  /* Registering again: the slot this worker had (its shard), and what it discarded. */
  hello.requested_index = t->welcomed ? t->index : t->opt.requested_index;
  hello.dropped_gradients = t->discarded;
  hello.train_samples = (uint32_t)t->train.n;
  hello.test_samples = (uint32_t)t->test.n;
  hello.classes = (uint32_t)t->classes;
  if (t->opt.model && t->opt.model[0]) {
    pst_model mine;
    char err[512];
    if (pst_model_load(t->opt.model, &mine, err, sizeof err) < 0) {
      fail(t, "%s", err);
      return;
    }
    hello.model_fingerprint = mine.fingerprint;
  }
  h.type = PSTRAIN__MSG_TYPE__HELLO;
  h.hello = &hello;
  t->state = WK_REGISTERING;
  wk_client_send(&t->client, &h);
}

static void on_connected(wk_client *c) {
  wk_trainer *t = c->data;
  /* A step still running from before the connection was lost ends first, so that the
   * HELLO can count its gradient as dropped. */
  if (t->work_running) {
    t->state = WK_REGISTERING;
    t->hello_pending = 1;
    return;
  }
  send_hello(t);
}

static int on_payload(wk_client *c, const Pstrain__Header *h, float **dst) {
  wk_trainer *t = c->data;
  if (h->type != PSTRAIN__MSG_TYPE__WEIGHTS || t->state != WK_PULLING ||
      h->offset + h->count > t->model.n_params) {
    snprintf(c->rd.err, sizeof c->rd.err, "unexpected tensor chunk (offset %" PRIu64 ")", h->offset);
    return -EPROTO;
  }
  *dst = t->params + h->offset;
  return 0;
}

/* A WELCOME after a reconnection: the same job, or an error. */
static int check_same_job(wk_trainer *t, const Pstrain__Welcome *w) {
  if ((int)w->worker_index != t->index || (int)w->world_size != t->world ||
      w->model_fingerprint != t->model.fingerprint || (int)w->batch_size != t->batch ||
      (int)w->epochs != t->epochs || w->seed != t->seed || (int)w->mode != t->mode) {
    fail(t, "the ps that answered the reconnection trains another job (index %u of %u, model "
            "%016" PRIx64 "); start this worker again to join it",
         w->worker_index, w->world_size, w->model_fingerprint);
    return -EPROTO;
  }
  t->chunk_floats = w->chunk_floats;
  if (wk_client_prepare_push(&t->client, t->model.n_params, t->chunk_floats) < 0) {
    fail(t, "out of memory for %zu parameters", t->model.n_params);
    return -ENOMEM;
  }
  return 0;
}

static void on_welcome(wk_trainer *t, const Pstrain__Welcome *w) {
  int again = t->welcomed;
  if (again ? check_same_job(t, w) < 0 : setup_from_welcome(t, w) < 0) return;
  t->welcomed = 1;
  t->reconnect_deadline = 0;
  t->discarded = 0;
  t->timeout_s = w->timeout_ms / 1000.0;
  take_position(t, w->start_step, w->eval_epoch);
  if (again || w->start_step > 0)
    LOG_INFO("%s at step %" PRIu64 " of the shard: epoch %d/%d, step %d of %d%s",
             again ? "registered again" : "resuming", w->start_step,
             t->epoch < t->epochs ? t->epoch + 1 : t->epochs, t->epochs, t->step_in_epoch,
             t->steps_per_epoch, t->eval_due ? ", evaluating the last epoch first" : "");
  if (!again) pst_notify_ready(); /* registered and set up: under systemd, the service is up */
  if (t->work_running) {
    t->state = WK_REGISTERING; /* the stale work item's end starts the session */
    t->restart_pending = 1;
    return;
  }
  begin_session(t);
}

static int on_frame(wk_client *c, const Pstrain__Header *h) {
  wk_trainer *t = c->data;
  switch (h->type) {
    case PSTRAIN__MSG_TYPE__WELCOME:
      if (t->state != WK_REGISTERING) return -EPROTO;
      on_welcome(t, h->welcome);
      return 0;
    case PSTRAIN__MSG_TYPE__WEIGHTS:
      if (h->last) {
        wk_obs_weights_in(&t->obs);
        t->version = h->version;
        t->weights_fresh = 1;
        t->have_weights = 1;
        next_work(t);
      }
      return 0;
    case PSTRAIN__MSG_TYPE__HEARTBEAT:
      return 0;
    case PSTRAIN__MSG_TYPE__ERROR:
      if (t->welcomed && t->state == WK_REGISTERING) {
        /* Registering again, the ps may still hold this worker's slot for the connection
         * it has not yet found dead: try again until the reconnect deadline. */
        char why[300];
        snprintf(why, sizeof why, "the ps refused the reconnection: %.200s",
                 h->error ? h->error->reason : "no reason given");
        wk_client_close(c, why);
        return 0;
      }
      fail(t, "the ps refused this worker: %s", h->error ? h->error->reason : "no reason given");
      return 0;
    case PSTRAIN__MSG_TYPE__SHUTDOWN: {
      const char *why = h->shutdown ? h->shutdown->reason : "no reason given";
      if (t->state == WK_FINISHING && !(h->shutdown && h->shutdown->failed)) {
        LOG_INFO("ps says: %s; exiting", why);
        t->state = WK_STOPPED;
        wk_client_close(c, NULL);
      } else if (h->shutdown && h->shutdown->stopped) {
        /* Stopped on purpose: not a failure, and nothing to reconnect to. */
        LOG_INFO("the ps was stopped before training finished (%s); exiting", why);
        t->exit_code = PST_EXIT_STOPPED;
        t->state = WK_STOPPED;
        wk_client_close(c, NULL);
      } else {
        fail(t, "the ps stopped training: %s", why);
      }
      return 0;
    }
    case PSTRAIN__MSG_TYPE__ACK:
    case PSTRAIN__MSG_TYPE__STATUS:
      return 0;
    default:
      snprintf(c->rd.err, sizeof c->rd.err, "unexpected message type %d", (int)h->type);
      return -EPROTO;
  }
}

static void on_push_sent(wk_client *c) {
  wk_trainer *t = c->data;
  t->push_in_flight = 0;
  wk_obs_push_sent(&t->obs);
  /* Weights for the next step may have arrived before the push finished leaving. */
  if (!t->work_running && t->weights_fresh && t->state != WK_FINISHING && t->state != WK_STOPPED)
    next_work(t);
}

static void on_hb_timer(uv_timer_t *h);

/* The connection to a ps this worker was registered with broke (the ps was killed, its host
 * rebooted, the link was cut, or it went silent): reconnect for --reconnect-timeout seconds
 * and carry on where the ps says this worker's slot stands. */
static int reconnect(wk_trainer *t, const char *why) {
  if (!t->welcomed || t->state == WK_STOPPED || t->stop_requested || !(t->opt.reconnect_timeout > 0))
    return -1;
  double now = pst_now();
  if (t->reconnect_deadline == 0) t->reconnect_deadline = now + t->opt.reconnect_timeout;
  double left = t->reconnect_deadline - now;
  if (left <= 0) return -1;
  LOG_WARN("lost the ps (%s); reconnecting for up to %.0f s", why ? why : "connection closed",
           left);
  pst_notify_status("worker %d: lost the ps (%s); reconnecting", t->index,
                    why ? why : "connection closed");
  t->state = WK_CONNECTING;
  t->push_in_flight = 0;
  t->weights_fresh = 0;
  wk_client_free(&t->client);
  const wk_client_cbs *cbs = t->client.cbs;
  int rc = wk_client_start(&t->client, t->loop, t->opt.ps_host, t->opt.ps_port, left,
                           t->opt.secret, t->opt.tls, t->opt.tls_name, cbs, t);
  if (rc < 0) LOG_ERR("cannot reconnect: %s", uv_strerror(rc));
  return rc;
}

static void on_closed(wk_client *c, const char *why) {
  wk_trainer *t = c->data;
  /* A TLS refusal (the ps's certificate is not from our CA, or the ps refused ours, or it does
   * not speak TLS) is a configuration error: retrying does not mend it until certificates, CAs
   * or flags change, so the worker stops with exit 2, the status of bad flags and files,
   * instead of reconnecting for --reconnect-timeout. A connection merely cut short
   * during the handshake is not one (the ps may have been stopping): it is a lost ps as any
   * other. */
  int refused = c->tls_refused && why;
  if (!refused && t->state != WK_STOPPED && !t->stop_requested && reconnect(t, why) == 0) return;
  if (why && t->state != WK_STOPPED) {
    LOG_ERR("%s", why);
    t->exit_code = refused ? PST_EXIT_USAGE : PST_EXIT_FAILED;
  } else if (t->state != WK_STOPPED && !t->stop_requested) {
    t->exit_code = 1;
  }
  t->state = WK_STOPPED;
  uv_close((uv_handle_t *)&t->sig_int, NULL);
  uv_close((uv_handle_t *)&t->sig_term, NULL);
  uv_close((uv_handle_t *)&t->hb_timer, NULL);
}

/* Heartbeats while the loop has nothing else to send (a long step, a wait for the others),
 * and the ps's silence: it sends its own heartbeats, so a quiet ps is a dead or stopped one. */
static void on_hb_timer(uv_timer_t *h) {
  wk_trainer *t = h->data;
  wk_client *c = &t->client;
  double now = pst_now(), gap = now - t->hb_last_tick;
  t->hb_last_tick = now;
  if (c->state != WK_CONN_OPEN || !(t->timeout_s > 0)) return;
  /* Stalled (SIGSTOP, a frozen host) for longer than the ps waits: the ps has given this
   * worker up, and whatever it computed meanwhile is late. Register again at once. */
  if (gap > t->timeout_s) {
    char why[128];
    snprintf(why, sizeof why, "this worker was stalled for %.1f s, past the ps's timeout", gap);
    wk_client_close(c, why);
    return;
  }
  /* After a shorter stall of this process, the ps's messages wait unread in the socket:
   * silence is measured from now on, not charged to the ps. */
  if (gap > 0.2 && c->last_rx < now) c->last_rx = now;
  if (now - c->last_rx > t->timeout_s) {
    char why[128];
    snprintf(why, sizeof why, "no message from the ps for %.1f s", now - c->last_rx);
    wk_client_close(c, why);
  } else if (now - c->last_tx > t->timeout_s / 4) {
    send_simple(t, PSTRAIN__MSG_TYPE__HEARTBEAT, 0);
  }
}

static const wk_client_cbs client_cbs = {on_connected, on_payload, on_frame, on_push_sent, on_closed};

static void on_signal(uv_signal_t *h, int signum) {
  wk_trainer *t = h->data;
  if (t->stop_requested) return;
  LOG_INFO("%s received: stopping", signum == SIGINT ? "SIGINT" : "SIGTERM");
  t->stop_requested = 1;
  t->exit_code = PST_EXIT_STOPPED;
  /* A step on the threadpool cannot be interrupted; its completion closes the client. */
  if (!t->work_running) wk_client_close(&t->client, NULL);
}

int wk_trainer_start(wk_trainer *t, uv_loop_t *loop, const wk_options *opt, char *err,
                     size_t errlen) {
  memset(t, 0, sizeof *t);
  t->loop = loop;
  t->opt = *opt;
  wk_obs_init(&t->obs);
  /* The data comes first, before the loop runs: a worker with a bad --data-dir never takes
   * a slot, and the seconds of decompression never hold up its heartbeats. */
  if (pst_data_load_split(opt->data_dir, "train", &t->train, err, errlen) < 0 ||
      pst_data_load_split(opt->data_dir, "t10k", &t->test, err, errlen) < 0)
    return -EIO;
  for (int i = 0; i < t->train.n; i++)
    if (t->train.labels[i] + 1 > t->classes) t->classes = t->train.labels[i] + 1;
  uv_signal_init(loop, &t->sig_int);
  uv_signal_init(loop, &t->sig_term);
  t->sig_int.data = t->sig_term.data = t;
  uv_signal_start(&t->sig_int, on_signal, SIGINT);
  uv_signal_start(&t->sig_term, on_signal, SIGTERM);
  /* Fine enough for the shortest timeouts the ps allows (0.2 s). */
  uv_timer_init(loop, &t->hb_timer);
  t->hb_timer.data = t;
  uv_timer_start(&t->hb_timer, on_hb_timer, 25, 25);
  t->hb_last_tick = pst_now();
  snprintf(err, errlen, "cannot start the connection");
  return wk_client_start(&t->client, loop, opt->ps_host, opt->ps_port, opt->connect_timeout,
                         opt->secret, opt->tls, opt->tls_name, &client_cbs, t);
}

void wk_trainer_free(wk_trainer *t) {
  wk_client_free(&t->client);
  host_buffer_free(t, t->params);
  host_buffer_free(t, t->grad);
  if (t->net) pst_net_destroy(t->net);
  if (t->backend) t->backend->destroy(t->backend);
  pst_data_free(&t->train);
  pst_data_free(&t->test);
  free(t->xb);
  free(t->yb);
  free(t->order);
}
