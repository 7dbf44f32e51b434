/* The pull path of the ps: answering PULLs straight from the weight store and streaming a
 * sync pull of the version being built; each reply holds its store buffer (ps/state/store.h, the
 * owner of the counts that keep every reply to one version). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/codec.h"
#include "proto/send.h"
#include "proto/wire.h"
#include "ps/net/conn.h"

/* The pull of c is about to be answered: with the data handed out, its DATA frame (its
 * range, ps/train/dataplan.c) goes first. */
static void data_before_reply(ps_conn *c) {
  if (c->pull_final) return;
  Pstrain__DataRange d = PSTRAIN__DATA_RANGE__INIT;
  if (!ps_data_range_for(c->srv, c->worker, c->pull_hold.version, &d)) return;
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  h.type = PSTRAIN__MSG_TYPE__DATA;
  h.data = &d;
  ps_send_header(c, &h);
}

/* The pull reply: the weights straight from the store, one frame per chunk (prefix +
 * header from this connection's preallocated slots, payload pointing into the store).
 * Nothing is copied and nothing allocated.
 *
 * A reply of a published version is sent from the front buffer at once and holds a
 * reference on it, so no step writes that buffer until the last chunk has left. A sync pull
 * of the version being built (version + 1) is streamed instead: each chunk is sent from the
 * back buffer as soon as it is final (pst_update_ready_chunks), overlapping the rest of the
 * step's transfer. Its hold does not stop the step it waits for (ps/state/store.h,
 * pst_store_take); publishing the step makes it a hold like any other. Every byte sent
 * belongs to one version, as final chunks are never written again. */
static void finish_pull(ps_conn *c) {
  c->pull_writing = 0;
  pst_store_release(&c->srv->core.store, &c->pull_hold);
  /* The worker has its step's weights: its step begins (ps/train/stepwatch.h). */
  if (c->state == CONN_WORKER && !c->pull_final) ps_step_begins(c->srv, c->worker);
}

static void on_pull_write(uv_write_t *req, int status) {
  ps_conn *c = req->data;
  (void)status;
  c->pull_done += c->wbatch[req - c->wreq];
  if (c->pull_done < c->srv->core.upd.n_chunks) return;
  c->srv->events.pulled(c->srv, pst_now() - c->pull_at);
  finish_pull(c);
  /* This connection may have a pull waiting behind the one just sent, and a step may be
   * waiting for the buffer. */
  c->srv->ops.kick(c->srv);
}

/* The ps's work counters: seconds summing, in optimizer passes, writing reply chunks. */
static void work_now(const ps_server *s, double w[3]) {
  w[0] = s->core.upd.sum_seconds;
  w[1] = s->core.upd.opt_seconds;
  w[2] = s->net->send_seconds;
}

void ps_pull_push_begins(ps_conn *c, uint32_t wait_us) {
  ps_server *s = c->srv;
  /* A figure of an hour or more is nobody's step: not counted. */
  if (wait_us > 0 && c->rt_ready && wait_us < 3600u * 1000000u)
    s->events.round_trip(s, wait_us * 1e-6, c->rt_queued, c->rt_work[0],
                           c->rt_work[1], c->rt_work[2]);
  c->rt_ready = 0;
  c->rt_in = 0;
  work_now(s, c->rt_w0);
}

void ps_pull_wait_begins(ps_conn *c) {
  c->rt_in = pst_now();
  work_now(c->srv, c->rt_w1);
}

/* The first chunk of a reply written since the worker's push was in whole is about to be
 * handed to the kernel (or to an I/O thread): the ps's part of the worker's wait ends (a
 * worker that sends its PULL in the middle of its push, issue 41, gets the reply's first
 * chunks before that: they are not its wait). Its work counts from the push's first chunk on: work
 * on the push's early chunks (and anything else) held its last bytes in the socket. What
 * is left of the time since the push was in whole is queued. */
static void wait_ends(ps_conn *c) {
  if (c->rt_in <= 0) return;
  double now[3];
  work_now(c->srv, now);
  double after = 0;
  for (int k = 0; k < 3; k++) {
    c->rt_work[k] = now[k] - c->rt_w0[k];
    after += now[k] - c->rt_w1[k];
  }
  c->rt_queued = pst_now() - c->rt_in - after;
  c->rt_ready = 1;
  c->rt_in = 0;
}

/* Reply chunks one write holds at most. */
#define WRITE_BATCH 32

