#include "ps/server.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/notify.h"
#include "common/shard.h"
#include "ps/state/checkpointing.h"
#include "proto/wire.h"
#include "ps/net/conn.h"
#include "ps/obs/obs.h"
#include "ps/net/rules.h"


/* A graceful close: after the queued writes (an ERROR or SHUTDOWN) have gone out. */
static void conn_close(ps_conn *c, const char *why) { ps_conn_close(c, why, 0); }

/* ---- the push path ---- */

/* A sync chunk completed by c's share would have had non-finite values: it kept those of
 * the step before (ps/train/update.h). Nobody's share alone is to blame, so it is logged and
 * counted, not struck. */
static void note_unsafe(ps_server *s, ps_conn *c) {
  ps_net_count_rejected(s->net);
  ps_log_conn(s->net, "step %" PRIu64 ": %s (completed by worker %d's share): that part of the "
              "model keeps its values (%" PRIu64 " such chunks so far)", s->core.store.version,
              s->core.upd.reject_why, c->worker, s->core.upd.unsafe_chunks);
}

/* Offers the chunk waiting in c->recv. Returns 1 taken, 0 later, <0 error (closed). */
static int try_take(ps_conn *c) {
  ps_server *s = c->srv;
  int published = 0;
  ps_worker *w = &s->roster.workers[c->worker];
  uint64_t staleness = pst_update_staleness(&s->core.upd, c->push_version);
  double tl_offer = ps_tl_offer(c);
  int rc = c->push_version > s->core.store.version
               ? -ESTALE
               : pst_update_offer(&s->core.upd, c->worker, c->push_version, c->pending_chunk,
                                  c->pending_flags, c->push_dst, &published);
  if (rc == PST_OFFER_LATER) return 0;
  if (s->core.upd.last_unsafe && rc != PST_OFFER_REJECTED) note_unsafe(s, c);
  if (rc == PST_OFFER_REJECTED || rc == -ESTALE) {
    char why[160];
    if (rc == -ESTALE)
      snprintf(why, sizeof why, "a gradient computed on version %" PRIu64 ", newer than the ps's %" PRIu64,
               c->push_version, s->core.store.version);
    else
      snprintf(why, sizeof why, "%s", s->core.upd.reject_why);
    c->pending = 0;
    c->push_dropped = !(c->pending_flags & PST_CHUNK_LAST);
    ps_data_pushed(s, c->worker, c->push_version, 0);
    ps_step_pushed(s, c->worker); /* it answered, if with nothing the step can take */
    if (published) ps_ckpt_published(s);
    ps_reject(c, why);
    if (c->state == CONN_CLOSING) return -EPROTO;
    ps_server_kick(s);
    return 1;
  }
  if (rc == PST_OFFER_DROPPED) {
    /* A late gradient (a backup worker's, or one computed before its worker was lost), or
     * one from a worker that joined after the step opened: read, counted, discarded. */
    if (w->dropped == 0 || w->dropped % 100 == 0)
      LOG_INFO("worker %d '%s': gradient computed on version %" PRIu64
               " dropped (the ps is at version %" PRIu64 "; %" PRIu64 " dropped so far)",
               c->worker, w->name, c->push_version, s->core.store.version, w->dropped + 1);
    c->pending = 0;
    c->push_dropped = !(c->pending_flags & PST_CHUNK_LAST);
    ps_data_pushed(s, c->worker, c->push_version, 0);
    w->dropped++;
    w->last_version = c->push_version;
    if (c->push_version + 1 > w->pushed_to) w->pushed_to = c->push_version + 1;
    ps_step_pushed(s, c->worker);
    return 1;
  }
  if (rc < 0) {
    char why[160];
    snprintf(why, sizeof why,
             "out-of-order gradient chunk (version %" PRIu64 ", at version %" PRIu64 ")",
             c->push_version, s->core.store.version);
    ps_send_error(c, why);
    conn_close(c, why);
    return rc;
  }
  ps_tl_taken(c, tl_offer);
  c->pending = 0;
  if (c->pending_flags & PST_CHUNK_LAST) {
    w->pushes++;
    w->whole_for = c->push_version + 1;
    w->last_version = c->push_version;
    w->last_staleness = staleness;
    if (c->push_version + 1 > w->pushed_to) w->pushed_to = c->push_version + 1;
    s->events.applied(s, staleness, pst_now() - c->push_at);
    ps_data_pushed(s, c->worker, c->push_version, 1);
    ps_step_pushed(s, c->worker);
  }
  /* Taking this chunk may unblock the next worker's copy of it, or publish a step that
   * waiting pulls want (and a checkpoint may be due). */
  if (published) ps_ckpt_published(s);
  ps_server_kick(s);
  return 1;
}

