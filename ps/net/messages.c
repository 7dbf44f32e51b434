/* The control messages a peer sends besides its tensors (HELLO, REPORT, ROLLBACK,
 * STATUS_REQ, BYE leaving). ps/server.c reads the frames and calls in here; the push and
 * pull paths stay there and in ps/net/pull.c, and sending is ps/net/send.c's. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/shard.h"
#include "ps/state/checkpoint.h"
#include "proto/send.h"
#include "proto/wire.h"
#include "ps/net/conn.h"
#include "ps/obs/obs.h"
#include "ps/ps.h"

/* --topk-warmup's epochs as versions, which is what the workers count by: an epoch is
 * steps_per_epoch versions in sync, and a version per gradient, that many times the workers,
 * in async and ssp. The data facts are known by the time a WELCOME goes out. */
static uint64_t topk_warmup_versions(const ps_server *s) {
  if (s->opt.push_enc != PST_ENC_TOPK || !(s->opt.topk_warmup > 0) || !s->facts.data_known) return 0;
  double spe = pst_steps_per_epoch((int)s->facts.train_n, s->opt.workers, s->opt.batch_size);
  if (s->opt.mode != PST_MODE_SYNC) spe *= s->opt.workers;
  return (uint64_t)(s->opt.topk_warmup * spe + 0.5);
}

/* A worker on this host offered its region (Hello.ring, proto/ring.h): mapped, with one of
 * this connection's own for the replies (*offer, for the WELCOME), its payloads come through
 * them. Returns 1 then, else 0 (TLS, --shm false, or a worker elsewhere: TCP). A reply's
 * largest payload is the shard's floats, and two of them leave room for the next; at most
 * PS_RING_BYTES, as the pages written stay the connection's: a larger reply sends what finds
 * no room over TCP (proto/ring.h). */
#define PS_RING_BYTES (64ull * 1024 * 1024)
static int take_ring(ps_conn *c, const Pstrain__RingOffer *o, Pstrain__RingOffer *offer) {
  ps_server *s = c->srv;
  if (!o || !s->opt.shm || pst_tls_stream_is_tls(&c->io)) return 0;
  uint64_t ring_bytes = 2 * (uint64_t)s->core.store.n * sizeof(float);
  if (ring_bytes > PS_RING_BYTES) ring_bytes = PS_RING_BYTES;
  char err[200];
  if (pst_wire_ring_attach(&c->ring, o, err, sizeof err) < 0 ||
      pst_ring_create(&c->ring, ring_bytes, err, sizeof err) < 0) {
    /* A worker on another host is the common case, not worth a line at info. */
    LOG_DEBUG("worker from %s: payloads over TCP (shared memory: %s)", c->peer, err);
    pst_ring_free(&c->ring);
    return 0;
  }
  pst_reader_set_ring(&c->rd, &c->ring);
  pst_wire_ring_offer(&c->ring, offer);
  return 1;
}

