/* A uv_tcp_t with optional TLS whose calls mirror libuv's (common/tls.h).
 *
 * Reading: while the handshake runs, or while the caller reads and nothing decrypted waits,
 * the TCP handle reads into the session's input buffer; each complete record is then
 * decrypted straight into the buffer the caller's alloc_cb hands out. When the caller stops
 * reading, the TCP handle stops too, so a paused reader holds its peer back by TCP flow
 * control exactly as on a plain connection.
 *
 * Writing: callers' writes wait in a queue of entries (their scatter lists, pointing into
 * their memory); the pump encrypts up to PST_TLS_BLOCK bytes of plaintext at a time into one
 * block of ciphertext, one uv_write each, while less than PST_TLS_WINDOW is in flight. A
 * block remembers which entries were wholly encrypted when it was cut; as libuv completes
 * writes in order, its completion completes those entries, so each caller's callback runs once
 * its last byte's ciphertext was written. Ciphertext made outside writes (handshake flights,
 * alerts, close_notify) goes out as blocks that complete no entry, in the order it was made. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/tls.h"

#define MAX_IOV 64 /* scatter pieces encrypted per block */

typedef struct {
  uv_write_t *req;
  uv_write_cb cb;
  unsigned nbufs;
  uv_buf_t small[4];
  uv_buf_t *heap; /* the caller's list when longer than small */
} entry;

typedef struct blk {
  uv_write_t w;
  pst_tls_out *out;      /* NULL: an empty write carrying completions */
  uint64_t done_below;   /* entries with a lower sequence number complete with this block */
  struct pst_tls_sx *x;
  struct blk *next;
} blk;

struct pst_tls_sx {
  pst_tls_stream *s;
  pst_tls_conn *conn;
  uv_idle_t idle;        /* deliveries and failures that must not run inside a call */
  int idle_active;
  uv_alloc_cb alloc_cb;
  uv_read_cb read_cb;
  int started, want_read, tcp_reading, starved, reported, hs_reported;
  int eof_seen;          /* the TCP end of file */
  int rerr;              /* a transport read error, to report */
  int werr;              /* the write path failed: queued writes fail with this */
  int closing, handles_open;
  uv_close_cb close_cb;
  pst_tls_handshake_cb hs_cb;
  /* Write queue: a ring of entries numbered by sequence. */
  entry *q;
  size_t q_cap, q_head, q_len;
  uint64_t head_seq;     /* sequence number of q[q_head] */
  uint64_t enc_seq;      /* the entry being encrypted (all below are wholly encrypted) */
  unsigned enc_buf;      /* its piece being encrypted */
  size_t enc_off;        /* bytes of that piece encrypted */
  size_t inflight;       /* ciphertext bytes handed to uv_write and not completed */
  int blocks_inflight;
  blk *free_blks;
  int pumping, pump_again;
  uv_shutdown_t *sreq;
  uv_shutdown_cb scb;
  int shut_issued, shut_err;
};

static uv_buf_t *entry_bufs(entry *e) { return e->heap ? e->heap : e->small; }

static void pump(struct pst_tls_sx *x);
static void deliver(struct pst_tls_sx *x);
static void update_tcp(struct pst_tls_sx *x);

static void schedule(struct pst_tls_sx *x);

/* ---- writes ---- */

static void on_blk_write(uv_write_t *w, int status);

static int issue(struct pst_tls_sx *x, pst_tls_out *out) {
  blk *b = x->free_blks;
  if (b) {
    x->free_blks = b->next;
  } else if (!(b = calloc(1, sizeof *b))) {
    pst_tls_out_release(x->conn, out);
    return -ENOMEM;
  }
  static char nothing;
  uv_buf_t empty = uv_buf_init(&nothing, 0);
  b->x = x;
  b->out = out;
  b->done_below = x->enc_seq;
  b->w.data = b;
  size_t len = out ? out->buf.len : 0;
  int rc = uv_write(&b->w, (uv_stream_t *)&x->s->tcp, out ? &out->buf : &empty, 1, on_blk_write);
  if (rc < 0) {
    pst_tls_out_release(x->conn, out);
    b->next = x->free_blks;
    x->free_blks = b;
    return rc;
  }
  x->inflight += len;
  x->blocks_inflight++;
  return 0;
}