/* Re-offers every held-back chunk and answers every pull that became answerable, until
 * nothing moves. Guarded so that nested calls (a resumed reader publishing a step) only
 * ask for one more round. */
void ps_server_kick(ps_server *s) {
  if (s->life.kicking) {
    s->life.kick_again = 1;
    return;
  }
  s->life.kicking = 1;
  ps_step_opened(s);
  do {
    s->life.kick_again = 0;
    for (ps_conn *c = s->net->conns, *next; c; c = next) {
      next = c->next;
      if (c->state != CONN_WORKER) continue;
      if (c->pull_waiting && ps_pull_ready(s, c)) ps_pull_answer(c);
      if (c->pull_writing && c->pull_sent < s->core.upd.n_chunks) ps_pull_continue(c);
      if (c->pending) {
        int rc = try_take(c);
        if (rc <= 0) continue;
      }
      if (!c->reading && !c->pending && !c->yielded && !ps_io_busy(&c->rjob)) {
        int rc = pst_reader_resume(&c->rd);
        if (rc < 0) {
          conn_close(c, c->rd.err);
        } else if (rc == 0 && c->state == CONN_WORKER) {
          ps_conn_start_reading(c);
        }
      }
    }
  } while (s->life.kick_again);
  s->life.kicking = 0;
  ps_check_progress(s);
}

/* ---- the reader's callbacks ---- */

static void count_frame(ps_server *s, int type, ps_action act) {
  ps_net_count_frame(s->net, type, act);
}

static int on_payload(pst_reader *r, const Pstrain__Header *h, float **dst) {
  ps_conn *c = r->data;
  ps_server *s = c->srv;
  /* The table's word (ps/net/rules.h) is taken here, before the payload, and kept for on_frame:
   * reading the chunk moves the connection into the middle of a push. */
  ps_phase ph = ps_conn_phase(c);
  c->frame_act = ps_rule(ph, (int)h->type);
  if (c->frame_act != PS_ACT_HANDLE && c->frame_act != PS_ACT_STRIKE)
    count_frame(s, (int)h->type, c->frame_act); /* on_frame will not see it */
  if (c->frame_act == PS_ACT_STRIKE && h->count <= s->core.upd.chunk_floats) {
    *dst = c->recv; /* read, and dropped with the strike */
    return 0;
  }
  if (c->frame_act != PS_ACT_HANDLE) {
    char name[16];
    snprintf(r->err, sizeof r->err, "%s %s", ps_msg_name((int)h->type, name, sizeof name),
             ps_phase_name(ph));
    return -EPROTO;
  }
  if (c->push_skip) {
    if (h->count > s->core.upd.chunk_floats) {
      snprintf(r->err, sizeof r->err, "gradient chunk of %" PRIu64 " floats (at most %u)",
               h->count, s->core.upd.chunk_floats);
      return -EPROTO;
    }
    *dst = c->recv;
    return 0;
  }
  /* The chunk this one is, and whether it may come now (ps/net/push_order.h). */
  uint32_t chunk = 0;
  int first = c->push_pos == 0;
  if (ps_push_order_check(&c->push_order, &s->core.upd, c->push_pos, c->push_version, h, &chunk,
                          c->push_bad, sizeof c->push_bad) < 0) {
    /* Read and dropped (ps/train/validate.c) when it fits the receive buffer; anything bigger
     * cannot be a chunk of this model at all. */
    if (h->count > s->core.upd.chunk_floats) {
      snprintf(r->err, sizeof r->err, "%s", c->push_bad);
      return -EPROTO;
    }
    *dst = c->recv;
    return 0;
  }
  c->push_chunk = chunk;
  if (first) {
    c->push_version = h->version;
    c->push_at = pst_now();
    ps_pull_push_begins(c, h->wait_us); /* the round trip (ps/obs/metrics.h) */
  }
  /* A share that would be copied into the sum is read straight into it (not a top-k one:
   * its pairs may need more room than the chunk's floats, and are spread out from a copy;
   * nor an int8 one, whose scale makes a one-value chunk 5 bytes). */
  c->push_dst = c->push_dropped || s->opt.push_enc == PST_ENC_TOPK ||
                        s->opt.push_enc == PST_ENC_INT8
                    ? NULL
                    : pst_update_direct(&s->core.upd, c->worker, c->push_version, chunk);
  if (c->push_dst == NULL) c->push_dst = c->recv;
  *dst = c->push_dst;
  return 0;
}