/* Chunks this connection's reply may send now. */
static uint32_t pull_ready_chunks(ps_conn *c) {
  ps_server *s = c->srv;
  if (pst_store_hold_published(&s->core.store, &c->pull_hold)) return s->core.upd.n_chunks;
  return pst_update_ready_chunks(&s->core.upd);
}

/* --pull-compress delta: this connection's copy of the weights its worker holds, and the
 * buffer of its replies' int8 chunks, allocated with its first reply. Without them (no
 * memory) every reply is float32. */
static int delta_alloc(ps_conn *c) {
  ps_server *s = c->srv;
  uint32_t last = s->core.upd.n_chunks - 1;
  size_t n = pst_update_chunk_off(&s->core.upd, last) + pst_update_chunk_len(&s->core.upd, last);
  c->delta_ref = malloc(n * sizeof *c->delta_ref);
  c->delta_buf = malloc(n + 4 * (size_t)s->core.upd.n_chunks);
  c->delta_sent = malloc(s->core.upd.n_chunks * sizeof *c->delta_sent);
  if (c->delta_ref && c->delta_buf && c->delta_sent) return 0;
  free(c->delta_ref);
  free(c->delta_buf);
  free(c->delta_sent);
  c->delta_ref = NULL;
  c->delta_buf = NULL;
  c->delta_sent = NULL;
  return -ENOMEM;
}

/* Whether the reply about to be sent may be a delta. It is float32 when the worker did not
 * allow one (it holds no whole last reply, or will evaluate these weights), when the ps
 * holds no copy of what the worker has (the connection's first reply, or one cut short),
 * and for the final weights and a dense evaluation's: evaluations, and the checksums the
 * workers report of them, are of the ps's own weights, not of a worker's copy. */
static int delta_reply(ps_conn *c, int eval_asked) {
  if (c->srv->opt.pull_enc != PST_ENC_DELTA) return 0;
  if (!c->delta_ref && delta_alloc(c) < 0) return 0;
  return c->pull_delta && c->delta_have && !c->pull_final && !eval_asked;
}

/* Chunk i of a delta pull's reply (the weights w of the held buffer). A float32 reply's
 * chunk goes out from the store as without delta pulls, and is copied into what the ps
 * knows the worker holds; the reply's last chunk makes that copy whole. A delta reply's
 * chunk is the change from that copy to w, as an int8 chunk, added to the copy as the
 * worker adds it (pst_int8_delta gives pst_int8_add's bits, codec_test checks), so both
 * stay equal bit for bit, and what int8 rounds off is part of the next reply's change. Where
 * no more than an eighth of the chunk's values changed, the chunk is those values instead,
 * as sparse pairs (pst_sparse_delta: fewer bytes than int8's, and exact). A change too
 * large for float32 goes as float32 instead; each chunk says which it is. */
static int delta_frame(ps_conn *c, uint32_t i, const float *w, uint8_t *head, uv_buf_t bufs[2]) {
  ps_server *s = c->srv;
  uint32_t len = pst_update_chunk_len(&s->core.upd, i);
  size_t off = pst_update_chunk_off(&s->core.upd, i);
  int last = i + 1 == s->core.upd.n_chunks;
  float *ref = c->delta_ref ? c->delta_ref + off : NULL;
  uint8_t *out = c->delta_buf ? c->delta_buf + off + 4 * (size_t)i : NULL;
  /* A chunk is framed again when an I/O thread could not take the chunks framed for it
   * (ps/net/io.c while stopping): the change was already added to the copy, so its bytes are
   * sent as they were encoded. Chunks are framed in order. */
  int again = ref && i < c->delta_framed;
  if (ref && !again) {
    c->delta_framed = i + 1;
    c->delta_sent[i] = PS_DELTA_FLOAT32;
    if (!c->pull_full) {
      int pairs = pst_sparse_delta(w + off, ref, len, out);
      if (pairs >= 0) c->delta_sent[i] = pairs;
      else if (pst_int8_delta(w + off, ref, len, out) == 0) c->delta_sent[i] = PS_DELTA_INT8;
    }
    if (c->delta_sent[i] == PS_DELTA_FLOAT32) memcpy(ref, w + off, (size_t)len * sizeof *ref);
    if (last && c->pull_full) c->delta_have = 1;
  }
  if (ref && c->delta_sent[i] != PS_DELTA_FLOAT32) {
    int pairs = c->delta_sent[i];
    int hn = pst_wire_encode_delta_chunk(c->pull_hold.version, off, len, last, pairs, head,
                                         PST_WIRE_CHUNK_HEAD);
    bufs[0] = uv_buf_init((char *)head, (unsigned)hn);
    bufs[1] = uv_buf_init((char *)out, pairs >= 0 ? 8u * (unsigned)pairs : len + 4u);
    return hn;
  }
  int hn = pst_wire_encode_chunk(PSTRAIN__MSG_TYPE__WEIGHTS, c->pull_hold.version, off, len, last,
                                 head, PST_WIRE_CHUNK_HEAD);
  bufs[0] = uv_buf_init((char *)head, (unsigned)hn);
  bufs[1] = uv_buf_init((char *)(w + off), len * 4u);
  return hn;
}

