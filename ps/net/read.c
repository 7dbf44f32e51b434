/* A connection's reading: accepted (and admitted by ps/net/admission.c), read by libuv or a
 * payload's rest by an I/O thread (ps/net/io.h), paused for the loop's next turn. The frames
 * it reads go to the reader's callbacks, ps/server.c's push path (ps_server.frame_cbs). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/cluster.h"
#include "common/log.h"
#include "proto/wire.h"
#include "ps/net/conn.h"

/* A graceful close: after the queued writes (an ERROR or SHUTDOWN) have gone out. */
static void conn_close(ps_conn *c, const char *why) { ps_conn_close(c, why, 0); }

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  ps_conn *c = h->data;
  (void)suggested;
  char *base;
  size_t len;
  if (c->state == CONN_AUTH)
    ps_auth_buffer(c, &base, &len);
  else
    pst_reader_buffer(&c->rd, &base, &len);
  *buf = uv_buf_init(base, (unsigned)len);
}

/* A worker registered: its reader gets the full buffers between frames (the HELLO paused
 * it), then goes on with what it has staged. */
static int grow_reader(ps_conn *c) {
  c->grow_reader = 0;
  int rc = pst_reader_grow(&c->rd, PST_WIRE_MAX_PAYLOAD, PST_WIRE_MAX_HEADER, PST_WIRE_ARENA,
                           PST_WIRE_STAGE);
  if (rc < 0) {
    snprintf(c->rd.err, sizeof c->rd.err, "out of memory for the reader");
    return rc;
  }
  /* From now on its PUSH payloads carry the job's push encoding (WELCOME said so). */
  pst_reader_set_value_bytes(&c->rd, pst_enc_bytes(c->srv->opt.push_enc));
  return pst_reader_resume(&c->rd);
}

static void on_read_job(ps_io_job *j);

/* Hands the rest of a gradient payload to an I/O thread (ps/net/io.h) when it is big enough to
 * pay for the hand-over: libuv stops reading this socket until the job's end feeds the
 * reader. Plain TCP only, and only when the payload goes straight into place (nothing of it
 * staged). Returns 1 when it did. */
static int offload_read(ps_conn *c) {
  ps_server *s = c->srv;
  uv_os_fd_t fd;
  char *base;
  size_t len;
  if (!s->net->io || c->state != CONN_WORKER || c->rd.state != PST_RD_PAYLOAD ||
      c->rd.prefix.payload_len - c->rd.got < s->opt.io_min || pst_tls_stream_is_tls(&c->io) ||
      uv_fileno((uv_handle_t *)&c->io.tcp, &fd) < 0 ||
      !pst_reader_payload_rest(&c->rd, &base, &len))
    return 0;
  ps_io_job *j = &c->rjob;
  j->fd = fd;
  j->dir = PS_IO_READ;
  j->iov[0] = (struct iovec){.iov_base = base, .iov_len = len};
  j->iovcnt = 1;
  j->done = on_read_job;
  j->data = c;
  if (c->reading) pst_tls_stream_read_stop(&c->io);
  c->reading = 0;
  c->rjob_seen = 0;
  if (ps_io_submit(s->net->io, j) == 0) return 1;
  ps_conn_start_reading(c);
  return 0;
}

/* After the reader consumed what arrived: pause, fail, or go on (a big payload's rest on an
 * I/O thread). Returns 0 when libuv should go on reading. */
static int after_feed(ps_conn *c, int rc) {
  if (c->state == CONN_CLOSING) return 1;
  if (rc == PST_READER_PAUSE && c->grow_reader) rc = grow_reader(c);
  if (c->state == CONN_CLOSING) return 1;
  if (rc == PST_READER_PAUSE) {
    /* Through the stream: with TLS, decrypted bytes may be waiting, which it holds. */
    pst_tls_stream_read_stop(&c->io);
    c->reading = 0;
    return 1;
  }
  if (rc < 0) {
    /* A worker with a cluster secret starts with the handshake's hello, which this ps (it
     * has none, or it would have read it as one) takes for a bad frame: tell it why. */
    if (c->state == CONN_OPEN && !memcmp(c->rd.sample, PST_AUTH_MAGIC, 4))
      ps_send_error(c, "this ps runs without a cluster secret");
    if (c->state == CONN_WORKER)
      LOG_WARN("closing connection from %s: %s%s%s%s", c->peer, c->rd.err,
               c->rd.sample[0] ? " (first bytes: \"" : "", c->rd.sample,
               c->rd.sample[0] ? "\")" : "");
    else
      ps_log_conn(c->srv->net, "closing connection from %s: %s%s%s%s", c->peer, c->rd.err,
                  c->rd.sample[0] ? " (first bytes: \"" : "", c->rd.sample,
                  c->rd.sample[0] ? "\")" : "");
    conn_close(c, c->state == CONN_WORKER ? c->rd.err : NULL);
    return 1;
  }
  return offload_read(c);
}

/* An I/O thread read the rest of a payload (a close takes a job back instead: this runs
 * only for an open connection). */