/* A frame whose action (ps/net/rules.h) is not to handle it: 0 or PST_READER_PAUSE to go on,
 * -EPROTO to close. */
static int refuse_frame(ps_conn *c, const Pstrain__Header *h, ps_phase ph, ps_action act) {
  pst_reader *r = &c->rd;
  char name[16], why[120];
  snprintf(why, sizeof why, "%s %s", ps_msg_name((int)h->type, name, sizeof name),
           ps_phase_name(ph));
  switch (act) {
    case PS_ACT_IGNORE:
      return PST_READER_PAUSE;
    case PS_ACT_STRIKE:
      ps_reject(c, why);
      return c->state == CONN_CLOSING ? PST_READER_PAUSE : 0;
    default:
      if (h->type == PSTRAIN__MSG_TYPE__ERROR)
        /* A worker that could not start (its data, its device) says why before it goes; the
         * close frees its slot. */
        snprintf(r->err, sizeof r->err, "the worker failed: %.100s",
                 h->error && h->error->reason ? h->error->reason : "no reason given");
      else
        snprintf(r->err, sizeof r->err, "%s", why);
      return -EPROTO;
  }
}

static int on_frame(pst_reader *r, const Pstrain__Header *h) {
  ps_conn *c = r->data;
  ps_server *s = c->srv;
  /* Every frame passes the table first (a PUSH was judged with its header, on_payload). */
  ps_phase ph = ps_conn_phase(c);
  ps_action act = h->type == PSTRAIN__MSG_TYPE__PUSH ? c->frame_act : ps_rule(ph, (int)h->type);
  count_frame(s, (int)h->type, act);
  if (r->prefix.flags & PST_WIRE_FLAG_RING) s->net->shm_in += r->prefix.payload_len;
  if (act != PS_ACT_HANDLE) return refuse_frame(c, h, ph, act);
  switch (h->type) {
    case PSTRAIN__MSG_TYPE__HELLO:
      ps_handle_hello(c, h->hello);
      if (c->state == CONN_WORKER) c->grow_reader = 1; /* on_read grows it, then resumes */
      return c->state == CONN_WORKER || c->state == CONN_CLOSING ? PST_READER_PAUSE : 0;
    case PSTRAIN__MSG_TYPE__PULL:
      c->pull_waiting = 1;
      c->pull_at = pst_now();
      c->pull_want = h->version;
      c->pull_final = h->last;
      c->pull_delta = h->delta;
      if (h->ring_mapped && pst_ring_ready(&c->ring) && !c->ring_replies) {
        /* The worker mapped this connection's region: the replies' payloads go there, and
         * its descriptor is no longer needed. */
        c->ring_replies = 1;
        pst_ring_mapped_by_peer(&c->ring);
      }
      if (ps_pull_ready(s, c)) ps_pull_answer(c);
      return 0;
    case PSTRAIN__MSG_TYPE__PUSH: {
      if (c->push_bad[0]) {
        /* A wrong chunk: the rest of its push goes too. */
        ps_reject(c, c->push_bad);
        c->push_bad[0] = '\0';
        c->push_dropped = c->push_skip = !h->last;
        c->push_pos = 0;
        return c->state == CONN_CLOSING ? PST_READER_PAUSE : 0;
      }
      if (c->push_dropped) {
        if (h->last) c->push_dropped = c->push_skip = 0;
        c->push_pos = h->last ? 0 : c->push_pos + 1;
        return 0;
      }
      uint32_t pos = c->push_pos;
      /* An encoded chunk landed at the start of its place (on_payload): decoded there to
       * float32 before anything looks at it, so it is validated and summed like any other. */
      if (s->opt.push_enc == PST_ENC_TOPK) {
        /* Pairs whose indices leave the chunk or do not ascend are a malformed frame. */
        uint32_t bytes = r->prefix.payload_len;
        memcpy(s->core.topk_pairs, c->push_dst, bytes);
        if (pst_topk_decode(s->core.topk_pairs, bytes, c->push_dst, (size_t)h->count) < 0) {
          snprintf(r->err, sizeof r->err, "top-k gradient chunk at offset %" PRIu64
                   " of %" PRIu64 " values: %" PRIu32 " bytes of pairs out of range or order",
                   h->offset, h->count, bytes);
          return -EPROTO;
        }
      } else if (s->opt.push_enc == PST_ENC_INT8) {
        /* The length was checked with the header (count + 4): this cannot fail. */
        uint32_t bytes = r->prefix.payload_len;
        memcpy(s->core.topk_pairs, c->push_dst, bytes);
        if (pst_int8_decode(s->core.topk_pairs, bytes, c->push_dst, (size_t)h->count) < 0) {
          snprintf(r->err, sizeof r->err, "int8 gradient chunk of %" PRIu32 " bytes", bytes);
          return -EPROTO;
        }
      } else if (s->opt.push_enc != PST_ENC_NONE) {
        pst_enc_decode_inplace(s->opt.push_enc, c->push_dst, (size_t)h->count);
      }
      if (h->last) ps_pull_wait_begins(c); /* the push is in: the worker waits from here */
      ps_tl_chunk_in(c);
      c->pending = 1;
      c->pending_chunk = c->push_chunk;
      c->pending_flags = pst_update_chunk_flags(&s->core.upd, pos); /* on_payload checked last */
      c->push_pos = h->last ? 0 : pos + 1;
      int rc = try_take(c);
      if (rc < 0) return PST_READER_PAUSE; /* already closed */
      return rc == 0 ? PST_READER_PAUSE : 0;
    }
    case PSTRAIN__MSG_TYPE__REPORT:
      ps_handle_report(c, h->report);
      ps_server_kick(s); /* an evaluation may complete an epoch, or the run */
      return 0;
    case PSTRAIN__MSG_TYPE__HEARTBEAT:
      ps_tl_clock_answer(c, h); /* a timeline's clock probe (proto/pstrain.proto) */
      return 0;
    case PSTRAIN__MSG_TYPE__BYE:
      if (h->leaving) {
        ps_worker_leaves(c);
        return PST_READER_PAUSE;
      }
      if (!s->roster.workers[c->worker].done && !ps_slot_trained(s, c->worker)) {
        /* A slot finishes when it has trained through its data (issue 43): a BYE before
         * that is a departure with the data handed out, and otherwise the loss it would be
         * without the BYE (the slot waits for a replacement, then is given up, and a job
         * whose data was not all trained does not end as finished). */
        ps_worker *w = &s->roster.workers[c->worker];
        char why[200];
        if (s->opt.data_handout) {
          LOG_WARN("worker %d '%s' said BYE before the data was all trained: it departs", c->worker,
                   w->name);
          ps_worker_leaves(c);
          return PST_READER_PAUSE;
        }
        snprintf(why, sizeof why, "BYE at step %" PRIu64 " of its shard's %" PRIu64
                 ": it has not trained through its data", ps_slot_position(s, c->worker),
                 (uint64_t)s->opt.epochs *
                     (uint64_t)pst_steps_per_epoch((int)s->facts.train_n, s->opt.workers,
                                                   s->opt.batch_size));
        ps_send_error(c, why);
        conn_close(c, why);
        return PST_READER_PAUSE;
      }
      if (ps_worker_finished(&s->roster, c->worker)) {
        LOG_INFO("worker %d '%s' finished (%d of %d); %u messages of its slot rejected; %" PRIu64
                 " gradients applied, %" PRIu64 " dropped", c->worker,
                 s->roster.workers[c->worker].name, s->roster.finished, s->opt.workers,
                 s->roster.workers[c->worker].rejected_total, s->roster.workers[c->worker].pushes,
                 s->roster.workers[c->worker].dropped);
        int published;
        pst_update_set_member(&s->core.upd, c->worker, 0, &published);
        if (published) ps_ckpt_published(s);
        ps_server_kick(s); /* ssp: a finished worker no longer holds the others back */
      }
      return 0;
    case PSTRAIN__MSG_TYPE__STATUS_REQ:
      if (ps_handle_status(c) < 0) return PST_READER_PAUSE; /* closed */
      /* The rest of what this peer sent waits for the loop's next turn. */
      ps_conn_yield(c);
      return PST_READER_PAUSE;
    case PSTRAIN__MSG_TYPE__ROLLBACK:
      ps_handle_rollback(c, h->version);
      return 0;
    default:
      snprintf(r->err, sizeof r->err, "unexpected message type %d from a worker", (int)h->type);
      return -EPROTO;
  }
}