/* The frame of reply chunk i: its header (encoded into this connection's slot for it) and
 * its payload in the held store buffer. Returns the header's length. */
static int chunk_frame(ps_conn *c, uint32_t i, uv_buf_t bufs[2]) {
  ps_server *s = c->srv;
  int b = c->pull_hold.buf;
  const float *w = s->core.store.buf[b];
  uint32_t len = pst_update_chunk_len(&s->core.upd, i);
  size_t off = pst_update_chunk_off(&s->core.upd, i);
  uint8_t *head = c->whead + (size_t)i * PST_WIRE_CHUNK_HEAD;
  pst_enc e = s->opt.pull_enc;
  if (e == PST_ENC_DELTA) return delta_frame(c, i, w, head, bufs);
  unsigned vb = pst_enc_bytes(e);
  int hn = pst_wire_encode_chunk_enc(PSTRAIN__MSG_TYPE__WEIGHTS, c->pull_hold.version, off, len,
                                     i + 1 == s->core.upd.n_chunks, vb, head, PST_WIRE_CHUNK_HEAD);
  bufs[0] = uv_buf_init((char *)head, (unsigned)hn);
  if (e == PST_ENC_NONE) {
    bufs[1] = uv_buf_init((char *)(w + off), len * 4u);
    return hn;
  }
  /* Encoded once per buffer, chunk and version, whichever reply sends it first (server.h). */
  uint16_t *enc = s->net->pull_enc_buf[b] + off;
  if (s->net->pull_enc_version[b][i] != c->pull_hold.version) {
    pst_enc_encode(e, w + off, NULL, enc, len);
    s->net->pull_enc_version[b][i] = c->pull_hold.version;
  }
  bufs[1] = uv_buf_init((char *)enc, len * vb);
  return hn;
}

/* Bytes per value of this reply's payloads (a delta pull's float32 replies: 4). */
static unsigned reply_value_bytes(const ps_conn *c) {
  pst_enc e = c->srv->opt.pull_enc;
  return e == PST_ENC_DELTA && c->pull_full ? 4 : pst_enc_bytes(e);
}

/* Hands the ready chunks (up to a job's worth) to an I/O thread (ps/net/io.h) when there are
 * enough bytes to pay for it, on plain TCP, and when nothing is queued in libuv before them
 * (the job's bytes must follow every byte written before). Returns 1 when it did. */
static int offload_chunks(ps_conn *c, uint32_t ready) {
  ps_server *s = c->srv;
  ps_io_job *j = &c->wjob;
  uv_os_fd_t fd;
  if (!s->net->io || c->deferred || c->ring_replies || pst_tls_stream_is_tls(&c->io) ||
      uv_stream_get_write_queue_size((uv_stream_t *)&c->io.tcp) > 0 ||
      uv_fileno((uv_handle_t *)&c->io.tcp, &fd) < 0)
    return 0;
  size_t bytes = 0;
  uint32_t k = 0;
  for (; c->pull_sent + k < ready && k < PS_IO_MAX_IOV / 2; k++)
    bytes += (size_t)pst_update_chunk_len(&s->core.upd, c->pull_sent + k) * reply_value_bytes(c);
  if (bytes < s->opt.io_min) return 0;
  size_t frames = 0;
  int iovcnt = 0;
  for (uint32_t i = 0; i < k; i++) {
    uv_buf_t bufs[2];
    frames += (size_t)chunk_frame(c, c->pull_sent + i, bufs) + bufs[1].len;
    /* An empty payload (a sparse delta chunk of no pairs) is left out: the thread's sendmsg
     * of nothing but it would return 0, which it takes for a failed socket (ps/net/io.c). */
    for (int b = 0; b < 2; b++)
      if (bufs[b].len > 0)
        j->iov[iovcnt++] = (struct iovec){.iov_base = bufs[b].base, .iov_len = bufs[b].len};
  }
  j->fd = fd;
  j->dir = PS_IO_WRITE;
  j->iovcnt = iovcnt;
  j->done = ps_pull_job_done;
  j->data = c;
  wait_ends(c); /* nothing once measured: rt_in is 0 */
  double t0 = pst_now();
  if (ps_io_submit(s->net->io, j) < 0) return 0;
  ps_tl_sent(c, c->pull_sent, k, t0, t0, "send (handed to an I/O thread)");
  s->net->bytes_out += frames;
  c->last_tx = pst_now();
  s->net->send_seconds += c->last_tx - t0;
  c->pull_sent += k;
  c->wjob_chunks = k;
  return 1;
}