static void on_read_job(ps_io_job *j) {
  ps_conn *c = j->data;
  if (j->moved > 0) {
    c->last_rx = pst_now();
    c->srv->net->bytes_in += j->moved;
  }
  if (j->err < 0) {
    conn_close(c, j->err == UV_EOF ? "peer closed mid-frame" : uv_strerror(j->err));
    return;
  }
  if (after_feed(c, pst_reader_feed(&c->rd, j->moved)) == 0) ps_conn_start_reading(c);
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
  ps_conn *c = stream->data;
  (void)buf;
  if (nread == 0) return;
  c->last_rx = pst_now();
  if (nread < 0) {
    /* With TLS the reason names what failed ("TLS handshake failed: the peer's certificate is
     * not signed by our CA (...)"); a peer that connects and leaves is still a plain EOF. */
    if (pst_tls_stream_failure(&c->io) == PST_TLS_FAIL_PLAINTEXT) ps_refuse_plaintext(c);
    int mid = c->state == CONN_AUTH ? c->hs_got > 0
                                    : !(c->rd.state == PST_RD_PREFIX && c->rd.got == 0);
    conn_close(c, nread == UV_EOF ? (mid ? "peer closed mid-frame" : NULL)
                                  : pst_tls_stream_strerror(&c->io, (int)nread));
    return;
  }
  c->srv->net->bytes_in += (uint64_t)nread;
  if (c->state == CONN_AUTH) {
    ps_auth_read(c, (size_t)nread);
    return;
  }
  after_feed(c, pst_reader_feed(&c->rd, (size_t)nread));
}

/* The loop's next turn after one or more connections yielded (ps_conn_yield): each reads
 * on from where it paused, what its reader holds first. */
static void on_yield_turn(uv_idle_t *h) {
  ps_server *s = h->data;
  uv_idle_stop(h);
  for (ps_conn *c = s->net->conns; c; c = c->next) {
    if (!c->yielded) continue;
    c->yielded = 0;
    if (c->state == CONN_CLOSING || s->life.stopping) continue;
    if (after_feed(c, pst_reader_resume(&c->rd)) == 0) ps_conn_start_reading(c);
  }
}

void ps_conn_yield(ps_conn *c) {
  ps_server *s = c->srv;
  c->yielded = 1;
  if (!uv_is_active((uv_handle_t *)&s->net->yield_idle)) uv_idle_start(&s->net->yield_idle, on_yield_turn);
}

void ps_conn_start_reading(ps_conn *c) {
  if (c->state == CONN_CLOSING || c->reading || ps_io_busy(&c->rjob)) return;
  if (pst_tls_stream_read_start(&c->io, on_alloc, on_read) == 0) c->reading = 1;
}

/* The TLS handshake finished: what the session is, for the worker's registration line. A
 * failed one needs nothing here: its reason comes to on_read as a read error. */
static void on_handshake(pst_tls_stream *io, int status) {
  ps_conn *c = io->tcp.data;
  if (status == 0) pst_tls_stream_describe(io, c->session, sizeof c->session);
}

void ps_conn_accept(uv_stream_t *server, int status) {
  ps_server *s = server->data;
  if (status < 0) {
    /* Out of descriptors, typically: libuv accepted and closed the connection (its spare
     * descriptor), and the peer retries. Rate-limited: a flood would fill the log. */
    ps_log_conn(s->net, "accept failed: %s (%d connections open, --max-connections %d)",
                uv_strerror(status), s->net->n_conns, s->opt.max_connections);
    return;
  }
  ps_conn *c = calloc(1, sizeof *c);
  if (!c) return;
  c->srv = s;
  c->worker = -1;
  c->last_rx = c->last_tx = pst_now();
  /* Without a TLS context (s->opt.tls NULL) the stream is plain TCP: libuv's own calls. */
  char why[256];
  int rc = pst_tls_stream_init(&c->io, s->loop, s->opt.tls, NULL, why, sizeof why);
  c->io.tcp.data = c;
  pst_tls_stream_on_handshake(&c->io, on_handshake);
  c->next = s->net->conns;
  if (s->net->conns) s->net->conns->prev = c;
  s->net->conns = c;
  s->net->n_conns++;
  /* Accepted even when its TLS session could not be made: a connection left waiting in the
   * listener would stop libuv from accepting any other. */
  int arc = uv_accept(server, (uv_stream_t *)&c->io.tcp);
  if (rc < 0 || arc < 0) {
    if (rc < 0) ps_log_conn(s->net, "cannot set up a connection: %s", why);
    else ps_log_conn(s->net, "accept failed: %s", uv_strerror(arc));
    ps_conn_close(c, NULL, 1);
    return;
  }
  uv_tcp_nodelay(&c->io.tcp, 1);
  pst_tcp_peer_name(&c->io.tcp, c->peer, sizeof c->peer);
  if (s->life.stopping || ps_admit(s, c) < 0) {
    ps_conn_close(c, NULL, 1);
    return;
  }
  ps_conn_start_reading(c);
}