static const pst_reader_cbs reader_cbs = {on_payload, on_frame};


/* ---- status, completion, signals ---- */

static void log_status(ps_server *s) {
  char line[1200];
  /* The same line as systemd's STATUS= (ps/obs/obs.h), then each worker. */
  size_t n = (size_t)snprintf(line, sizeof line, "status: ");
  n += ps_obs_status_line(s, line + n, sizeof line - n);
  for (int i = 0; i < s->opt.workers && n < sizeof line - 80; i++) {
    ps_worker *w = &s->roster.workers[i];
    n += (size_t)snprintf(line + n, sizeof line - n, "; w%d v%" PRIu64 " stale %" PRIu64 "%s%s", i,
                          w->last_version, w->last_staleness, w->dropped ? " dropped" : "",
                          w->done ? " done" : w->abandoned ? " abandoned" : w->lost ? " lost"
                                                     : !w->conn ? " absent" : "");
  }
  if (s->opt.mode == PST_MODE_SYNC && s->roster.started) {
    n += (size_t)snprintf(line + n, sizeof line - n, "; step %" PRIu64 " waits for",
                          s->core.store.version);
    int any = 0;
    for (int i = 0; i < s->opt.workers && n < sizeof line - 16; i++) {
      if (ps_waits_for(s, i)) {
        n += (size_t)snprintf(line + n, sizeof line - n, " w%d", i);
        any = 1;
      }
    }
    if (!any) snprintf(line + n, sizeof line - n, " nobody");
  }
  LOG_INFO("%s", line);
}