void ps_pull_job_ended(ps_conn *c) {
  ps_server *s = c->srv;
  c->pull_done += c->wjob_chunks;
  c->wjob_chunks = 0;
  if (c->pull_done < s->core.upd.n_chunks) return;
  if (c->wjob.err == 0) s->events.pulled(s, pst_now() - c->pull_at);
  finish_pull(c);
  s->ops.kick(s);
}

void ps_pull_job_done(ps_io_job *j) {
  ps_conn *c = j->data;
  if (j->err < 0) {
    /* The socket failed under the I/O thread: what is left of the reply cannot follow. */
    char why[96];
    snprintf(why, sizeof why, "cannot send the weights: %s", uv_strerror(j->err));
    ps_pull_job_ended(c);
    if (c->state == CONN_CLOSING) ps_conn_finish_close(c, 1);
    else ps_conn_close(c, why, 1);
    return;
  }
  /* What was written while the job was out follows it, before any more of the reply. */
  ps_send_deferred(c);
  ps_pull_job_ended(c);
  if (c->close_deferred) ps_conn_finish_close(c, 0);
  else if (c->state == CONN_WORKER && c->pull_writing) ps_pull_continue(c);
}

/* Writes the reply's chunks that are ready and not yet sent. */
void ps_pull_continue(ps_conn *c) {
  ps_server *s = c->srv;
  /* A write job out sends its chunks first; its end continues from there. */
  if (ps_io_busy(&c->wjob)) return;
  uint32_t ready = pull_ready_chunks(c);
  if (c->state != CONN_CLOSING && c->pull_sent < ready && offload_chunks(c, ready)) return;
  /* The ready chunks in writes of up to WRITE_BATCH chunks each: one system call for the
   * lot instead of one per chunk (a model's small layers travel in chunks of their own). */
  while (c->pull_sent < ready && c->state != CONN_CLOSING) {
    uint32_t first = c->pull_sent, k = 0;
    uv_buf_t bufs[2 * WRITE_BATCH];
    size_t bytes = 0;
    for (; k < WRITE_BATCH && first + k < ready; k++) {
      chunk_frame(c, first + k, bufs + 2 * k);
      /* A worker on this host reads the payload from this connection's region (proto/ring.h):
       * only the frame's head goes on the stream. */
      if (c->ring_replies) s->net->shm_out += pst_send_ring_chunk(&c->ring, bufs + 2 * k);
      bytes += (size_t)bufs[2 * k].len + bufs[2 * k + 1].len;
    }
    c->wreq[first].data = c;
    c->wbatch[first] = k;
    c->pull_sent += k;
    s->net->bytes_out += bytes;
    wait_ends(c);
    double t0 = pst_now();
    if (pst_tls_stream_write(&c->io, &c->wreq[first], bufs, pst_send_compact(bufs, 2 * k),
                             on_pull_write) < 0) {
      /* The connection is failing: these chunks and the rest never started. */
      c->pull_sent = first;
      ps_pull_abandon(c);
      if (!c->pull_writing) s->ops.kick(s);
      return;
    }
    double t1 = pst_now();
    s->net->send_seconds += t1 - t0;
    /* On the timeline: the write's call; bytes libuv could not hand to the kernel at once
     * leave later (the socket was full), which the span's name says. */
    ps_tl_sent(c, first, k, t0, t1,
               uv_stream_get_write_queue_size((uv_stream_t *)&c->io.tcp) == 0 || pst_tls_stream_is_tls(&c->io)
                   ? "send" : "send (socket full: partly queued)");
  }
}