void ps_handle_hello(ps_conn *c, const Pstrain__Hello *hello) {
  ps_server *s = c->srv;
  char why[256];
  if (hello->model_fingerprint != 0 && hello->model_fingerprint != s->model->fingerprint) {
    snprintf(why, sizeof why,
             "model fingerprint mismatch: worker has %016" PRIx64 ", ps trains %016" PRIx64
             " (start the worker without --model, or with the ps's model)",
             hello->model_fingerprint, s->model->fingerprint);
    LOG_WARN("refused worker '%.60s' from %s: %s", hello->worker_name, c->peer, why);
    ps_send_error(c, why);
    ps_conn_close(c, NULL, 0);
    return;
  }
  if (s->opt.data_handout && !hello->takes_ranges) {
    snprintf(why, sizeof why, "this ps hands out the data (--data-order ps) and this worker "
                              "trains a fixed shard: it is older than the ps; upgrade it");
    LOG_WARN("refused worker '%.60s' from %s: %s", hello->worker_name, c->peer, why);
    ps_send_error(c, why);
    ps_conn_close(c, NULL, 0);
    return;
  }
  if (ps_check_hello(s, hello, why, sizeof why) < 0) {
    LOG_WARN("refused worker '%.60s' from %s: %s", hello->worker_name, c->peer, why);
    ps_send_error(c, why);
    ps_conn_close(c, NULL, 0);
    return;
  }
  int idx = ps_slot_free(&s->roster, hello->requested_index);
  if (idx < 0) {
    snprintf(why, sizeof why, "no free worker slot%s (the ps trains with %d workers)",
             hello->requested_index >= 0 ? " at the requested index" : "", s->opt.workers);
    LOG_WARN("refused worker '%.60s' from %s: %s", hello->worker_name, c->peer, why);
    ps_send_error(c, why);
    ps_conn_close(c, NULL, 0);
    return;
  }
  /* Every buffer this worker's traffic needs is allocated here, once. */
  uint32_t n = s->core.upd.n_chunks;
  c->recv = aligned_alloc(64, ((size_t)s->core.upd.chunk_floats * 4 + 63) & ~(size_t)63);
  c->wreq = calloc(n, sizeof *c->wreq);
  c->wbatch = calloc(n, sizeof *c->wbatch);
  c->whead = malloc((size_t)n * PST_WIRE_CHUNK_HEAD);
  if (!c->recv || !c->wreq || !c->wbatch || !c->whead) {
    ps_send_error(c, "ps out of memory");
    ps_conn_close(c, "out of memory registering a worker", 0);
    return;
  }
  ps_slot_take(s, idx, c, hello->worker_name, hello->dropped_gradients);
  c->worker = idx;
  c->state = CONN_WORKER;
  const ps_worker *w = &s->roster.workers[idx];

  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  Pstrain__Welcome wl = PSTRAIN__WELCOME__INIT;
  wl.worker_index = (uint32_t)idx;
  wl.world_size = (uint32_t)s->opt.workers;
  wl.mode = (Pstrain__Mode)s->opt.mode;
  /* The canonical text must fit the header with the other fields, whatever the spec. */
  _Static_assert(PST_MODEL_MAX_TEXT <= PST_WIRE_MAX_HEADER / 2,
                 "the model's canonical text must fit a WELCOME header");
  wl.model_spec = (char *)s->model->text;
  wl.model_fingerprint = s->model->fingerprint;
  wl.n_params = s->model->n_params;
  wl.epochs = (uint32_t)s->opt.epochs;
  wl.batch_size = (uint32_t)s->opt.batch_size;
  wl.seed = s->opt.seed;
  wl.chunk_floats = s->core.upd.chunk_floats;
  wl.layer_chunks = s->opt.layer_chunks != 0;
  wl.push_runs = 1; /* ps/net/push_order.h, and a PULL in a push's middle (ps/net/rules.c) */
  wl.data_ranges = s->opt.data_handout != 0;
  wl.staleness = (uint32_t)s->opt.staleness;
  wl.report_every = (uint32_t)s->opt.report_every;
  wl.eval_every = (uint32_t)s->opt.eval_every;
  wl.eval_samples = (uint32_t)s->opt.eval_samples;
  wl.clip_norm = s->opt.clip_norm;
  wl.push_encoding = (uint32_t)s->opt.push_enc;
  wl.pull_encoding = (uint32_t)s->opt.pull_enc;
  wl.topk_fraction = s->opt.push_enc == PST_ENC_TOPK ? s->opt.topk_fraction : 0;
  wl.topk_warmup = topk_warmup_versions(s);
  wl.topk_momentum = s->opt.topk_momentum;
  wl.eval_on_ps = s->opt.evaluator != NULL;
  wl.start_step = ps_slot_position(s, idx);
  wl.eval_epoch = w->evals_done;
  wl.timeout_ms = (uint32_t)(s->opt.worker_timeout * 1000.0);
  wl.shard_index = (uint32_t)s->opt.shard_index;
  wl.shard_count = (uint32_t)s->opt.shard_count;
  wl.shard_offset = s->opt.shard_offset;
  wl.shard_floats = s->opt.shard_floats;
  Pstrain__RingOffer ring = PSTRAIN__RING_OFFER__INIT;
  if (take_ring(c, hello->ring, &ring)) {
    wl.ring_taken = 1;
    wl.ring = &ring;
  }
  h.type = PSTRAIN__MSG_TYPE__WELCOME;
  h.welcome = &wl;
  /* Just before it leaves: any moment between the HELLO's arrival and the WELCOME's
   * departure lies inside the worker's bracket (proto/pstrain.proto). */
  wl.clock_seconds = pst_now();
  ps_send_header(c, &h);
  ps_worker_joined(s, idx, c->peer, c->session);
}