static void on_status_timer(uv_timer_t *t) { log_status(t->data); }

static void on_signal(uv_signal_t *h, int signum) {
  ps_server *s = h->data;
  if (s->life.stopping) return;
  LOG_INFO("%s received: dropping the step in flight, saving a checkpoint and stopping",
           signum == SIGINT ? "SIGINT" : "SIGTERM");
  s->life.stop_requested = 1;
  ps_server_stop(s, signum == SIGINT ? "the ps was interrupted (SIGINT)" : "the ps was stopped (SIGTERM)", 0,
                 PST_EXIT_STOPPED);
}

static void go_back(ps_server *s, const char *path, uint64_t version) {
  snprintf(s->life.rollback_path, sizeof s->life.rollback_path, "%s", path);
  s->life.rollback_version = version;
  ps_server_stop(s, "going back to an older version", 0, 0);
}

int ps_server_exit_code(const ps_server *s) {
  int code = s->life.exit_code;
  /* A final checkpoint that was not written fails the run: its newest state is nowhere on
   * disk, and a ps started again would train again from an older one. A run that failed
   * already keeps its own status. */
  if (s->obs.ckpt_failed && (code == PST_EXIT_OK || code == PST_EXIT_STOPPED))
    code = PST_EXIT_CHECKPOINT;
  if (s->obs.report_failed && code == PST_EXIT_OK) code = PST_EXIT_FAILED;
  return code;
}

/* A start that failed after the loop's handles were made closes them, so that the loop can
 * close (ps/main.c runs it once more) before ps_server_free frees the connections' part. */
static void close_handles(ps_server *s) {
  uv_close((uv_handle_t *)&s->net->listener, NULL);
  uv_close((uv_handle_t *)&s->life.sig_int, NULL);
  uv_close((uv_handle_t *)&s->life.sig_term, NULL);
  uv_close((uv_handle_t *)&s->obs.status_timer, NULL);
  uv_close((uv_handle_t *)&s->net->yield_idle, NULL);
}