/* Sends whatever ciphertext the session made. */
static void flush(struct pst_tls_sx *x) {
  pst_tls_out *o = pst_tls_take_out(x->conn);
  if (!o) return;
  int rc = issue(x, o);
  if (rc < 0 && !x->werr) {
    x->werr = rc;
    schedule(x);
  }
}

/* Pops the oldest entry and runs its callback (which may call back into the stream). */
static void complete_head(struct pst_tls_sx *x, int status) {
  entry e = x->q[x->q_head];
  x->q_head = (x->q_head + 1) % x->q_cap;
  x->q_len--;
  x->head_seq++;
  if (x->enc_seq < x->head_seq) {
    x->enc_seq = x->head_seq;
    x->enc_buf = 0;
    x->enc_off = 0;
  }
  free(e.heap);
  e.cb(e.req, status);
}

/* Fails every entry not yet in a block (only when no block is in flight, so callbacks keep
 * their order). */
static void fail_rest(struct pst_tls_sx *x, int status) {
  while (x->q_len > 0 && x->blocks_inflight == 0) complete_head(x, status);
}

static void maybe_shutdown(struct pst_tls_sx *x) {
  if (!x->sreq || x->shut_issued || x->closing) return;
  /* libuv shuts down after the writes already queued: only plaintext not yet encrypted
   * holds the shutdown back (or, after a failure, writes not yet failed). */
  if (x->enc_seq < x->head_seq + x->q_len) {
    if (!x->werr) return;
    fail_rest(x, x->werr);
    if (x->enc_seq < x->head_seq + x->q_len) return;
  }
  x->shut_issued = 1;
  if (pst_tls_handshake_state(x->conn) == 1 && pst_tls_close_notify(x->conn) == 0) flush(x);
  int rc = uv_shutdown(x->sreq, (uv_stream_t *)&x->s->tcp, x->scb);
  if (rc < 0) {
    x->shut_err = rc;
    schedule(x);
  }
}

static void on_blk_write(uv_write_t *w, int status) {
  blk *b = w->data;
  struct pst_tls_sx *x = b->x;
  if (b->out) x->inflight -= b->out->buf.len;
  x->blocks_inflight--;
  pst_tls_out_release(x->conn, b->out);
  uint64_t below = b->done_below;
  b->next = x->free_blks;
  x->free_blks = b;
  if (status < 0 && !x->werr) x->werr = status;
  while (x->q_len > 0 && x->head_seq < below) complete_head(x, status);
  if (x->werr) fail_rest(x, x->werr);
  if (!x->closing) {
    pump(x);
    maybe_shutdown(x);
  }
}

/* Gathers up to PST_TLS_BLOCK bytes of queued plaintext from the encryption point. */
static size_t gather(struct pst_tls_sx *x, uv_buf_t *iov, int *niov, int *advanced) {
  size_t total = 0;
  *niov = 0;
  *advanced = 0;
  while (x->enc_seq < x->head_seq + x->q_len && total < PST_TLS_BLOCK && *niov < MAX_IOV) {
    entry *e = &x->q[(x->q_head + (size_t)(x->enc_seq - x->head_seq)) % x->q_cap];
    uv_buf_t *bufs = entry_bufs(e);
    if (x->enc_buf >= e->nbufs) {
      x->enc_seq++;
      x->enc_buf = 0;
      x->enc_off = 0;
      *advanced = 1;
      continue;
    }
    uv_buf_t *p = &bufs[x->enc_buf];
    size_t k = p->len - x->enc_off;
    if (k > PST_TLS_BLOCK - total) k = PST_TLS_BLOCK - total;
    if (k > 0) iov[(*niov)++] = uv_buf_init(p->base + x->enc_off, (unsigned)k);
    total += k;
    x->enc_off += k;
    if (x->enc_off == p->len) {
      x->enc_buf++;
      x->enc_off = 0;
    }
  }
  /* An entry whose last piece was just taken counts as encrypted now. */
  while (x->enc_seq < x->head_seq + x->q_len) {
    entry *e = &x->q[(x->q_head + (size_t)(x->enc_seq - x->head_seq)) % x->q_cap];
    if (x->enc_buf < e->nbufs) break;
    x->enc_seq++;
    x->enc_buf = 0;
    x->enc_off = 0;
    *advanced = 1;
  }
  return total;
}