/* Dense evaluation (issue 16, --eval-every E): point p is due once the ps reaches version
 * p x T, T being E steps' worth of versions (sync: E; async and ssp: E x workers, as many
 * samples). Each worker is asked for its share of point p by an EVAL frame just before the
 * first reply at or past that version, so the point is taken when the ps gets there, not
 * when the slowest worker does; one point per reply, so a worker behind catches up one per
 * step. The replies after the last push (the final weights) ask for nothing: the full test
 * set is evaluated on them. Shard 0 asks; every shard hears the reports, and keeps the
 * same count, so that each knows which of its replies are evaluated (delta pulls send
 * those in float32; in sync every shard is at one version, so they agree). Returns 1 when
 * this reply is one. */
static int ask_eval(ps_conn *c) {
  ps_server *s = c->srv;
  uint32_t p = ps_eval_point_due(s, c->worker, c->pull_hold.version);
  if (p == 0) return 0;
  if (s->opt.shard_index != 0) return 1;
  s->events.subset_asked(s, p);
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  h.type = PSTRAIN__MSG_TYPE__EVAL;
  h.eval_point = p;
  ps_send_header(c, &h);
  return 1;
}

void ps_pull_answer(ps_conn *c) {
  ps_server *s = c->srv;
  pst_store *st = &s->core.store;
  c->pull_waiting = 0;
  c->pull_writing = 1;
  c->pull_sent = c->pull_done = 0;
  c->pull_hold = pst_store_take(st, s->opt.mode == PST_MODE_SYNC && !c->pull_final &&
                                        c->pull_want == st->version + 1);
  int asked = 0;
  if (s->opt.eval_every > 0 && !c->pull_final && c->worker >= 0) asked = ask_eval(c);
  data_before_reply(c);
  c->pull_full = !delta_reply(c, asked);
  c->delta_framed = 0;
  if (c->pull_full) c->delta_have = 0; /* whole again once this reply's last chunk is framed */
  ps_pull_continue(c);
}

/* Whether a pull may be answered now. sync: the wanted version exists, or is the one being
 * built (its reply is streamed as its chunks become final). ssp: additionally
 * the puller may not get more than `staleness` versions ahead of the slowest worker's
 * last pushed version. async: always. */
int ps_pull_ready(ps_server *s, ps_conn *c) {
  if (c->pull_writing) return 0;
  /* The final weights: once no slot will push again (finished, or given up). */
  if (c->pull_final) return ps_no_more_pushes(s);
  /* The data handout: no step before MIN workers are there (ps/train/liveness.c). */
  if (s->opt.data_handout && !s->roster.started) return 0;
  if (s->opt.mode == PST_MODE_SYNC) return c->pull_want <= s->core.store.version + 1;
  /* async, ssp with the data handed out: a pull waits while every range is out (the epoch's
   * last ones, with others): answered, its worker would push a gradient of no samples, which
   * an optimizer with momentum still turns into a step, and pull again at once. It is
   * answered when a range comes back (ps_server_kick) or the last is trained (done). */
  if (s->opt.data_handout && !pst_handout_available(&s->plan.data) && !ps_data_finished(s)) return 0;
  if (s->opt.mode == PST_MODE_SSP) {
    /* A worker's clock is the number of pushes it has made; it may run at most `staleness`
     * pushes ahead of the slowest unfinished worker. */
    uint64_t mine = ps_ssp_clock(&s->roster.workers[c->worker]), slowest = UINT64_MAX;
    for (int i = 0; i < s->opt.workers; i++)
      if (!s->roster.workers[i].done && s->roster.workers[i].conn && ps_ssp_clock(&s->roster.workers[i]) < slowest)
        slowest = ps_ssp_clock(&s->roster.workers[i]);
    if (!s->roster.started) slowest = 0;
    if (slowest != UINT64_MAX && mine > slowest + (uint64_t)s->opt.staleness) return 0;
    /* The ps's own record of how far ahead anyone was allowed to get. */
    uint64_t lead = slowest == UINT64_MAX || mine < slowest ? 0 : mine - slowest;
    if (lead > s->core.max_lead) s->core.max_lead = lead;
    return 1;
  }
  return 1;
}

void ps_pull_abandon(ps_conn *c) {
  uint32_t n = c->srv->core.upd.n_chunks;
  if (!c->pull_writing || c->pull_sent >= n) return;
  c->delta_have = 0; /* the worker holds part of this reply */
  /* A streamed reply cut short: the chunks never sent count as done. */
  c->pull_done += n - c->pull_sent;
  c->pull_sent = n;
  if (c->pull_done == n) finish_pull(c);
}
