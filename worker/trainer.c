/* The sessions with the ps: connecting to every shard, registering (HELLO, WELCOME, the
 * model and the slot), the frames that arrive, heartbeats and silence, reconnecting after a
 * loss, and the end. The training steps themselves are in worker/step.c. */
#include "worker/trainer.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/fnv.h"
#include "common/log.h"
#include "common/notify.h"
#include "kernels/device.h"
#include "worker/dataset.h"
#include "worker/trainer_internal.h"

/* The shard whose connection c is. */
static wk_shard *shard_of(wk_client *c) {
  return (wk_shard *)((char *)c - offsetof(wk_shard, client));
}

static int shard_index(const wk_trainer *t, const wk_shard *sh) { return (int)(sh - t->ps); }

/* Every shard's connection is open (registered or about to be). */
int wk_all_open(const wk_trainer *t) {
  for (int i = 0; i < t->n_ps; i++)
    if (t->ps[i].client.state != WK_CONN_OPEN) return 0;
  return 1;
}

void wk_close_all(wk_trainer *t) {
  for (int i = 0; i < t->n_ps; i++) wk_client_close(&t->ps[i].client, NULL);
}

/* Sends a control message to every shard: each keeps its own account of the workers
 * (registration, reports, heartbeats, the end). */
void wk_send_all(wk_trainer *t, const Pstrain__Header *h) {
  for (int i = 0; i < t->n_ps; i++)
    if (t->ps[i].client.state == WK_CONN_OPEN) wk_client_send(&t->ps[i].client, h);
}

/* Ends the run with an error: log it once, tell the ps why (so that it frees this worker's
 * slot with the reason in its log), close the connection, exit 1. */
