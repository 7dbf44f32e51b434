/* Registering with the ps: HELLO to every shard (shard 0 first, which gives this worker its
 * index), each WELCOME checked against the job and the shard's part of the vector, the
 * model, the data and the buffers set up from the first, and the shards brought to one
 * step before the session begins (worker/trainer.c has the connections, step.c the steps).
 * It calls neither: wk_on_welcome's result tells the caller when the session may begin. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/timeline.h"
#include "kernels/device.h"
#include "data/dataset.h"
#include "worker/register.h"
#include "worker/setup.h"
#include "worker/shards.h"

static int setup_from_welcome(wk_trainer *t, const Pstrain__Welcome *w,
                              pst_grad_ready_fn grad_ready) {
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
  t->clip_norm = w->clip_norm;
  t->eval_on_ps = w->eval_on_ps;
  t->data_ranges = w->data_ranges;
  if (t->opt.leave_after_step > 0 && !t->data_ranges) {
    wk_fail(t, "--leave-after-step: this ps gives each worker a fixed shard, which nobody else "
               "would train; leaving needs a ps that hands out the data (--workers MIN:MAX or "
               "--data-order ps)");
    return -EINVAL;
  }
  if (t->world < 1 || t->index >= t->world || t->batch < 1 || t->epochs < 1 ||
      !(t->clip_norm >= 0 && t->clip_norm <= 1e30)) {
    wk_fail(t, "the ps sent an inconsistent registration (index %d of %d, batch %d, clip norm %g)",
            t->index, t->world, t->batch, t->clip_norm);
    return -EPROTO;
  }
  if (pst_model_parse(w->model_spec, "model from the ps", &t->model, err, sizeof err) < 0 ||
      t->model.fingerprint != w->model_fingerprint || t->model.n_params != w->n_params) {
    wk_fail(t, "cannot use the ps's model: %s", err);
    return -EPROTO;
  }
  if (t->eval_every > 0 && wk_make_subset(t, w->eval_samples) < 0) {
    wk_fail(t, "out of memory for the test subset");
    return -ENOMEM;
  }
  /* The shards, batches, device, net and buffers, as an all-reduce rank sets them up. */
  char why[512] = "";
  int rc = wk_setup_compute(t, grad_ready, why, sizeof why);
  if (rc < 0) {
    wk_fail(t, "%s", why);
    return rc;
  }
  LOG_INFO("layer by layer on %s: push %s, pull %s, large dense layers in pieces %s",
           t->backend->name, t->opt.push_by_layer ? "on" : "off",
           t->opt.pull_by_layer ? "on" : "off", t->opt.layer_pieces ? "on" : "off");
  if (t->data_ranges)
    LOG_INFO("worker %d (of at most %d) on %s: %s mode, the ps hands out ranges of each epoch's "
             "order of %d samples, batch %d, %d epochs%s%s", t->index, t->world,
             t->backend->name, t->mode == 0 ? "sync" : t->mode == 1 ? "async" : "ssp",
             t->train.n, t->batch, t->epochs, t->ps[0].client.session[0] ? "; ps over " : "",
             t->ps[0].client.session);
  else
    LOG_INFO("worker %d of %d on %s: %s mode, shard [%d, %d), %d steps of %d per epoch, %d "
             "epochs%s%s", t->index, t->world, t->backend->name,
             t->mode == 0 ? "sync" : t->mode == 1 ? "async" : "ssp", t->shard_begin,
             t->shard_end, t->steps_per_epoch, t->batch, t->epochs,
             t->ps[0].client.session[0] ? "; ps over " : "", t->ps[0].client.session);
  return 0;
}


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
  hello.encodings = PST_ENC_KNOWN; /* the ps refuses this worker for a job in any other */
  hello.takes_ranges = 1;
  if (t->n_ps > 1) {
    hello.shard_index = (uint32_t)wk_shard_index(t, sh);
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
  /* Shared memory, should the ps be on this host (worker/client_ring.c). */
  sh->client.tl_shard = wk_shard_index(t, sh);
  sh->client.ring_wanted = t->opt.shm;
  hello.ring = (Pstrain__RingOffer *)wk_client_ring_offer(&sh->client);
  h.type = PSTRAIN__MSG_TYPE__HELLO;
  h.hello = &hello;
  t->state = WK_REGISTERING;
  sh->client.tl_shard = wk_shard_index(t, sh);
  sh->hello_at = pst_now();
  wk_client_send(&sh->client, &h);
}