static void pump(struct pst_tls_sx *x) {
  if (x->pumping) {
    x->pump_again = 1;
    return;
  }
  x->pumping = 1;
  do {
    x->pump_again = 0;
    while (!x->closing && !x->werr && pst_tls_handshake_state(x->conn) == 1 &&
           x->inflight < PST_TLS_WINDOW && x->enc_seq < x->head_seq + x->q_len) {
      uv_buf_t iov[MAX_IOV];
      int niov, advanced;
      size_t n = gather(x, iov, &niov, &advanced);
      if (n > 0) {
        ssize_t r = pst_tls_write(x->conn, iov, niov);
        if (r < 0) {
          x->werr = (int)r;
          break;
        }
      }
      pst_tls_out *o = pst_tls_take_out(x->conn);
      if (o || advanced) {
        int rc = issue(x, o);
        if (rc < 0) {
          x->werr = rc;
          break;
        }
      }
    }
    if (x->werr) fail_rest(x, x->werr);
    maybe_shutdown(x);
  } while (x->pump_again);
  x->pumping = 0;
}

/* ---- reads ---- */

static void report(struct pst_tls_sx *x, int code) {
  x->reported = 1;
  uv_buf_t b = uv_buf_init(NULL, 0);
  x->read_cb((uv_stream_t *)&x->s->tcp, code, &b);
}

static void deliver(struct pst_tls_sx *x) {
  while (x->want_read && !x->closing && !x->reported) {
    ssize_t r = pst_tls_readable(x->conn);
    flush(x); /* alerts and post-handshake replies made while reading */
    if (r > 0) {
      uv_buf_t b = uv_buf_init(NULL, 0);
      x->alloc_cb((uv_handle_t *)&x->s->tcp, (size_t)r, &b);
      if (b.base == NULL || b.len == 0) {
        x->read_cb((uv_stream_t *)&x->s->tcp, UV_ENOBUFS, &b);
        return;
      }
      ssize_t n = pst_tls_read(x->conn, b.base, b.len);
      if (n <= 0) {
        report(x, n < 0 ? (int)n : UV_EPROTO);
        return;
      }
      x->read_cb((uv_stream_t *)&x->s->tcp, n, &b);
      continue;
    }
    if (r == 0 && !x->rerr) {
      x->starved = 1;
      return;
    }
    report(x, r < 0 ? (int)r : x->rerr);
  }
}

static void check_handshake(struct pst_tls_sx *x) {
  int st = pst_tls_handshake_state(x->conn);
  if (st == 0 || x->hs_reported) return;
  x->hs_reported = 1;
  if (st < 0 && !x->werr) x->werr = st;
  if (x->hs_cb) x->hs_cb(x->s, st < 0 ? st : 0);
  if (x->closing) return;
  if (st == 1) pump(x);
  else fail_rest(x, st);
  maybe_shutdown(x);
}

static void tls_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  struct pst_tls_sx *x = ((pst_tls_stream *)h)->x;
  (void)suggested;
  char *base;
  size_t len;
  pst_tls_in_buffer(x->conn, &base, &len);
  *buf = uv_buf_init(base, (unsigned)len);
}

