/* The sessions with the ps: connecting to every shard, the frames that arrive, heartbeats
 * and silence, reconnecting after a loss, and the end. The top of the training loop: it
 * calls down into registering (HELLO, WELCOME, the model and the slot: worker/register.c),
 * the step machine (worker/step.c), the data position (worker/position.c) and the shards as
 * a group (worker/shards.c), and none of them calls back (worker/README.md). */
#include "worker/trainer.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/notify.h"
#include "common/timeline.h"
#include "data/dataset.h"
#include "worker/position.h"
#include "worker/register.h"
#include "worker/setup.h"
#include "worker/shards.h"
#include "worker/layer_push.h"
#include "worker/step.h"

/* The shard whose connection c is. */
static wk_shard *shard_of(wk_client *c) {
  return (wk_shard *)((char *)c - offsetof(wk_shard, client));
}

/* ---- the connection's callbacks ---- */
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
   * --pull-by-layer, while a step already computes on the first of them, or while the step
   * before computes (a PULL sent ahead, wk_pull_ahead). */
  int pulling = t->state == WK_PULLING || ((t->pull_streaming || t->pull_ahead) && !sh->pulled);
  if (h->type != PSTRAIN__MSG_TYPE__WEIGHTS || !pulling || !sh->welcomed ||
      h->offset > sh->floats || h->count > sh->floats - h->offset) {
    snprintf(c->rd.err, sizeof c->rd.err, "unexpected tensor chunk (offset %" PRIu64 ")", h->offset);
    return -EPROTO;
  }
  /* A delta chunk (--pull-compress delta) is added to the weights once it is in whole. */
  *dst = h->delta ? (float *)c->pull_delta_in : t->params + sh->offset + h->offset;
  if (t->opt.pull_by_layer && !sh->pull_begun) {
    sh->pull_begun = 1;
    wk_try_early_step(t);
  }
  return 0;
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
  if (t->pull_ahead) {
    t->pull_ahead_done = 1; /* the step computing now takes them at its end */
    return;
  }
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
    case PSTRAIN__MSG_TYPE__WELCOME: {
      if (t->state != WK_REGISTERING || sh->welcomed) return -EPROTO;
      /* Registration says when every shard has welcomed; the step machine begins there. */
      wk_welcomed wd;
      if (wk_on_welcome(t, sh, h->welcome, wk_grad_ready, &wd) > 0) wk_enter_session(t, &wd);
      return 0;
    }
    case PSTRAIN__MSG_TYPE__WEIGHTS: {
      if (t->leaving) return 0; /* a reply that was on its way when this worker said goodbye */
      if (pst_tl_on() && c->tl_chunk_at > 0)
        pst_tl_async("pull", t->tl_pull_eval ? "pull chunk (evaluation)" : "pull chunk",
                     ((uint64_t)wk_shard_index(t, sh) << 32) | (h->offset & 0xffffffffu),
                     c->tl_chunk_at, pst_now(),
                     PST_TL_CHUNK(t->pull_step, -1, h->offset, h->count, h->version));
      int streaming = t->pull_streaming;
      /* An encoded chunk landed at the start of its place (on_payload checked the range):
       * float32 from here on, before any step may compute on it. */
      float *w = t->params + sh->offset + h->offset;
      if (h->delta && h->sparse) {
        /* The values that changed since the weights this worker holds, as the ps set them
         * in its copy (pst_sparse_delta). */
        if (pst_sparse_apply(c->pull_delta_in, c->rd.prefix.payload_len, w, (size_t)h->count) < 0) {
          snprintf(c->rd.err, sizeof c->rd.err, "a sparse delta chunk with a bad pair");
          return -EPROTO;
        }
      } else if (h->delta) {
        /* The change from the weights this worker holds: the ps added it to its copy of
         * them with the same arithmetic (pst_int8_delta, which codec_test checks against
         * this routine), so both stay equal bit for bit. */
        if (pst_int8_add(c->pull_delta_in, (size_t)h->count + 4, w, (size_t)h->count) < 0) {
          snprintf(c->rd.err, sizeof c->rd.err, "a delta chunk whose scale is not finite");
          return -EPROTO;
        }
      } else if (c->pull_enc != PST_ENC_NONE) { /* fp16, bf16; a no-op for delta's float32 */
        pst_enc_decode_inplace(c->pull_enc, w, (size_t)h->count);
      }
      if (h->last) {
        if ((t->state != WK_PULLING && !streaming && !t->pull_ahead) || sh->pulled) return -EPROTO;
        on_weights_done(t, sh, h->version);
      }
      if (t->opt.pull_by_layer) wk_pull_progress(t, sh, h);
      return 0;
    }
    case PSTRAIN__MSG_TYPE__HEARTBEAT:
      /* The answer to a clock probe (step.c) carries the ps's clock. */
      if (h->clock_probe > 0) wk_clock_sample(t, sh, h->clock_probe, h->clock_seconds);
      return 0;
    case PSTRAIN__MSG_TYPE__DATA:
      /* Shard 0 hands out the data, just before the weights of the step it is for. */
      if (t->leaving) return 0;
      if (!t->data_ranges || t->state != WK_PULLING || wk_shard_index(t, sh) != 0) return -EPROTO;
      if (wk_take_range(t, h->data) < 0) {
        /* A bad frame like any other: this connection closes with the reason and the
         * worker connects again; the ps takes back what it handed out on it. */
        snprintf(c->rd.err, sizeof c->rd.err, "a range this worker cannot train (epoch %u, "
                 "positions [%" PRIu64 ", +%u) of %d samples, batch %d)",
                 h->data ? h->data->epoch : 0, h->data ? h->data->start : 0,
                 h->data ? h->data->count : 0, t->train.n, t->batch);
        return -EPROTO;
      }
      return 0;
    case PSTRAIN__MSG_TYPE__EVAL:
      /* Shard 0 asks, just before the weights it is for (an ask out of place is ignored:
       * evaluations are figures, not training). */
      if (t->state == WK_PULLING && wk_shard_index(t, sh) == 0) t->subset_asked = h->eval_point;
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
  /* The timeline's step: its weights asked for, to its push's last byte out. */
  if (pst_tl_on())
    pst_tl_async("step", "step", t->tl_step, t->tl_step_at, pst_now(), PST_TL_STEP(t->tl_step, -1));
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
  double now = pst_now();
  if (!t->welcomed && t->retry_unheard && t->state != WK_STOPPED && !t->stop_requested &&
      now < t->connect_deadline) {
    /* Never registered, and the ps closed the connection before saying anything: it had no
     * descriptor or connection to spare, or was starting or stopping. Tried again until
     * --connect-timeout, as a refused connect is. */
    t->retry_unheard = 0;
    LOG_INFO("the ps closed the connection before answering (%s); trying again for up to %.0f s",
             why ? why : "closed", t->connect_deadline - now);
    t->state = WK_CONNECTING;
    return start_clients(t, t->connect_deadline - now) < 0 ? -1 : 0;
  }
  if (!t->welcomed || t->state == WK_STOPPED || t->stop_requested || !(t->opt.reconnect_timeout > 0))
    return -1;
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
  if ((c->tls_refused || c->auth_refused) && why) t->refused = 1;
  if (c->closed_unheard) t->retry_unheard = 1;
  if (why && !t->lost_why) {
    snprintf(t->lost_buf, sizeof t->lost_buf, "%s", why);
    t->lost_why = t->lost_buf;
  }
  /* A step waiting for weights from this connection waits no more, whatever the state. */
  if (!shard_of(c)->shut) {
    t->pull_streaming = 0;
    t->pull_ahead = t->pull_ahead_done = 0; /* its reply will not come: the next session pulls */
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
  if (t->leaving && t->state != WK_STOPPED) {
    /* Goodbye was said (or meant): a connection that closes now ends the job for this worker
     * as the ps's SHUTDOWN would. The ps takes back what it held when it finds it gone. */
    if (lost)
      LOG_INFO("left the job; the connection closed before the ps's goodbye (%s): the ps takes "
               "back this worker's range when it finds it gone", lost);
    else
      LOG_INFO("left the job");
    t->exit_code = 0;
    t->state = WK_STOPPED;
    lost = NULL;
    losing = 0;
  }
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
  if (t->data_ranges && t->welcomed && !t->leaving && t->state != WK_FINISHING &&
      wk_all_open(t)) {
    /* The ps hands out the data: leaving is no failure. The step under way (or the one whose
     * weights are on their way) is trained and pushed, then goodbye, and exit 0 (wk_leave,
     * from after_train): leaving only between a push and the next pull means no reply of
     * the ps is ever cut off, and the range that step trained is not wasted. */
    if (!t->leave_pending)
      LOG_INFO("%s received: leaving the job after this step", signum == SIGINT ? "SIGINT" : "SIGTERM");
    t->leave_pending = 1;
    return;
  }
  if (t->data_ranges && t->welcomed && !t->leaving) {
    /* Between connections: nothing to hand back that the ps does not take back itself when it
     * finds the connection gone. Leaving is still no failure. */
    LOG_INFO("%s received while reconnecting: leaving the job", signum == SIGINT ? "SIGINT" : "SIGTERM");
    t->leaving = 1;
    t->stop_requested = 1;
    t->exit_code = 0;
    if (!t->work_running) wk_close_all(t);
    else wk_abandon_work(t);
    return;
  }
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
  /* The data comes first, before the loop runs (worker/setup.h). */
  char desc[512];
  if (wk_setup_data(t, desc, sizeof desc, err, errlen) < 0) return -EIO;
  LOG_INFO("data: %s", desc);
  uv_signal_init(loop, &t->sig_int);
  uv_signal_init(loop, &t->sig_term);
  t->sig_int.data = t->sig_term.data = t;
  uv_signal_start(&t->sig_int, on_signal, SIGINT);
  uv_signal_start(&t->sig_term, on_signal, SIGTERM);
  /* Fine enough for the shortest timeouts the ps allows (0.2 s). */
  uv_timer_init(loop, &t->hb_timer);
  t->hb_timer.data = t;
  uv_async_init(loop, &t->grad_async, wk_on_grad_async);
  t->grad_async.data = t;
  uv_timer_start(&t->hb_timer, on_hb_timer, 25, 25);
  t->hb_last_tick = pst_now();
  snprintf(err, errlen, "cannot start the connection");
  t->connect_deadline = pst_now() + opt->connect_timeout;
  return start_clients(t, opt->connect_timeout);
}

void wk_trainer_free(wk_trainer *t) {
  for (int i = 0; i < t->n_ps; i++) wk_client_free(&t->ps[i].client);
  wk_setup_free(t);
  uv_cond_destroy(&t->pull_cond);
  uv_mutex_destroy(&t->pull_mu);
}