void ps_handle_report(ps_conn *c, const Pstrain__Report *r) {
  char why[200];
  if (ps_worker_reported(c->srv, c->worker, r, why, sizeof why) < 0) ps_reject(c, why);
}

/* A worker found another shard resumed from an older checkpoint (sync): this shard goes
 * back to its own checkpoint of that version, so that every part of the weights is of one
 * version again. The running state (sums in flight, pulls, positions, figures) is not
 * rewound in place: the ps stops without telling the workers anything (they reconnect, as
 * to a ps that restarted) and ps/main.c starts it again from that file. A shard without
 * that checkpoint refuses, and the worker then stops with the reason. */
void ps_handle_rollback(ps_conn *c, uint64_t version) {
  ps_server *s = c->srv;
  char path[1024], err[512];
  pst_ckpt ck;
  if (s->life.stopping) return;
  if (s->opt.mode != PST_MODE_SYNC || s->opt.shard_count < 2 || version >= s->core.store.version ||
      !s->opt.checkpoint_dir || !s->opt.checkpoint_dir[0] ||
      pst_ckpt_path(s->opt.checkpoint_dir, version, path, sizeof path) < 0 ||
      pst_ckpt_load(path, &ck, err, sizeof err) < 0) {
    snprintf(err, sizeof err, "cannot go back to version %" PRIu64 " (this shard stands at %" PRIu64
             "%s)", version, s->core.store.version,
             s->opt.mode != PST_MODE_SYNC || s->opt.shard_count < 2 ? ", and only sync shards do"
                                                                    : " and has no checkpoint of it");
    ps_reject(c, err);
    return;
  }
  pst_ckpt_free(&ck);
  LOG_WARN("worker %d '%s': another shard resumed from version %" PRIu64 ", this shard stands "
           "at %" PRIu64 ": going back to %s", c->worker, s->roster.workers[c->worker].name, version,
           s->core.store.version, path);
  s->ops.go_back(s, path, version);
}

/* STATUS_REQs a connection may send: a burst of PS_STATUS_BURST, then PS_STATUS_RATE a
 * second (`pstrain status --watch 0.2` stays within it). Past that they are dropped, and a
 * connection that goes on sending them (PS_STATUS_MAX_DROPPED since its last answer) is
 * closed: each answer costs the loop a STATUS built from the ps's figures. */
#define PS_STATUS_BURST 10.0
#define PS_STATUS_RATE 5.0
#define PS_STATUS_MAX_DROPPED 20

int ps_handle_status(ps_conn *c) {
  ps_server *s = c->srv;
  double now = pst_now();
  if (c->status_at == 0) c->status_tokens = PS_STATUS_BURST;
  else c->status_tokens += (now - c->status_at) * PS_STATUS_RATE;
  if (c->status_tokens > PS_STATUS_BURST) c->status_tokens = PS_STATUS_BURST;
  c->status_at = now;
  if (c->status_tokens < 1.0) {
    s->net->status_dropped++;
    if (++c->status_dropped > PS_STATUS_MAX_DROPPED) {
      ps_log_conn(s->net, "closing connection from %s: more than %d STATUS_REQ a second", c->peer,
                  (int)PS_STATUS_RATE);
      ps_conn_close(c, NULL, 1);
      return -EPROTO;
    }
    return 0;
  }
  c->status_tokens -= 1.0;
  c->status_dropped = 0;
  /* Built by ps/obs/obs.c, which /metrics, the dashboard and `pstrain status` share. */
  static ps_status_msg m;
  ps_obs_status(s, &m);
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  h.type = PSTRAIN__MSG_TYPE__STATUS;
  h.status = &m.st;
  ps_send_header(c, &h);
  return 0;
}

void ps_worker_leaves(ps_conn *c) {
  ps_server *s = c->srv;
  if (!s->opt.data_handout) {
    ps_reject(c, "a worker of a fixed shard cannot leave the job (BYE leaving without "
                 "--data-order ps)");
    return;
  }
  if (!ps_worker_leaving(&s->roster, c->worker)) return;
  c->pull_waiting = 0;
  ps_send_shutdown(c, "goodbye: the range you held is back in the pool", 0, 0);
  ps_conn_close(c, NULL, 0);
}