static void tls_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  struct pst_tls_sx *x = ((pst_tls_stream *)st)->x;
  (void)buf;
  if (nread == 0 || x->closing) return;
  if (nread == UV_EOF) {
    x->eof_seen = 1;
    pst_tls_feed_eof(x->conn);
  } else if (nread < 0) {
    x->rerr = (int)nread;
  } else {
    pst_tls_in_commit(x->conn, (size_t)nread);
  }
  flush(x);
  check_handshake(x);
  if (x->closing) return;
  if (nread < 0 || x->want_read) x->starved = 0;
  deliver(x);
  update_tcp(x);
}

static void update_tcp(struct pst_tls_sx *x) {
  if (x->closing) return;
  int hs = pst_tls_handshake_state(x->conn);
  int want = x->started && !x->eof_seen && !x->rerr && hs >= 0 &&
             (hs == 0 || (x->want_read && x->starved && !x->reported));
  if (want && !x->tcp_reading) {
    int rc = uv_read_start((uv_stream_t *)&x->s->tcp, tls_alloc, tls_read);
    if (rc == 0) {
      x->tcp_reading = 1;
    } else {
      x->rerr = rc;
      schedule(x);
    }
  } else if (!want && x->tcp_reading) {
    uv_read_stop((uv_stream_t *)&x->s->tcp);
    x->tcp_reading = 0;
  }
}

static void on_idle(uv_idle_t *h) {
  struct pst_tls_sx *x = h->data;
  uv_idle_stop(h);
  x->idle_active = 0;
  if (x->closing) return;
  if (x->werr) fail_rest(x, x->werr);
  if (x->shut_err && x->sreq) {
    uv_shutdown_t *req = x->sreq;
    int rc = x->shut_err;
    x->sreq = NULL;
    x->scb(req, rc);
    if (x->closing) return;
  }
  maybe_shutdown(x);
  x->starved = 0;
  deliver(x);
  update_tcp(x);
}

static void schedule(struct pst_tls_sx *x) {
  if (x->idle_active || x->closing) return;
  x->idle_active = 1;
  uv_idle_start(&x->idle, on_idle);
}

static void start(struct pst_tls_sx *x) {
  if (x->started) return;
  x->started = 1;
  pst_tls_start(x->conn);
  flush(x);
  check_handshake(x);
  update_tcp(x);
}

/* ---- the interface ---- */

int pst_tls_stream_init(pst_tls_stream *s, uv_loop_t *loop, pst_tls_ctx *ctx,
                        const char *peer_name, char *err, size_t errlen) {
  memset(s, 0, sizeof *s);
  int rc = uv_tcp_init(loop, &s->tcp);
  if (rc < 0) {
    snprintf(err, errlen, "cannot make a TCP handle: %s", uv_strerror(rc));
    return rc;
  }
  if (!ctx) return 0;
  struct pst_tls_sx *x = calloc(1, sizeof *x);
  if (!x) {
    snprintf(err, errlen, "TLS: out of memory");
    return -ENOMEM;
  }
  rc = pst_tls_conn_new(ctx, peer_name, &x->conn, err, errlen);
  if (rc < 0) {
    free(x);
    return rc;
  }
  x->s = s;
  x->starved = 1;
  uv_idle_init(loop, &x->idle);
  x->idle.data = x;
  s->x = x;
  return 0;
}

void pst_tls_stream_on_handshake(pst_tls_stream *s, pst_tls_handshake_cb cb) {
  if (s->x) s->x->hs_cb = cb;
}

