/* The pull path of the ps: answering PULLs straight from the weight store and streaming a
 * sync pull of the version being built; each reply holds its store buffer (ps/store.h, the
 * owner of the counts that keep every reply to one version). */
#include <stdint.h>

#include "proto/wire.h"
#include "ps/conn.h"

/* The pull reply: the weights straight from the store, one frame per chunk (prefix +
 * header from this connection's preallocated slots, payload pointing into the store).
 * Nothing is copied and nothing allocated.
 *
 * A reply of a published version is sent from the front buffer at once and holds a
 * reference on it, so no step writes that buffer until the last chunk has left. A sync pull
 * of the version being built (version + 1) is streamed instead: each chunk is sent from the
 * back buffer as soon as it is final (pst_update_ready_chunks), overlapping the rest of the
 * step's transfer. Its hold does not stop the step it waits for (ps/store.h,
 * pst_store_take); publishing the step makes it a hold like any other. Every byte sent
 * belongs to one version, as final chunks are never written again. */
static void finish_pull(ps_conn *c) {
  c->pull_writing = 0;
  pst_store_release(&c->srv->store, &c->pull_hold);
}

static void on_pull_write(uv_write_t *req, int status) {
  ps_conn *c = req->data;
  (void)status;
  c->pull_done++;
  if (c->pull_done < c->srv->upd.n_chunks) return;
  pst_metrics_pulled(&c->srv->metrics, pst_now() - c->pull_at);
  finish_pull(c);
  /* This connection may have a pull waiting behind the one just sent, and a step may be
   * waiting for the buffer. */
  ps_server_kick(c->srv);
}

/* Chunks this connection's reply may send now. */
static uint32_t pull_ready_chunks(ps_conn *c) {
  ps_server *s = c->srv;
  if (pst_store_hold_published(&s->store, &c->pull_hold)) return s->upd.n_chunks;
  return pst_update_ready_chunks(&s->upd);
}

/* Writes the reply's chunks that are ready and not yet sent. */
void ps_pull_continue(ps_conn *c) {
  ps_server *s = c->srv;
  uint32_t n = s->upd.n_chunks, ready = pull_ready_chunks(c);
  const float *w = s->store.buf[c->pull_hold.buf];
  while (c->pull_sent < ready && c->state != CONN_CLOSING) {
    uint32_t i = c->pull_sent++;
    uint32_t len = pst_update_chunk_len(&s->upd, i);
    size_t off = (size_t)i * s->upd.chunk_floats;
    uint8_t *head = c->whead + (size_t)i * PST_WIRE_CHUNK_HEAD;
    int hn = pst_wire_encode_chunk(PSTRAIN__MSG_TYPE__WEIGHTS, c->pull_hold.version, off, len,
                                   i + 1 == n, head, PST_WIRE_CHUNK_HEAD);
    uv_buf_t bufs[2] = {uv_buf_init((char *)head, (unsigned)hn),
                        uv_buf_init((char *)(w + off), len * 4u)};
    c->wreq[i].data = c;
    s->metrics.bytes_out += (uint64_t)hn + len * 4u;
    if (pst_tls_stream_write(&c->io, &c->wreq[i], bufs, 2, on_pull_write) < 0) {
      /* The connection is failing: chunk i and the rest never started. */
      c->pull_sent = i;
      ps_pull_abandon(c);
      if (!c->pull_writing) ps_server_kick(s);
      return;
    }
  }
}

/* Dense evaluation (issue 16, --eval-every E): point p is due once the ps reaches version
 * p x T, T being E steps' worth of versions (sync: E; async and ssp: E x workers, as many
 * samples). Each worker is asked for its share of point p by an EVAL frame just before the
 * first reply at or past that version, so the point is taken when the ps gets there, not
 * when the slowest worker does; one point per reply, so a worker behind catches up one per
 * step. The replies after the last push (the final weights) ask for nothing: the full test
 * set is evaluated on them. Shard 0 asks; every shard hears the reports. */
static void ask_eval(ps_conn *c) {
  ps_server *s = c->srv;
  ps_worker *w = &s->workers[c->worker];
  uint64_t per = (uint64_t)s->opt.eval_every *
                 (uint64_t)(s->opt.mode == PST_MODE_SYNC ? 1 : s->opt.workers);
  uint32_t p = w->subset_asked + 1;
  if (c->pull_hold.version < (uint64_t)p * per) return;
  w->subset_asked = p;
  pst_metrics_subset_asked(&s->metrics, p);
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  h.type = PSTRAIN__MSG_TYPE__EVAL;
  h.eval_point = p;
  ps_send_header(c, &h);
}

void ps_pull_answer(ps_conn *c) {
  ps_server *s = c->srv;
  pst_store *st = &s->store;
  c->pull_waiting = 0;
  c->pull_writing = 1;
  c->pull_sent = c->pull_done = 0;
  c->pull_hold = pst_store_take(st, s->opt.mode == PST_MODE_SYNC && !c->pull_final &&
                                        c->pull_want == st->version + 1);
  if (s->opt.eval_every > 0 && s->opt.shard_index == 0 && !c->pull_final && c->worker >= 0)
    ask_eval(c);
  ps_pull_continue(c);
}

/* Whether a pull may be answered now. sync: the wanted version exists, or is the one being
 * built (its reply is streamed as its chunks become final). ssp: additionally
 * the puller may not get more than `staleness` versions ahead of the slowest worker's
 * last pushed version. async: always. */
int ps_pull_ready(ps_server *s, ps_conn *c) {
  if (c->pull_writing) return 0;
  /* The final weights: once no slot will push again (finished, or given up). */
  if (c->pull_final) return s->finished + s->abandoned == s->opt.workers;
  if (s->opt.mode == PST_MODE_SYNC) return c->pull_want <= s->store.version + 1;
  if (s->opt.mode == PST_MODE_SSP) {
    /* A worker's clock is the number of pushes it has made; it may run at most `staleness`
     * pushes ahead of the slowest unfinished worker. */
    uint64_t mine = s->workers[c->worker].pushes, slowest = UINT64_MAX;
    for (int i = 0; i < s->opt.workers; i++)
      if (!s->workers[i].done && s->workers[i].conn && s->workers[i].pushes < slowest)
        slowest = s->workers[i].pushes;
    if (!s->started) slowest = 0;
    if (slowest != UINT64_MAX && mine > slowest + (uint64_t)s->opt.staleness) return 0;
    /* The ps's own record of how far ahead anyone was allowed to get. */
    uint64_t lead = slowest == UINT64_MAX || mine < slowest ? 0 : mine - slowest;
    if (lead > s->max_lead) s->max_lead = lead;
    return 1;
  }
  return 1;
}

void ps_pull_abandon(ps_conn *c) {
  uint32_t n = c->srv->upd.n_chunks;
  if (!c->pull_writing || c->pull_sent >= n) return;
  /* A streamed reply cut short: the chunks never sent count as done. */
  c->pull_done += n - c->pull_sent;
  c->pull_sent = n;
  if (c->pull_done == n) finish_pull(c);
}