int ps_server_start(ps_server *s, uv_loop_t *loop, const ps_options *opt, const pst_model *model,
                    const float *init_params, char *err, size_t errlen) {
  memset(s, 0, sizeof *s);
  s->ops = (ps_net_ops){ps_server_kick, ps_server_stop, go_back, ps_conn_drop, ps_conn_watch,
                        ps_admission_watch};
  s->events = ps_obs_event_handlers;
  s->net = calloc(1, sizeof *s->net);
  if (!s->net) {
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  s->net->frame_cbs = &reader_cbs;
  s->net->hooks = (ps_conn_hooks){ps_pull_abandon, ps_pull_job_ended};
  s->loop = loop;
  s->opt = *opt;
  s->model = model;
  s->core.sw_version = UINT64_MAX;
  if (s->opt.shard_count < 1) {
    s->opt.shard_index = 0;
    s->opt.shard_count = 1;
    s->opt.shard_offset = 0;
    s->opt.shard_floats = model->n_params;
  }
  size_t n = s->opt.shard_floats;
  int rc;
  if ((rc = pst_store_init(&s->core.store, n, init_params)) < 0 ||
      (rc = pst_opt_init(&s->core.optim, &opt->opt, n)) < 0 ||
      (rc = pst_update_init(&s->core.upd, opt->mode, opt->workers, opt->chunk_floats, &s->core.store,
                            &s->core.optim)) < 0 ||
      (rc = pst_update_set_backup(&s->core.upd, opt->backup_workers)) < 0 ||
      (rc = pst_stepwatch_init(&s->core.sw, opt->workers, opt->step_factor, PS_STEP_FLOOR,
                               opt->step_timeout)) < 0 ||
      (rc = pst_update_set_staleness_lr(&s->core.upd, opt->staleness_lr)) < 0 ||
      (rc = pst_update_set_limits(&s->core.upd,
                                  opt->grad_limit > 0 ? opt->grad_limit : PST_GRAD_LIMIT_DEFAULT,
                                  opt->clip_norm)) < 0 ||
      (rc = pst_update_set_norm_factor(&s->core.upd, opt->grad_norm_factor)) < 0) {
    snprintf(err, errlen, "cannot allocate the model's buffers (%zu parameters): %s", n,
             strerror(-rc));
    return rc;
  }
  /* The chunks follow the layers (model/model.h), within the largest chunk the workers'
   * receive buffers allow (pst_update_init's cap); without layer_chunks, pst_update_init's
   * chunks of one size stand. */
  size_t n_chunks = pst_model_chunks(model, s->opt.shard_offset, n, s->core.upd.chunk_floats, NULL);
  size_t *starts = opt->layer_chunks ? malloc((n_chunks + 1) * sizeof *starts) : NULL;
  rc = starts || !opt->layer_chunks ? 0 : -ENOMEM;
  if (starts) {
    pst_model_chunks(model, s->opt.shard_offset, n, s->core.upd.chunk_floats, starts);
    rc = pst_update_set_chunks(&s->core.upd, starts, n_chunks);
  }
  free(starts);
  if (rc < 0) {
    snprintf(err, errlen, "cannot cut the model into chunks: %s", strerror(-rc));
    return rc;
  }
  if (opt->push_enc == PST_ENC_TOPK || opt->push_enc == PST_ENC_INT8) {
    s->core.topk_pairs = malloc((size_t)s->core.upd.chunk_floats * 4 + 8);
    if (!s->core.topk_pairs) {
      snprintf(err, errlen, "cannot allocate the top-k buffer");
      return -ENOMEM;
    }
    if (opt->push_enc == PST_ENC_TOPK)
      snprintf(s->obs.push_enc_text, sizeof s->obs.push_enc_text, "topk:%g", opt->topk_fraction);
    else
      snprintf(s->obs.push_enc_text, sizeof s->obs.push_enc_text, "int8");
  } else {
    snprintf(s->obs.push_enc_text, sizeof s->obs.push_enc_text, "%s", pst_enc_name(opt->push_enc));
  }
  /* Delta pulls keep their buffers per connection (ps/net/pull.c); the 16-bit ones share these. */
  if (opt->pull_enc == PST_ENC_FP16 || opt->pull_enc == PST_ENC_BF16) {
    /* Half the weights' bytes per store buffer, and a version stamp per chunk. */
    for (int b = 0; b < 2; b++) {
      s->net->pull_enc_buf[b] = malloc((n ? n : 1) * sizeof *s->net->pull_enc_buf[b]);
      s->net->pull_enc_version[b] = malloc(s->core.upd.n_chunks * sizeof *s->net->pull_enc_version[b]);
      if (!s->net->pull_enc_buf[b] || !s->net->pull_enc_version[b]) {
        snprintf(err, errlen, "cannot allocate the encoded weights (%zu parameters)", n);
        return -ENOMEM;
      }
      for (uint32_t c = 0; c < s->core.upd.n_chunks; c++) s->net->pull_enc_version[b][c] = UINT64_MAX;
    }
  }
  /* Batchnorm's moving statistics are model state, not weights: the optimizer adds the
   * workers' pushed changes there instead of training them (ps/train/optim.h). This shard's part
   * of each range, in the shard's own coordinates. */
  _Static_assert(PST_OPT_MAX_STATE >= PST_MODEL_MAX_LAYERS, "one state range per layer");
  size_t st_off[PST_MODEL_MAX_LAYERS], st_count[PST_MODEL_MAX_LAYERS];
  int n_st = pst_model_state_ranges(model, st_off, st_count), k_st = 0;
  size_t lo = s->opt.shard_offset, hi = lo + n;
  for (int i = 0; i < n_st; i++) {
    size_t a = st_off[i] > lo ? st_off[i] : lo, b = st_off[i] + st_count[i];
    if (b > hi) b = hi;
    if (a >= b) continue;
    st_off[k_st] = a - lo;
    st_count[k_st] = b - a;
    k_st++;
  }
  if ((rc = pst_opt_set_state(&s->core.optim, st_off, st_count, k_st)) < 0) {
    snprintf(err, errlen, "cannot mark the model's state ranges: %s", strerror(-rc));
    return rc;
  }
  if (opt->threads > 1) {
    if ((rc = ps_par_create(opt->threads, &s->core.par)) < 0) {
      snprintf(err, errlen, "cannot start %d threads: %s", opt->threads, strerror(-rc));
      return rc;
    }
    pst_update_set_par(&s->core.upd, s->core.par);
  }
  s->roster.n = opt->workers;
  s->roster.workers = calloc((size_t)opt->workers, sizeof *s->roster.workers);
  if (!s->roster.workers) return -ENOMEM;
  if (opt->data_train > 0) {
    if ((int)opt->data_classes > model->classes ||
        (!opt->data_handout && /* handed-out ranges may be shorter than a batch */
         pst_steps_per_epoch((int)opt->data_train, opt->workers, opt->batch_size) < 1)) {
      snprintf(err, errlen, "--data-facts %u,%u,%u: %s", opt->data_train, opt->data_test,
               opt->data_classes,
               (int)opt->data_classes > model->classes
                   ? "more classes than the model outputs"
                   : "a worker's shard of the training set holds no full batch");
      return -EINVAL;
    }
    ps_facts_fix(&s->facts, opt->data_train, opt->data_test, opt->data_classes);
    ps_plan_lr(s);
  }
  if ((rc = ps_data_start(s, err, errlen)) < 0) return rc;
  /* A checkpoint to resume from sets the weights, the optimizer, the slots' positions and
   * the metrics so far, and makes the metrics file grow instead of starting anew. */
  if ((rc = ps_ckpt_open(s, err, errlen)) < 0) return rc;
  if (s->restored.resumed && s->roster.finished == opt->workers) {
    snprintf(err, errlen,
             "%s holds a finished job (version %" PRIu64 "): nothing left to train; to train "
             "again, remove the checkpoints or start with --resume never and another "
             "--checkpoint-dir", ps_ckpt_last_path(s), s->core.store.version);
    return -EALREADY;
  }
  if ((rc = pst_metrics_open(&s->obs.metrics, opt->metrics_path, opt->epochs, opt->workers,
                             s->restored.resumed, err, errlen)) < 0)
    return rc;
  ps_ckpt_restore_metrics(s);
  /* A resumed run's records go on in the same file: a "resumed" record says from which
   * version, so that whoever checks the records (tests/data_coverage.py) knows the ranges
   * trained at or after it were given back by the checkpoint. */
  if (opt->data_handout && s->restored.resumed)
    pst_metrics_range(&s->obs.metrics, "resumed", -1, s->core.store.version, s->plan.data.epoch, s->plan.data.next,
                      0);
  if (opt->data_handout)
    pst_metrics_data_epoch(&s->obs.metrics, s->plan.data.complete, s->core.store.version, s->plan.data.samples,
                           s->plan.data.epochs);

  struct sockaddr_storage addr;
  if (uv_ip4_addr(opt->listen_host, opt->listen_port, (struct sockaddr_in *)&addr) != 0 &&
      uv_ip6_addr(opt->listen_host, opt->listen_port, (struct sockaddr_in6 *)&addr) != 0) {
    snprintf(err, errlen, "--listen: '%s' is not an IP address", opt->listen_host);
    return -EINVAL;
  }
  uv_tcp_init(loop, &s->net->listener);
  s->net->listener.data = s;
  rc = uv_tcp_bind(&s->net->listener, (struct sockaddr *)&addr, 0);
  if (rc == 0) rc = uv_listen((uv_stream_t *)&s->net->listener, 128, ps_conn_accept);
  if (rc < 0) {
    snprintf(err, errlen, "cannot listen on %s:%d: %s", opt->listen_host, opt->listen_port,
             uv_strerror(rc));
    uv_close((uv_handle_t *)&s->net->listener, NULL);
    return rc;
  }
  uv_signal_init(loop, &s->life.sig_int);
  uv_signal_init(loop, &s->life.sig_term);
  s->life.sig_int.data = s->life.sig_term.data = s;
  uv_signal_start(&s->life.sig_int, on_signal, SIGINT);
  uv_signal_start(&s->life.sig_term, on_signal, SIGTERM);
  uv_timer_init(loop, &s->obs.status_timer);
  s->obs.status_timer.data = s;
  uv_idle_init(loop, &s->net->yield_idle);
  s->net->yield_idle.data = s;
  if (opt->status_interval > 0) {
    uint64_t ms = (uint64_t)(opt->status_interval * 1000);
    uv_timer_start(&s->obs.status_timer, on_status_timer, ms, ms);
  }
  /* Last: a pool once made must be closed through the loop (ps_server_stop). */
  if (opt->threads > 1 && opt->io_min > 0 &&
      (rc = ps_io_create(loop, opt->threads - 1, &s->net->io)) < 0) {
    snprintf(err, errlen, "cannot start %d I/O threads: %s", opt->threads - 1, strerror(-rc));
    close_handles(s);
    return rc;
  }
  if ((rc = ps_liveness_start(s)) < 0) {
    snprintf(err, errlen, "cannot start the watch timer: %s", uv_strerror(rc));
    close_handles(s);
  }
  return rc;
}


void ps_server_stop(ps_server *s, const char *reason, int failed, int exit_code) {
  if (s->life.stopping) return;
  s->life.stopping = 1;
  if (exit_code) s->life.exit_code = exit_code;
  /* Going back to an older version is not a stop: the same process starts again. */
  if (!s->life.rollback_path[0]) pst_notify_stopping();
  if (s->life.rollback_path[0])
    pst_notify_status("going back to version %" PRIu64 " (%s)", s->life.rollback_version, reason);
  else if (s->life.stop_requested)
    pst_notify_status("stopped before finishing: %s (version %" PRIu64 ")", reason,
                      s->core.store.version);
  else
    pst_notify_status("%s: %s", failed ? "aborted" : "finished", reason);
  for (ps_conn *c = s->net->conns, *next; c && s->life.rollback_path[0]; c = next) {
    /* Going back: the workers see a ps that went away and reconnect (no SHUTDOWN), and
     * nothing of this timeline is saved (no checkpoint, no summary). */
    next = c->next;
    conn_close(c, NULL);
  }
  if (!s->life.rollback_path[0]) ps_obs_stop_report(s, reason, failed);
  for (ps_conn *c = s->net->conns, *next; c; c = next) {
    next = c->next;
    if (c->state == CONN_WORKER) ps_send_shutdown(c, reason, failed, s->life.stop_requested);
    conn_close(c, NULL);
  }
  uv_close((uv_handle_t *)&s->net->listener, NULL);
  uv_close((uv_handle_t *)&s->life.sig_int, NULL);
  uv_close((uv_handle_t *)&s->life.sig_term, NULL);
  uv_close((uv_handle_t *)&s->obs.status_timer, NULL);
  uv_close((uv_handle_t *)&s->net->yield_idle, NULL);
  ps_liveness_stop(s);
  /* Closed once the last job is back: a close waiting for its write job needs its callback. */
  ps_io_close(s->net->io);
}

void ps_server_free(ps_server *s) {
  ps_ckpt_free(s);
  pst_metrics_close(&s->obs.metrics);
  pst_update_free(&s->core.upd);
  pst_handout_free(&s->plan.data);
  ps_par_free(s->core.par);
  s->core.par = NULL;
  if (s->net) ps_io_free(s->net->io);
  pst_opt_free(&s->core.optim);
  pst_store_free(&s->core.store);
  free(s->core.topk_pairs);
  s->core.topk_pairs = NULL;
  for (int b = 0; s->net && b < 2; b++) {
    free(s->net->pull_enc_buf[b]);
    free(s->net->pull_enc_version[b]);
  }
  free(s->net);
  s->net = NULL;
  free(s->roster.workers);
  s->roster.workers = NULL;
  pst_stepwatch_free(&s->core.sw);
}