int pst_tls_stream_read_start(pst_tls_stream *s, uv_alloc_cb alloc_cb, uv_read_cb read_cb) {
  struct pst_tls_sx *x = s->x;
  if (!x) return uv_read_start((uv_stream_t *)&s->tcp, alloc_cb, read_cb);
  if (x->closing) return UV_EINVAL;
  x->alloc_cb = alloc_cb;
  x->read_cb = read_cb;
  x->want_read = 1;
  start(x);
  if (x->closing) return 0;
  /* What is already here (decrypted, buffered, or an end to report) is delivered from the
   * loop: libuv never calls read_cb inside uv_read_start, and callers rely on it. */
  if (pst_tls_has_input(x->conn) || x->eof_seen || x->rerr ||
      pst_tls_handshake_state(x->conn) < 0) {
    x->starved = 0;
    schedule(x);
  } else {
    x->starved = 1;
  }
  update_tcp(x);
  return 0;
}

int pst_tls_stream_read_stop(pst_tls_stream *s) {
  struct pst_tls_sx *x = s->x;
  if (!x) return uv_read_stop((uv_stream_t *)&s->tcp);
  x->want_read = 0;
  update_tcp(x);
  return 0;
}

int pst_tls_stream_write(pst_tls_stream *s, uv_write_t *req, const uv_buf_t bufs[],
                         unsigned nbufs, uv_write_cb cb) {
  struct pst_tls_sx *x = s->x;
  if (!x) return uv_write(req, (uv_stream_t *)&s->tcp, bufs, nbufs, cb);
  if (x->closing) return UV_EBADF;
  if (x->sreq) return UV_EPIPE;
  if (x->werr) return x->werr;
  if (x->q_len == x->q_cap) {
    size_t cap = x->q_cap ? x->q_cap * 2 : 64;
    entry *q = malloc(cap * sizeof *q);
    if (!q) return UV_ENOMEM;
    for (size_t i = 0; i < x->q_len; i++) q[i] = x->q[(x->q_head + i) % x->q_cap];
    free(x->q);
    x->q = q;
    x->q_cap = cap;
    x->q_head = 0;
  }
  entry *e = &x->q[(x->q_head + x->q_len) % x->q_cap];
  memset(e, 0, sizeof *e);
  if (nbufs > 4 && !(e->heap = malloc(nbufs * sizeof *e->heap))) return UV_ENOMEM;
  memcpy(entry_bufs(e), bufs, nbufs * sizeof *bufs);
  e->nbufs = nbufs;
  e->req = req;
  e->cb = cb;
  req->handle = (uv_stream_t *)&s->tcp;
  req->cb = cb;
  x->q_len++;
  start(x);
  pump(x);
  return 0;
}

int pst_tls_stream_try_write(pst_tls_stream *s, const uv_buf_t bufs[], unsigned nbufs) {
  struct pst_tls_sx *x = s->x;
  if (!x) return uv_try_write((uv_stream_t *)&s->tcp, bufs, nbufs);
  if (x->closing) return UV_EBADF;
  if (x->werr) return x->werr;
  /* As uv_try_write: nothing is taken while anything else waits to be sent (plaintext not yet
   * encrypted, or ciphertext libuv has not written). */
  if (pst_tls_handshake_state(x->conn) != 1 || x->enc_seq < x->head_seq + x->q_len ||
      uv_stream_get_write_queue_size((uv_stream_t *)&s->tcp) > 0 ||
      pst_tls_pending_out(x->conn) > 0 || x->sreq)
    return UV_EAGAIN;
  ssize_t r = pst_tls_write(x->conn, bufs, (int)nbufs);
  if (r < 0) return (int)r;
  pst_tls_out *o = pst_tls_take_out(x->conn);
  if (!o) return (int)r;
  int w = uv_try_write((uv_stream_t *)&s->tcp, &o->buf, 1);
  if (w == UV_EAGAIN) w = 0;
  if (w < 0) {
    pst_tls_out_release(x->conn, o);
    x->werr = w;
    return w;
  }
  if ((size_t)w == o->buf.len) {
    pst_tls_out_release(x->conn, o);
    return (int)r;
  }
  /* The session has moved on: the rest of this ciphertext must follow, queued. */
  memmove(o->buf.base, o->buf.base + w, o->buf.len - (size_t)w);
  o->buf.len -= (size_t)w;
  int rc = issue(x, o);
  if (rc < 0) x->werr = rc;
  return rc < 0 ? rc : (int)r;
}