void wk_fail(wk_trainer *t, const char *fmt, ...) {
  char why[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  if (t->state != WK_STOPPED) LOG_ERR("%s", why);
  if (t->state != WK_STOPPED) {
    Pstrain__Header h = PSTRAIN__HEADER__INIT;
    Pstrain__ErrorInfo e = PSTRAIN__ERROR_INFO__INIT;
    e.reason = why;
    h.type = PSTRAIN__MSG_TYPE__ERROR;
    h.error = &e;
    for (int i = 0; i < t->n_ps; i++)
      if (t->ps[i].client.state == WK_CONN_OPEN) wk_client_send_now(&t->ps[i].client, &h);
  }
  t->exit_code = PST_EXIT_FAILED;
  t->state = WK_STOPPED;
  wk_close_all(t);
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

/* The dense evaluations' test subset: the first `samples` of a permutation of the test set
 * drawn from the job seed alone (the same subset on every worker and at every point), split
 * across the workers like the full test set. */
static int make_subset(wk_trainer *t, uint32_t samples) {
  int n = samples < (uint32_t)t->test.n ? (int)samples : t->test.n;
  int32_t *all = malloc((size_t)(t->test.n > 0 ? t->test.n : 1) * sizeof *all);
  if (!all) return -ENOMEM;
  for (int i = 0; i < t->test.n; i++) all[i] = i;
  pst_rng rng; /* its own: the training shuffles stay as they are */
  pst_rng_seed(&rng, t->seed ^ 0x5eed5ab5e7e7a1ull);
  pst_rng_shuffle(&rng, all, t->test.n);
  int b, e;
  pst_data_shard_range(n, t->index, t->world, &b, &e);
  free(t->subset_idx);
  t->subset_idx = malloc((size_t)(e - b > 0 ? e - b : 1) * sizeof *t->subset_idx);
  if (!t->subset_idx) {
    free(all);
    return -ENOMEM;
  }
  memcpy(t->subset_idx, all + b, (size_t)(e - b) * sizeof *t->subset_idx);
  t->subset_n = e - b;
  free(all);
  return 0;
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
  t->eval_every = (int)w->eval_every;
  if (t->world < 1 || t->index >= t->world || t->batch < 1 || t->epochs < 1) {
    wk_fail(t, "the ps sent an inconsistent registration (index %d of %d, batch %d)", t->index,
         t->world, t->batch);
    return -EPROTO;
  }
  if (pst_model_parse(w->model_spec, "model from the ps", &t->model, err, sizeof err) < 0 ||
      t->model.fingerprint != w->model_fingerprint || t->model.n_params != w->n_params) {
    wk_fail(t, "cannot use the ps's model: %s", err);
    return -EPROTO;
  }
  /* Data (loaded at start): this worker's disjoint shard of the training and test sets,
   * made into batches of the model's input shape (worker/imageops.h). */
  const pst_layer *in = &t->model.layers[0];
  if (pst_batch_prep_init(&t->prep, &t->train, t->opt.data_dir, in->in_h, in->in_w, in->in_c,
                          t->model.input_size, &t->opt.image, t->data_mean, t->data_std,
                          t->seed, t->index, err, sizeof err) < 0) {
    wk_fail(t, "%s", err);
    return -EINVAL;
  }
  t->test_prep = t->prep;
  t->test_prep.data = &t->test;
  pst_data_shard_range(t->train.n, t->index, t->world, &t->shard_begin, &t->shard_end);
  pst_data_shard_range(t->test.n, t->index, t->world, &t->test_begin, &t->test_end);
  if (t->eval_every > 0 && make_subset(t, w->eval_samples) < 0) {
    wk_fail(t, "out of memory for the test subset");
    return -ENOMEM;
  }
  /* Every worker takes the same number of steps per epoch, so sync steps line up: the
   * smallest shard's full batches (the shards differ by at most one sample). */
  t->steps_per_epoch = pst_steps_per_epoch(t->train.n, t->world, t->batch);
  if (t->steps_per_epoch < 1) {
    wk_fail(t, "a shard of %d samples holds no full batch of %d", t->train.n / t->world, t->batch);
    return -EINVAL;
  }
  /* Compute. */
  int rc = pst_device_open(t->opt.device, t->opt.gpu_memory_limit_mib, t->opt.threads,
                           &t->backend, err, sizeof err);
  if (rc < 0) {
    wk_fail(t, "%s", err);
    return rc;
  }
  if (err[0]) LOG_INFO("%s", err);
  rc = pst_net_create(&t->model, t->backend, t->batch, &t->net);
  if (rc < 0) {
    wk_fail(t, "cannot build the model on %s: %s", t->backend->name, strerror(-rc));
    return rc;
  }
  if (t->opt.push_by_layer) pst_net_on_grad_ready(t->net, wk_grad_ready, t);
  size_t n = t->model.n_params;
  t->params = host_buffer(t, n * sizeof(float));
  t->grad = host_buffer(t, n * sizeof(float));
  t->xb = malloc((size_t)t->batch * (size_t)t->model.input_size * sizeof(float));
  t->yb = malloc((size_t)t->batch * sizeof(int32_t));
  t->order = malloc((size_t)(t->shard_end - t->shard_begin) * sizeof(int32_t));
  if (!t->params || !t->grad || !t->xb || !t->yb || !t->order ||
      wk_prefetch_start(&t->prefetch, &t->prep, t->batch) < 0) {
    wk_fail(t, "out of memory for %zu parameters", n);
    return -ENOMEM;
  }
  LOG_INFO("worker %d of %d on %s: %s mode, shard [%d, %d), %d steps of %d per epoch, %d "
           "epochs%s%s", t->index, t->world, t->backend->name,
           t->mode == 0 ? "sync" : t->mode == 1 ? "async" : "ssp", t->shard_begin, t->shard_end,
           t->steps_per_epoch, t->batch, t->epochs, t->ps[0].client.session[0] ? "; ps over " : "",
           t->ps[0].client.session);
  return 0;
}

/* ---- the connection's callbacks ---- */

/* HELLO to one shard. Shard 0 gives this worker its index; the others are asked for it. */
static void send_hello(wk_trainer *t, wk_shard *sh) {
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  Pstrain__Hello hello = PSTRAIN__HELLO__INIT;
  int first = sh == &t->ps[0];
  hello.worker_name = (char *)t->opt.name;
  /* Registering again: the slot this worker had (its shard), and what it discarded. */
  hello.requested_index = t->welcomed || !first ? t->index : t->opt.requested_index;
  hello.dropped_gradients = t->discarded;
  hello.train_samples = (uint32_t)t->train.n;
  hello.test_samples = (uint32_t)t->test.n;
  hello.classes = (uint32_t)t->classes;
  if (t->n_ps > 1) {
    hello.shard_index = (uint32_t)shard_index(t, sh);
    hello.shard_count = (uint32_t)t->n_ps;
  }
  if (t->opt.model && t->opt.model[0] && !t->model_fp) {
    /* Read once: every shard and every reconnection is told the same. */
    static pst_model mine;
    char err[512];
    if (pst_model_load(t->opt.model, &mine, err, sizeof err) < 0) {
      wk_fail(t, "%s", err);
      return;
    }
    t->model_fp = mine.fingerprint;
  }
  hello.model_fingerprint = t->model_fp;
  h.type = PSTRAIN__MSG_TYPE__HELLO;
  h.hello = &hello;
  t->state = WK_REGISTERING;
  wk_client_send(&sh->client, &h);
}

/* Registration begins once every shard's connection is open: shard 0 first. */
void wk_register_all(wk_trainer *t) {
  t->hello_pending = 0;
  for (int i = 0; i < t->n_ps; i++) t->ps[i].welcomed = 0;
  send_hello(t, &t->ps[0]);
}

static void on_connected(wk_client *c) {
  wk_trainer *t = c->data;
  if (!wk_all_open(t)) {
    t->state = WK_CONNECTING;
    return;
  }
  /* A step still running from before the connection was lost ends first, so that the
   * HELLO can count its gradient as dropped. */
  if (t->work_running) {
    t->state = WK_REGISTERING;
    t->hello_pending = 1;
    return;
  }
  wk_register_all(t);
}

static int on_payload(wk_client *c, const Pstrain__Header *h, float **dst) {
  wk_trainer *t = c->data;
  wk_shard *sh = shard_of(c);
  /* Weights come for the pull out: while the worker waits for them or, with
   * --pull-by-layer, while a step already computes on the first of them. */
  int pulling = t->state == WK_PULLING || (t->pull_streaming && !sh->pulled);
  if (h->type != PSTRAIN__MSG_TYPE__WEIGHTS || !pulling || !sh->welcomed ||
      h->offset > sh->floats || h->count > sh->floats - h->offset) {
    snprintf(c->rd.err, sizeof c->rd.err, "unexpected tensor chunk (offset %" PRIu64 ")", h->offset);
    return -EPROTO;
  }
  *dst = t->params + sh->offset + h->offset;
  if (t->opt.pull_by_layer && !sh->pull_begun) {
    sh->pull_begun = 1;
    wk_try_early_step(t);
  }
  return 0;
}

/* A WELCOME from another shard, or after a reconnection: the same job, or an error. */
static int check_same_job(wk_trainer *t, wk_shard *sh, const Pstrain__Welcome *w) {
  if ((int)w->worker_index != t->index || (int)w->world_size != t->world ||
      w->model_fingerprint != t->model.fingerprint || (int)w->batch_size != t->batch ||
      (int)w->epochs != t->epochs || w->seed != t->seed || (int)w->mode != t->mode) {
    wk_fail(t, "the ps at %s:%d trains another job than %s (index %u of %u, model %016" PRIx64
            "); start this worker again to join it", sh->client.host, sh->client.port,
         t->welcomed ? "before the reconnection" : "shard 0",
         w->worker_index, w->world_size, w->model_fingerprint);
    return -EPROTO;
  }
  return 0;
}

/* The shard's part of the vector: what it says, which must be what this worker computes
 * from the model and its list of shards (kernels/partition.h). */
static int take_shard(wk_trainer *t, wk_shard *sh, const Pstrain__Welcome *w) {
  int i = shard_index(t, sh);
  uint32_t k = w->shard_count ? w->shard_count : 1; /* a ps from before shards: 0/1 */
  size_t lo, n;
  if (k != (uint32_t)t->n_ps || w->shard_index != (uint32_t)i ||
      pst_partition_range(t->model.n_params, t->n_ps, i, &lo, &n) < 0 ||
      (w->shard_count && (w->shard_offset != lo || w->shard_floats != n))) {
    wk_fail(t, "the ps at %s:%d is shard %u/%u of the weights, but was given as shard %d/%d "
            "(give every worker all the ps shards, in order)", sh->client.host, sh->client.port,
         w->shard_index, k, i, t->n_ps);
    return -EPROTO;
  }
  sh->offset = lo;
  sh->floats = n;
  sh->chunk_floats = w->chunk_floats;
  sh->start_step = w->start_step;
  sh->eval_epoch = w->eval_epoch;
  if (wk_client_prepare_push(&sh->client, n, w->chunk_floats) < 0) {
    wk_fail(t, "out of memory for %zu parameters", n);
    return -ENOMEM;
  }
  return 0;
}

/* Every shard has welcomed this worker: start where the slot stands. Shards can disagree
 * by a step when a push reached some of them and not the others before a connection broke,
 * or when one closed a step without this worker (--on-worker-loss continue) and another
 * waited for it; the earliest position is taken, and each shard's part of every push is
 * marked with the version pulled from that shard, so the shard ahead stays that step ahead
 * (its extra step is one without this worker, as under continue with one ps; async and
 * ssp: positions only order the data, and repeats are applied as any gradient). A larger
 * gap in sync mode means a shard resumed from an older checkpoint than the others stand at: its part would
 * stay steps behind theirs for the rest of the run, and the shards' epochs and positions
 * would no longer line up (a run was seen to stall so). The worker asks the shards ahead to
 * go back to their own checkpoints of the oldest version (ROLLBACK; each starts itself
 * again from it) and registers again; if they are still apart after that (a shard without
 * that checkpoint), it stops and says how to bring the shards to one version. */
static void all_welcomed(wk_trainer *t, int again, uint32_t timeout_ms) {
  uint64_t start = UINT64_MAX, newest = 0;
  uint32_t evals = UINT32_MAX;
  int behind = 0, ahead = 0;
  for (int i = 0; i < t->n_ps; i++) {
    if (t->ps[i].start_step < start) start = t->ps[i].start_step, behind = i;
    if (t->ps[i].start_step > newest) newest = t->ps[i].start_step, ahead = i;
    if (t->ps[i].eval_epoch < evals) evals = t->ps[i].eval_epoch;
  }
  if (t->mode == PSTRAIN__MODE__MODE_SYNC && newest - start > 1 && t->rollback_asked != start + 1) {
    LOG_WARN("the ps shards stand at steps %" PRIu64 " to %" PRIu64 " (shard %d resumed from an "
             "older checkpoint): asking the shards ahead to go back to version %" PRIu64,
             start, newest, behind, start);
    t->rollback_asked = start + 1;
    Pstrain__Header h = PSTRAIN__HEADER__INIT;
    h.type = PSTRAIN__MSG_TYPE__ROLLBACK;
    h.version = start;
    for (int i = 0; i < t->n_ps; i++)
      if (t->ps[i].start_step > start) wk_client_send_now(&t->ps[i].client, &h);
    char why[160];
    snprintf(why, sizeof why, "waiting for the ps shards to go back to version %" PRIu64, start);
    t->welcomed = 1; /* set up: what follows is a reconnection */
    for (int i = 0; i < t->n_ps; i++) wk_client_close(&t->ps[i].client, why);
    return;
  }
  if (newest - start <= 1) t->rollback_asked = 0;
  if (newest != start) {
    if (t->mode == PSTRAIN__MODE__MODE_SYNC && newest - start > 1) {
      wk_fail(t, "the ps shards stand at different steps (shard %d at %" PRIu64 ", shard %d at %" PRIu64
              "): a shard resumed from an older checkpoint; in sync mode every shard must go on "
              "from one version: stop them all and start each with --resume "
              "DIR/shard-I-of-K/ckpt-<V>.safetensors for a version V that every shard has",
           behind, start, ahead, newest);
      return;
    }
    LOG_WARN("the ps shards stand at steps %" PRIu64 " to %" PRIu64 " (shard %d is behind): "
             "going on from %" PRIu64, start, newest, behind, start);
  }
  t->welcomed = 1;
  t->reconnect_deadline = 0;
  t->discarded = 0;
  t->timeout_s = timeout_ms / 1000.0;
  wk_take_position(t, start, evals);
  if (again || start > 0)
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

static void on_welcome(wk_trainer *t, wk_shard *sh, const Pstrain__Welcome *w) {
  int again = t->welcomed, first = sh == &t->ps[0];
  if (first && !again) {
    if (setup_from_welcome(t, w) < 0) return;
  } else if (check_same_job(t, sh, w) < 0) {
    return;
  }
  if (take_shard(t, sh, w) < 0) return;
  sh->welcomed = 1;
  if (first)
    for (int i = 1; i < t->n_ps; i++) send_hello(t, &t->ps[i]);
  for (int i = 0; i < t->n_ps; i++)
    if (!t->ps[i].welcomed) return;
  all_welcomed(t, again, w->timeout_ms);
}

/* The last chunk of a shard's reply: once every shard's part is in, the weights are
 * complete. A sync pull asks every shard for the same version; with backup workers (or in
 * async and ssp) a shard may answer a newer one, and each part's version is what its push
 * is marked with. */
static void on_weights_done(wk_trainer *t, wk_shard *sh, uint64_t version) {
  sh->version = version;
  sh->pulled = 1;
  uint64_t oldest = UINT64_MAX;
  for (int i = 0; i < t->n_ps; i++) {
    if (!t->ps[i].pulled) return;
    if (t->ps[i].version < oldest) oldest = t->ps[i].version;
  }
  t->version = oldest;
  /* The ps asked for a dense evaluation of these weights. */
  if (t->subset_asked) t->subset_due = t->subset_asked;
  t->subset_asked = 0;
  wk_obs_weights_in(&t->obs);
  t->have_weights = 1;
  if (t->pull_streaming) {
    wk_pull_complete(t); /* a step computes on them already */
    return;
  }
  t->weights_fresh = 1;
  wk_next_work(t);
}

static int on_frame(wk_client *c, const Pstrain__Header *h) {
  wk_trainer *t = c->data;
  wk_shard *sh = shard_of(c);
  switch (h->type) {
    case PSTRAIN__MSG_TYPE__WELCOME:
      if (t->state != WK_REGISTERING || sh->welcomed) return -EPROTO;
      on_welcome(t, sh, h->welcome);
      return 0;
    case PSTRAIN__MSG_TYPE__WEIGHTS: {
      int streaming = t->pull_streaming;
      if (h->last) {
        if ((t->state != WK_PULLING && !streaming) || sh->pulled) return -EPROTO;
        on_weights_done(t, sh, h->version);
      }
      if (t->opt.pull_by_layer) wk_pull_progress(t, sh, h);
      return 0;
    }
    case PSTRAIN__MSG_TYPE__HEARTBEAT:
      return 0;
    case PSTRAIN__MSG_TYPE__EVAL:
      /* Shard 0 asks, just before the weights it is for (an ask out of place is ignored:
       * evaluations are figures, not training). */
      if (t->state == WK_PULLING && shard_index(t, sh) == 0) t->subset_asked = h->eval_point;
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
      wk_fail(t, "the ps%s refused this worker: %s", t->n_ps > 1 ? " shard" : "",
           h->error ? h->error->reason : "no reason given");
      return 0;
    case PSTRAIN__MSG_TYPE__SHUTDOWN: {
      const char *why = h->shutdown ? h->shutdown->reason : "no reason given";
      if (t->state == WK_FINISHING && !(h->shutdown && h->shutdown->failed)) {
        /* Every shard ends the run by itself once all workers are done with it. */
        sh->shut = 1;
        wk_client_close(c, NULL);
        for (int i = 0; i < t->n_ps; i++)
          if (!t->ps[i].shut) return 0;
        LOG_INFO("ps says: %s; exiting", why);
        t->state = WK_STOPPED;
      } else if (h->shutdown && h->shutdown->stopped) {
        /* Stopped on purpose: not a failure, and nothing to reconnect to. */
        LOG_INFO("the ps was stopped before training finished (%s); exiting", why);
        t->exit_code = PST_EXIT_STOPPED;
        t->state = WK_STOPPED;
        wk_close_all(t);
      } else {
        wk_fail(t, "the ps stopped training: %s", why);
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
  shard_of(c)->pushing = 0;
  for (int i = 0; i < t->n_ps; i++)
    if (t->ps[i].pushing) return;
  t->push_in_flight = 0;
  wk_obs_push_sent(&t->obs);
  /* Weights for the next step may have arrived before the push finished leaving, or
   * (--pull-by-layer) begun to. */
  if (!t->work_running && t->weights_fresh && t->state != WK_FINISHING && t->state != WK_STOPPED)
    wk_next_work(t);
  else
    wk_try_early_step(t);
}

static const wk_client_cbs client_cbs;

static int start_clients(wk_trainer *t, double timeout_s) {
  for (int i = 0; i < t->n_ps; i++) {
    wk_shard *sh = &t->ps[i];
    wk_client_free(&sh->client);
    sh->welcomed = sh->pulled = sh->pushing = sh->shut = 0;
    int rc = wk_client_start(&sh->client, t->loop, t->opt.ps[i].host, t->opt.ps[i].port,
                             timeout_s, t->opt.secret, t->opt.tls, t->opt.tls_name, &client_cbs, t);
    if (rc < 0) {
      sh->client.state = WK_CONN_CLOSED; /* it holds no handle: nothing to close */
      return rc;
    }
  }
  return 0;
}

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
  int rc = start_clients(t, left);
  if (rc < 0) {
    /* The shards started before the failure close first; the last one's on_closed ends
     * the run. */
    LOG_ERR("cannot reconnect: %s", uv_strerror(rc));
    t->exit_code = PST_EXIT_FAILED;
    t->state = WK_STOPPED;
    wk_close_all(t);
    for (int i = 0; i < t->n_ps; i++)
      if (t->ps[i].client.state != WK_CONN_CLOSED) return 0;
  }
  return rc;
}

/* One shard's connection has closed. A shard that said the run is over is done with; any
 * other closing (a lost ps, a failure, a stop) closes every connection, and once the last
 * has closed the worker reconnects to all or ends. */
static void on_closed(wk_client *c, const char *why) {
  wk_trainer *t = c->data;
  /* A TLS refusal (the ps's certificate is not from our CA, or the ps refused ours, or it does
   * not speak TLS) is a configuration error: retrying does not mend it until certificates, CAs
   * or flags change, so the worker stops with exit 2, the status of bad flags and files,
   * instead of reconnecting for --reconnect-timeout. A connection merely cut short
   * during the handshake is not one (the ps may have been stopping): it is a lost ps as any
   * other. */
  if (c->tls_refused && why) t->refused = 1;
  if (why && !t->lost_why) {
    snprintf(t->lost_buf, sizeof t->lost_buf, "%s", why);
    t->lost_why = t->lost_buf;
  }
  /* A step waiting for weights from this connection waits no more, whatever the state. */
  if (!shard_of(c)->shut) {
    t->pull_streaming = 0;
    wk_abandon_work(t);
  }
  if (!shard_of(c)->shut && t->state != WK_STOPPED && !t->losing) {
    t->losing = 1;
    wk_close_all(t);
  }
  for (int i = 0; i < t->n_ps; i++)
    if (t->ps[i].client.state != WK_CONN_CLOSED) return;
  /* Every connection is closed. */
  const char *lost = t->lost_why;
  int losing = t->losing;
  t->losing = 0;
  t->lost_why = NULL;
  if (losing && !t->refused && t->state != WK_STOPPED && !t->stop_requested &&
      reconnect(t, lost) == 0)
    return;
  if (lost && t->state != WK_STOPPED) {
    LOG_ERR("%s", lost);
    t->exit_code = t->refused ? PST_EXIT_USAGE : PST_EXIT_FAILED;
  } else if (t->state != WK_STOPPED && !t->stop_requested) {
    t->exit_code = 1;
  }
  t->state = WK_STOPPED;
  uv_close((uv_handle_t *)&t->sig_int, NULL);
  uv_close((uv_handle_t *)&t->sig_term, NULL);
  uv_close((uv_handle_t *)&t->hb_timer, NULL);
  /* A step still computing may wake grad_async until it ends: work_done closes it then. */
  t->closing = 1;
  if (!t->work_running) uv_close((uv_handle_t *)&t->grad_async, NULL);
}

/* Heartbeats while the loop has nothing else to send (a long step, a wait for the others),
 * and the ps's silence: it sends its own heartbeats, so a quiet ps is a dead or stopped one. */
static void on_hb_timer(uv_timer_t *h) {
  wk_trainer *t = h->data;
  double now = pst_now(), gap = now - t->hb_last_tick;
  t->hb_last_tick = now;
  if (!(t->timeout_s > 0)) return;
  for (int i = 0; i < t->n_ps; i++) {
    wk_client *c = &t->ps[i].client;
    if (c->state != WK_CONN_OPEN) continue;
    /* Stalled (SIGSTOP, a frozen host) for longer than the ps waits: the ps has given this
     * worker up, and whatever it computed meanwhile is late. Register again at once. */
    if (gap > t->timeout_s) {
      char why[128];
      snprintf(why, sizeof why, "this worker was stalled for %.1f s, past the ps's timeout", gap);
      wk_client_close(c, why);
      return;
    }
    /* Connected again but holding the HELLO until a stale step ends (on_connected): the ps
     * owes nothing before a HELLO, so its silence means nothing yet (it closes the
     * connection itself after its --hello-timeout). Counting it made the worker drop the
     * connection every timeout_s and connect again, for as long as the step ran. */
    if (t->hello_pending) continue;
    /* After a shorter stall of this process, the ps's messages wait unread in the socket:
     * silence is measured from now on, not charged to the ps. */
    if (gap > 0.2 && c->last_rx < now) c->last_rx = now;
    if (now - c->last_rx > t->timeout_s) {
      char why[128];
      snprintf(why, sizeof why, "no message from the ps%s for %.1f s",
               t->n_ps > 1 ? " shard" : "", now - c->last_rx);
      wk_client_close(c, why);
      return;
    } else if (now - c->last_tx > t->timeout_s / 4) {
      Pstrain__Header hb = PSTRAIN__HEADER__INIT;
      hb.type = PSTRAIN__MSG_TYPE__HEARTBEAT;
      wk_client_send(c, &hb);
    }
  }
}

static const wk_client_cbs client_cbs = {on_connected, on_payload, on_frame, on_push_sent, on_closed};

static void on_signal(uv_signal_t *h, int signum) {
  wk_trainer *t = h->data;
  /* Once the worker has stopped (the ps said training is complete, or a failure was
   * decided), a late signal, e.g. the launcher's as it reaps a finished job, changes nothing:
   * the handles are already closing and the exit status is settled. */
  if (t->stop_requested || t->state == WK_STOPPED) return;
  LOG_INFO("%s received: stopping", signum == SIGINT ? "SIGINT" : "SIGTERM");
  t->stop_requested = 1;
  t->exit_code = PST_EXIT_STOPPED;
  /* A step on the threadpool is not interrupted, but its waits end (a streamed step's for
   * weights, a slow one's idling); its completion closes the clients. */
  if (!t->work_running) wk_close_all(t);
  else wk_abandon_work(t);
}

int wk_trainer_start(wk_trainer *t, uv_loop_t *loop, const wk_options *opt, char *err,
                     size_t errlen) {
  memset(t, 0, sizeof *t);
  if (uv_mutex_init(&t->pull_mu) < 0 || uv_cond_init(&t->pull_cond) < 0) {
    snprintf(err, errlen, "cannot make a mutex");
    return -ENOMEM;
  }
  t->loop = loop;
  t->opt = *opt;
  t->n_ps = opt->n_ps > 0 ? opt->n_ps : 1;
  wk_obs_init(&t->obs);
  /* The data comes first, before the loop runs: a worker with a bad --data-dir never takes
   * a slot, and the seconds of decompression never hold up its heartbeats. */
  char desc[512];
  if (pst_dataset_open(opt->data_dir, &opt->image, &t->train, &t->test, t->data_mean,
                       t->data_std, desc, sizeof desc, err, errlen) < 0)
    return -EIO;
  LOG_INFO("data: %s", desc);
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
  uv_async_init(loop, &t->grad_async, wk_on_grad_ready);
  t->grad_async.data = t;
  uv_timer_start(&t->hb_timer, on_hb_timer, 25, 25);
  t->hb_last_tick = pst_now();
  snprintf(err, errlen, "cannot start the connection");
  return start_clients(t, opt->connect_timeout);
}

void wk_trainer_free(wk_trainer *t) {
  wk_prefetch_stop(&t->prefetch);
  for (int i = 0; i < t->n_ps; i++) wk_client_free(&t->ps[i].client);
  host_buffer_free(t, t->params);
  host_buffer_free(t, t->grad);
  if (t->net) pst_net_destroy(t->net);
  if (t->backend) t->backend->destroy(t->backend);
  pst_data_free(&t->train);
  pst_data_free(&t->test);
  free(t->xb);
  free(t->yb);
  free(t->order);
  free(t->subset_idx);
  uv_cond_destroy(&t->pull_cond);
  uv_mutex_destroy(&t->pull_mu);
}