/* Registration begins once every shard's connection is open: shard 0 first. */
void wk_register_all(wk_trainer *t) {
  t->hello_pending = 0;
  for (int i = 0; i < t->n_ps; i++) t->ps[i].welcomed = 0;
  send_hello(t, &t->ps[0]);
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
  int i = wk_shard_index(t, sh);
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
  sh->client.push_runs = w->push_runs;
  sh->start_step = w->start_step;
  sh->eval_epoch = w->eval_epoch;
  int rc = wk_client_prepare_push(&sh->client, &t->model, lo, n, w->chunk_floats,
                                  w->layer_chunks);
  t->cuts_stale = 1;
  if (rc == 0) {
    rc = wk_client_set_encodings(&sh->client, (pst_enc)w->push_encoding,
                                 (pst_enc)w->pull_encoding, w->topk_fraction, w->topk_warmup,
                                 (float)w->topk_momentum);
    if (rc == -EINVAL) {
      /* Hello.encodings said what this worker knows: a ps that asks for more is broken. */
      wk_fail(t, "the ps at %s:%d asked for encodings %u and %u (top-k fraction %g, momentum %g), "
              "which this worker does not know", sh->client.host, sh->client.port,
              w->push_encoding, w->pull_encoding, w->topk_fraction, w->topk_momentum);
      return -EPROTO;
    }
  }
  if (rc == -EINVAL) {
    wk_fail(t, "the ps at %s:%d sent a chunk size of 0 floats", sh->client.host,
            sh->client.port);
    return rc;
  }
  if (rc < 0) {
    wk_fail(t, "out of memory for %zu parameters", n);
    return rc;
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
 * that checkpoint), it stops and says how to bring the shards to one version. Returns 1
 * with *out filled when the session may begin (wk_on_welcome), else 0. */
static int all_welcomed(wk_trainer *t, int again, uint32_t timeout_ms, wk_welcomed *out) {
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
    return 0;
  }
  if (newest - start <= 1) t->rollback_asked = 0;
  if (newest != start) {
    if (t->mode == PSTRAIN__MODE__MODE_SYNC && newest - start > 1) {
      wk_fail(t, "the ps shards stand at different steps (shard %d at %" PRIu64 ", shard %d at %" PRIu64
              "): a shard resumed from an older checkpoint; in sync mode every shard must go on "
              "from one version: stop them all and start each with --resume "
              "DIR/shard-I-of-K/ckpt-<V>.safetensors for a version V that every shard has",
           behind, start, ahead, newest);
      return 0;
    }
    LOG_WARN("the ps shards stand at steps %" PRIu64 " to %" PRIu64 " (shard %d is behind): "
             "going on from %" PRIu64, start, newest, behind, start);
  }
  t->welcomed = 1;
  t->reconnect_deadline = 0;
  t->discarded = 0;
  t->timeout_s = timeout_ms / 1000.0;
  out->start_step = start;
  out->evals_done = evals;
  out->again = again;
  return 1;
}

void wk_clock_sample(wk_trainer *t, wk_shard *sh, double sent_at, double ps_clock) {
  /* The offset between the clocks (the ps's minus this one's) is the bracket's middle, to
   * within half its width; the timeline keeps the narrowest bracket (common/timeline.h). */
  double now = pst_now();
  if (!(ps_clock > 0) || !(sent_at > 0) || now < sent_at) return;
  char peer[32];
  snprintf(peer, sizeof peer, "ps shard %d", wk_shard_index(t, sh));
  pst_tl_offset(peer, ps_clock - (sent_at + now) / 2, (now - sent_at) / 2);
}

int wk_on_welcome(wk_trainer *t, wk_shard *sh, const Pstrain__Welcome *w,
                  pst_grad_ready_fn grad_ready, wk_welcomed *out) {
  int again = t->welcomed, first = sh == &t->ps[0];
  /* The ps's clock, bracketed by this HELLO out and its WELCOME in. */
  wk_clock_sample(t, sh, sh->hello_at, w->clock_seconds);
  if (first && !again) {
    if (setup_from_welcome(t, w, grad_ready) < 0) return 0;
  } else if (check_same_job(t, sh, w) < 0) {
    return 0;
  }
  if (take_shard(t, sh, w) < 0) return 0;
  wk_client_ring_welcome(&sh->client, w);
  sh->welcomed = 1;
  if (first)
    for (int i = 1; i < t->n_ps; i++) send_hello(t, &t->ps[i]);
  for (int i = 0; i < t->n_ps; i++)
    if (!t->ps[i].welcomed) return 0;
  return all_welcomed(t, again, w->timeout_ms, out);
}