int pst_tls_stream_shutdown(pst_tls_stream *s, uv_shutdown_t *req, uv_shutdown_cb cb) {
  struct pst_tls_sx *x = s->x;
  if (!x) return uv_shutdown(req, (uv_stream_t *)&s->tcp, cb);
  if (x->closing) return UV_EBADF;
  if (x->sreq) return UV_EALREADY;
  x->sreq = req;
  x->scb = cb;
  if (!x->started || pst_tls_handshake_state(x->conn) < 0) {
    /* Nothing was said in TLS, or the session failed: a plain FIN ends it. */
    x->shut_issued = 1;
    int rc = uv_shutdown(req, (uv_stream_t *)&s->tcp, cb);
    if (rc < 0) x->sreq = NULL;
    return rc;
  }
  maybe_shutdown(x);
  if (x->shut_issued && x->shut_err) {
    int rc = x->shut_err;
    x->shut_err = 0;
    x->sreq = NULL;
    return rc;
  }
  return 0;
}

static void finish_close(struct pst_tls_sx *x) {
  pst_tls_stream *s = x->s;
  /* Writes that never reached a block are cancelled, after those libuv cancelled. */
  while (x->q_len > 0) complete_head(x, UV_ECANCELED);
  if (x->sreq && !x->shut_issued) x->scb(x->sreq, UV_ECANCELED);
  for (blk *b = x->free_blks, *next; b; b = next) {
    next = b->next;
    free(b);
  }
  free(x->q);
  pst_tls_conn_free(x->conn);
  uv_close_cb cb = x->close_cb;
  free(x);
  s->x = NULL;
  if (cb) cb((uv_handle_t *)&s->tcp);
}

static void on_part_closed(uv_handle_t *h) {
  /* Both handles lead back to the stream: the idle handle's data is x, the TCP handle is
   * the stream's first member. */
  struct pst_tls_sx *sx = h->type == UV_IDLE ? (struct pst_tls_sx *)h->data
                                             : ((pst_tls_stream *)h)->x;
  if (--sx->handles_open == 0) finish_close(sx);
}

void pst_tls_stream_close(pst_tls_stream *s, uv_close_cb cb) {
  struct pst_tls_sx *x = s->x;
  if (!x) {
    if (!uv_is_closing((uv_handle_t *)&s->tcp)) uv_close((uv_handle_t *)&s->tcp, cb);
    return;
  }
  if (x->closing) return;
  x->closing = 1;
  x->close_cb = cb;
  x->handles_open = 2;
  uv_close((uv_handle_t *)&x->idle, on_part_closed);
  uv_close((uv_handle_t *)&s->tcp, on_part_closed);
}

const char *pst_tls_stream_strerror(const pst_tls_stream *s, int code) {
  if (s->x && code < 0 && code != UV_EOF && code != s->x->rerr &&
      pst_tls_conn_error(s->x->conn)[0])
    return pst_tls_conn_error(s->x->conn);
  return uv_strerror(code);
}

int pst_tls_stream_is_tls(const pst_tls_stream *s) { return s->x != NULL; }

void pst_tls_stream_describe(const pst_tls_stream *s, char *buf, size_t len) {
  if (!s->x) {
    snprintf(buf, len, "plain TCP");
    return;
  }
  pst_tls_conn_describe(s->x->conn, buf, len);
}

pst_tls_failure pst_tls_stream_failure(const pst_tls_stream *s) {
  return s->x ? pst_tls_conn_failure(s->x->conn) : PST_TLS_FAIL_NONE;
}

size_t pst_tls_stream_first_bytes(const pst_tls_stream *s, void *buf, size_t len) {
  return s->x ? pst_tls_conn_first_bytes(s->x->conn, buf, len) : 0;
}
