/* Tests of common/tls.h over real loopback TCP connections, libuv on both ends (one loop for
 * both): small messages both ways, 64 MiB each way in 4 MiB scatter writes with a paused reader, cancellation on
 * close, shutdown with close_notify, plain pass-through, and the refusals (no client
 * certificate, another CA on either side, a plaintext peer on either side, garbage after the
 * handshake, a wrong expected name), each with its reason and kind. Certificates are made at test time (common/tls_pki.h). */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "common/tls_testing.h"

#define NMSG 1000
#define BIG_WRITES 16
#define BIG_PIECE (4u << 20)
#define BIG_TOTAL ((size_t)BIG_WRITES * BIG_PIECE)

typedef struct net net;
typedef struct side side;

typedef struct {
  uv_write_t req;
  side *s;
  int idx;
} wreq;

struct side {
  pst_tls_stream st;
  net *n;
  int is_server, used, closing, closed;
  uint8_t scratch[65536];
  uint64_t rx_bytes, rx_hash;
  int rx_eof, rx_err;
  char rx_why[320];
  pst_tls_failure rx_kind;  /* the failure's kind, asked in the read callback */
  uint8_t rx_first[8];      /* a plaintext peer's first bytes */
  size_t rx_first_n;
  uint8_t *msgs;            /* received bytes, when kept */
  size_t msgs_len, msgs_cap;
  int keep;
  int hs_status, hs_called;
  char desc[200];
  wreq w[NMSG];
  uint16_t lens[NMSG];
  int writes_done, writes_ok, writes_cancelled, order_bad, writes_after_close;
  uint64_t pause_every, next_pause;
  uv_timer_t resume;
  int done;
};

struct net {
  uv_loop_t loop;
  uv_tcp_t listener;
  int listener_open;
  uv_timer_t deadline;
  int timed_out;
  pst_tls_ctx *sctx, *cctx;
  const char *name;
  side srv, cli;
  uv_connect_t creq;
  uv_shutdown_t sreq;
  int shut_status, shut_called;
  void (*on_connect)(net *n);           /* the client is connected */
  void (*on_accept)(net *n);            /* the server accepted */
  void (*on_data)(side *s);             /* bytes arrived at s */
  void (*on_write)(side *s, int idx);   /* a write of s completed */
  void (*on_hs)(side *s);               /* a handshake finished or failed */
};

static uint64_t fnv(uint64_t h, const uint8_t *p, size_t n) {
  if (h == 0) h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static void maybe_end(net *n) {
  side *sides[2] = {&n->srv, &n->cli};
  /* A connected client means the server will accept: wait for it, so that a client that
   * closes at once still has its server side tested. */
  if (!n->srv.used && !n->timed_out) return;
  for (int i = 0; i < 2; i++)
    if (sides[i]->used && !sides[i]->closed) return;
  if (n->listener_open) {
    n->listener_open = 0;
    uv_close((uv_handle_t *)&n->listener, NULL);
  }
  if (!uv_is_closing((uv_handle_t *)&n->deadline)) uv_close((uv_handle_t *)&n->deadline, NULL);
  for (int i = 0; i < 2; i++)
    if (!uv_is_closing((uv_handle_t *)&sides[i]->resume))
      uv_close((uv_handle_t *)&sides[i]->resume, NULL);
}

static void side_closed(uv_handle_t *h) {
  side *s = h->data;
  s->closed = 1;
  maybe_end(s->n);
}

static void side_close(side *s) {
  if (s->closing) return;
  s->closing = 1;
  uv_timer_stop(&s->resume);
  pst_tls_stream_close(&s->st, side_closed);
}

static void side_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
  side *s = h->data;
  (void)suggested;
  *b = uv_buf_init((char *)s->scratch, sizeof s->scratch);
}

static void side_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b);

static void on_resume(uv_timer_t *t) {
  side *s = t->data;
  if (!s->closing) pst_tls_stream_read_start(&s->st, side_alloc, side_read);
}

static void side_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b) {
  side *s = st->data;
  if (nread == 0) return;
  if (nread < 0) {
    if (nread == UV_EOF) {
      s->rx_eof = 1;
    } else {
      s->rx_err = (int)nread;
      snprintf(s->rx_why, sizeof s->rx_why, "%s", pst_tls_stream_strerror(&s->st, (int)nread));
      s->rx_kind = pst_tls_stream_failure(&s->st);
      s->rx_first_n = pst_tls_stream_first_bytes(&s->st, s->rx_first, sizeof s->rx_first);
    }
    side_close(s);
    return;
  }
  s->rx_hash = fnv(s->rx_hash, (const uint8_t *)b->base, (size_t)nread);
  s->rx_bytes += (uint64_t)nread;
  if (s->keep) {
    if (s->msgs_len + (size_t)nread > s->msgs_cap) {
      s->msgs_cap = (s->msgs_len + (size_t)nread) * 2;
      s->msgs = realloc(s->msgs, s->msgs_cap);
    }
    memcpy(s->msgs + s->msgs_len, b->base, (size_t)nread);
    s->msgs_len += (size_t)nread;
  }
  if (s->pause_every && s->rx_bytes >= s->next_pause) {
    /* A paused reader: whatever the stream holds must wait for the next read_start. */
    s->next_pause += s->pause_every;
    pst_tls_stream_read_stop(&s->st);
    uv_timer_start(&s->resume, on_resume, 2, 0);
  }
  if (s->n->on_data) s->n->on_data(s);
}

/* read_start for the side, with the callbacks above. */
static void side_read_start(side *s) { pst_tls_stream_read_start(&s->st, side_alloc, side_read); }

static void on_side_write(uv_write_t *r, int status) {
  wreq *w = r->data;
  side *s = w->s;
  if (w->idx != s->writes_done) s->order_bad++;
  if (s->closed) s->writes_after_close++;
  s->writes_done++;
  if (status == 0) s->writes_ok++;
  else if (status == UV_ECANCELED) s->writes_cancelled++;
  if (s->n->on_write) s->n->on_write(s, w->idx);
}

static int side_write(side *s, int idx, const uv_buf_t *bufs, unsigned nbufs) {
  s->w[idx].s = s;
  s->w[idx].idx = idx;
  s->w[idx].req.data = &s->w[idx];
  return pst_tls_stream_write(&s->st, &s->w[idx].req, bufs, nbufs, on_side_write);
}

static void on_side_hs(pst_tls_stream *st, int status) {
  side *s = st->tcp.data;
  s->hs_called++;
  s->hs_status = status;
  pst_tls_stream_describe(st, s->desc, sizeof s->desc);
  if (s->n->on_hs) s->n->on_hs(s);
}

static void on_deadline(uv_timer_t *t) {
  net *n = t->data;
  n->timed_out = 1;
  if (n->srv.used) side_close(&n->srv);
  if (n->cli.used) side_close(&n->cli);
  maybe_end(n);
}

static void on_accept(uv_stream_t *l, int status) {
  net *n = l->data;
  char err[256];
  if (status < 0 || n->srv.used) return;
  side *s = &n->srv;
  s->used = 1;
  int rc = pst_tls_stream_init(&s->st, &n->loop, n->sctx, NULL, err, sizeof err);
  s->st.tcp.data = s;
  CHECK(rc == 0, "server stream: %s", err);
  if (rc < 0 || uv_accept(l, (uv_stream_t *)&s->st.tcp) < 0) {
    side_close(s);
    return;
  }
  pst_tls_stream_on_handshake(&s->st, on_side_hs);
  n->listener_open = 0;
  uv_close((uv_handle_t *)&n->listener, NULL);
  side_read_start(s);
  if (n->on_accept) n->on_accept(n);
}

static void on_connected(uv_connect_t *req, int status) {
  net *n = req->data;
  CHECK(status == 0, "connect: %s", status < 0 ? uv_strerror(status) : "");
  if (status < 0) {
    side_close(&n->cli);
    return;
  }
  side_read_start(&n->cli);
  if (n->on_connect) n->on_connect(n);
}

/* Runs one connection: the server with n->sctx (NULL: plain), the client with n->cctx (NULL:
 * plain) and n->name, until both sides closed or timeout_ms. Returns 0 if it ended in time. */
static int run(net *n, int timeout_ms) {
  char err[256];
  uv_loop_init(&n->loop);
  n->srv.n = n->cli.n = n;
  n->srv.is_server = 1;
  uv_timer_init(&n->loop, &n->srv.resume);
  uv_timer_init(&n->loop, &n->cli.resume);
  n->srv.resume.data = &n->srv;
  n->cli.resume.data = &n->cli;
  uv_timer_init(&n->loop, &n->deadline);
  n->deadline.data = n;
  uv_timer_start(&n->deadline, on_deadline, (uint64_t)timeout_ms, 0);
  struct sockaddr_in a;
  uv_ip4_addr("127.0.0.1", 0, &a);
  uv_tcp_init(&n->loop, &n->listener);
  n->listener.data = n;
  n->listener_open = 1;
  int len = sizeof a;
  if (uv_tcp_bind(&n->listener, (struct sockaddr *)&a, 0) < 0 ||
      uv_listen((uv_stream_t *)&n->listener, 8, on_accept) < 0 ||
      uv_tcp_getsockname(&n->listener, (struct sockaddr *)&a, &len) < 0) {
    CHECK(0, "cannot listen on 127.0.0.1");
    return -1;
  }
  side *c = &n->cli;
  c->used = 1;
  int rc = pst_tls_stream_init(&c->st, &n->loop, n->cctx, n->name, err, sizeof err);
  c->st.tcp.data = c;
  CHECK(rc == 0, "client stream: %s", err);
  pst_tls_stream_on_handshake(&c->st, on_side_hs);
  n->creq.data = n;
  if (rc < 0 || uv_tcp_connect(&n->creq, &c->st.tcp, (struct sockaddr *)&a, on_connected) < 0)
    side_close(c);
  uv_run(&n->loop, UV_RUN_DEFAULT);
  int closed = uv_loop_close(&n->loop);
  CHECK(closed == 0, "the loop closed with handles left open");
  return n->timed_out ? -1 : 0;
}

/* ---- small messages both ways ---- */

static uint8_t g_msg[2][NMSG][300];

static void msgs_fill(void) {
  for (int d = 0; d < 2; d++)
    for (int i = 0; i < NMSG; i++)
      for (int j = 0; j < 300; j++) g_msg[d][i][j] = (uint8_t)(i * 31 + j * 7 + d * 101);
}

static uint16_t msg_len(int d, int i) { return (uint16_t)(1 + (i * 37 + d * 11) % 299); }

static void send_msgs(side *s, int d) {
  for (int i = 0; i < NMSG; i++) {
    s->lens[i] = msg_len(d, i);
    uv_buf_t b[2] = {uv_buf_init((char *)&s->lens[i], 2),
                     uv_buf_init((char *)g_msg[d][i], s->lens[i])};
    if (side_write(s, i, b, 2) < 0) break;
  }
}

/* Whether s received exactly the NMSG messages of direction d. */
static int msgs_ok(const side *s, int d) {
  size_t off = 0;
  for (int i = 0; i < NMSG; i++) {
    uint16_t l;
    if (off + 2 > s->msgs_len) return 0;
    memcpy(&l, s->msgs + off, 2);
    if (l != msg_len(d, i) || off + 2 + l > s->msgs_len || memcmp(s->msgs + off + 2, g_msg[d][i], l))
      return 0;
    off += 2 + (size_t)l;
  }
  return off == s->msgs_len;
}

static size_t msgs_bytes(int d) {
  size_t t = 0;
  for (int i = 0; i < NMSG; i++) t += 2 + msg_len(d, i);
  return t;
}

static void small_connect(net *n) { send_msgs(&n->cli, 0); }
static void small_accept(net *n) { send_msgs(&n->srv, 1); }
static void small_check(net *n) {
  if (n->cli.rx_bytes >= msgs_bytes(1) && n->srv.rx_bytes >= msgs_bytes(0) &&
      n->cli.writes_done == NMSG && n->srv.writes_done == NMSG) {
    side_close(&n->cli);
    side_close(&n->srv);
  }
}
static void small_data(side *s) { small_check(s->n); }
static void small_write(side *s, int idx) { (void)idx; small_check(s->n); }

static void test_small(pst_tls_ctx *sc, pst_tls_ctx *cc, const char *what) {
  static net n;
  memset(&n, 0, sizeof n);
  n.sctx = sc;
  n.cctx = cc;
  n.name = "localhost";
  n.srv.keep = n.cli.keep = 1;
  n.on_connect = small_connect;
  n.on_accept = small_accept;
  n.on_data = small_data;
  n.on_write = small_write;
  int rc = run(&n, 10000);
  CHECK(rc == 0, "%s: timed out", what);
  CHECK(msgs_ok(&n.srv, 0) && msgs_ok(&n.cli, 1), "%s: %d messages each way, in order", what, NMSG);
  CHECK(n.cli.writes_ok == NMSG && n.srv.writes_ok == NMSG && !n.cli.order_bad && !n.srv.order_bad,
        "%s: write callbacks %d/%d ok, order %d/%d", what, n.cli.writes_ok, n.srv.writes_ok,
        n.cli.order_bad, n.srv.order_bad);
  if (sc)
    CHECK(n.srv.hs_called == 1 && n.srv.hs_status == 0 && n.cli.hs_called == 1 &&
              has(n.srv.desc, "CN=pstrain-worker") && has(n.cli.desc, "CN=pstrain-ps"),
          "%s: handshakes '%s' / '%s'", what, n.srv.desc, n.cli.desc);
  else
    CHECK(n.srv.hs_called == 0 && n.cli.hs_called == 0, "%s: no handshake", what);
  free(n.srv.msgs);
  free(n.cli.msgs);
}

/* ---- 64 MiB each way ---- */

static uint8_t *g_big;
static uint8_t g_heads[2][BIG_WRITES][16];
static uint64_t g_big_hash[2];

static void big_fill(void) {
  g_big = malloc(BIG_TOTAL);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < BIG_TOTAL; i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    memcpy(g_big + i, &x, 8);
  }
  for (int d = 0; d < 2; d++) {
    uint64_t h = 0;
    for (int i = 0; i < BIG_WRITES; i++) {
      snprintf((char *)g_heads[d][i], 16, "chunk %2u of %u", (unsigned)i % 100u, (unsigned)d % 10u);
      const uint8_t *p = g_big + (size_t)i * BIG_PIECE;
      h = fnv(h, g_heads[d][i], 16);
      h = fnv(h, p, (1u << 20) - 16);
      h = fnv(h, p + (1u << 20) - 16, BIG_PIECE - (1u << 20));
    }
    g_big_hash[d] = h;
  }
}

/* Write i of direction d: a 16-byte header and two pieces of the data, 4 MiB in all. */
static void send_big(side *s, int d) {
  for (int i = 0; i < BIG_WRITES; i++) {
    const uint8_t *p = g_big + (size_t)i * BIG_PIECE;
    uv_buf_t b[3] = {uv_buf_init((char *)g_heads[d][i], 16),
                     uv_buf_init((char *)p, (1u << 20) - 16),
                     uv_buf_init((char *)p + (1u << 20) - 16, BIG_PIECE - (1u << 20))};
    CHECK(side_write(s, i, b, 3) == 0, "big write %d", i);
  }
}

static void big_connect(net *n) { send_big(&n->cli, 0); }
static void big_accept(net *n) { send_big(&n->srv, 1); }
static void big_check(net *n) {
  if (n->cli.rx_bytes >= BIG_TOTAL && n->srv.rx_bytes >= BIG_TOTAL &&
      n->cli.writes_done == BIG_WRITES && n->srv.writes_done == BIG_WRITES) {
    side_close(&n->cli);
    side_close(&n->srv);
  }
}
static void big_data(side *s) { big_check(s->n); }
static void big_write(side *s, int idx) { (void)idx; big_check(s->n); }

static void test_big(pst_tls_ctx *sc, pst_tls_ctx *cc) {
  static net n;
  memset(&n, 0, sizeof n);
  n.sctx = sc;
  n.cctx = cc;
  n.srv.pause_every = n.srv.next_pause = 8u << 20; /* the server pauses every 8 MiB */
  n.on_connect = big_connect;
  n.on_accept = big_accept;
  n.on_data = big_data;
  n.on_write = big_write;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int rc = run(&n, 30000);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  CHECK(rc == 0, "64 MiB: timed out");
  CHECK(n.srv.rx_bytes == BIG_TOTAL && n.srv.rx_hash == g_big_hash[0],
        "64 MiB client -> server: %llu bytes, checksum %s", (unsigned long long)n.srv.rx_bytes,
        n.srv.rx_hash == g_big_hash[0] ? "equal" : "differs");
  CHECK(n.cli.rx_bytes == BIG_TOTAL && n.cli.rx_hash == g_big_hash[1],
        "64 MiB server -> client: %llu bytes, checksum %s", (unsigned long long)n.cli.rx_bytes,
        n.cli.rx_hash == g_big_hash[1] ? "equal" : "differs");
  CHECK(n.cli.writes_ok == BIG_WRITES && n.srv.writes_ok == BIG_WRITES && !n.cli.order_bad &&
            !n.srv.order_bad,
        "64 MiB: write callbacks %d/%d, order %d/%d", n.cli.writes_ok, n.srv.writes_ok,
        n.cli.order_bad, n.srv.order_bad);
  printf("64 MiB each way over TLS: %.3f s (both ends and their checksums on one thread, the "
         "server pausing every 8 MiB)\n", s);
}

/* ---- cancelled on close ---- */

static void cancel_connect(net *n) { send_big(&n->cli, 0); }
static void cancel_write(side *s, int idx) {
  if (s == &s->n->cli && idx == 0) side_close(s);
}

static void test_cancel(pst_tls_ctx *sc, pst_tls_ctx *cc) {
  static net n;
  memset(&n, 0, sizeof n);
  n.sctx = sc;
  n.cctx = cc;
  n.on_connect = cancel_connect;
  n.on_write = cancel_write;
  int rc = run(&n, 10000);
  CHECK(rc == 0, "cancel: timed out");
  CHECK(n.cli.writes_done == BIG_WRITES && n.cli.writes_after_close == 0 && !n.cli.order_bad &&
            n.cli.writes_ok + n.cli.writes_cancelled == BIG_WRITES && n.cli.writes_cancelled > 0,
        "cancel: %d callbacks (%d ok, %d cancelled, %d after close, order %d)", n.cli.writes_done,
        n.cli.writes_ok, n.cli.writes_cancelled, n.cli.writes_after_close, n.cli.order_bad);
}

/* ---- shutdown: queued writes, close_notify, FIN ---- */

static void on_shut(uv_shutdown_t *req, int status) {
  net *n = req->data;
  n->shut_called++;
  n->shut_status = status;
}

static void shut_connect(net *n) {
  uv_buf_t b = uv_buf_init("the last words", 14);
  side_write(&n->cli, 0, &b, 1);
  n->sreq.data = n;
  CHECK(pst_tls_stream_shutdown(&n->cli.st, &n->sreq, on_shut) == 0, "shutdown call");
}

static void test_shutdown(pst_tls_ctx *sc, pst_tls_ctx *cc, const char *name, const char *suite) {
  static net n;
  memset(&n, 0, sizeof n);
  n.sctx = sc;
  n.cctx = cc;
  n.name = name;
  n.srv.keep = 1;
  n.on_connect = shut_connect;
  int rc = run(&n, 10000);
  CHECK(rc == 0, "shutdown (%s): timed out", name);
  CHECK(n.srv.msgs_len == 14 && !memcmp(n.srv.msgs, "the last words", 14) && n.srv.rx_eof &&
            !n.srv.rx_err,
        "shutdown (%s): server got %zu bytes, eof %d, error '%s'", name, n.srv.msgs_len,
        n.srv.rx_eof, n.srv.rx_why);
  CHECK(n.shut_called == 1 && n.shut_status == 0 && n.cli.writes_ok == 1,
        "shutdown (%s): callback %d status %d", name, n.shut_called, n.shut_status);
  if (suite) CHECK(has(n.cli.desc, suite), "suite %s: '%s'", suite, n.cli.desc);
  free(n.srv.msgs);
}

/* ---- try_write (the worker's last ERROR before it closes) ---- */

static int g_try_rc[2];

static void try_hs(side *s) {
  if (s->is_server || s->hs_status != 0) return;
  uv_buf_t b[2] = {uv_buf_init("now", 3), uv_buf_init("!", 1)};
  g_try_rc[0] = pst_tls_stream_try_write(&s->st, b, 2);
  /* Then a queued write, and try_write again: it may go (after it) or wait, never jump. */
  uv_buf_t c = uv_buf_init(" later", 6);
  side_write(s, 0, &c, 1);
  g_try_rc[1] = pst_tls_stream_try_write(&s->st, b, 1);
  s->n->sreq.data = s->n;
  pst_tls_stream_shutdown(&s->st, &s->n->sreq, on_shut);
}

static void test_try_write(pst_tls_ctx *sc, pst_tls_ctx *cc) {
  static net n;
  memset(&n, 0, sizeof n);
  n.sctx = sc;
  n.cctx = cc;
  n.srv.keep = 1;
  n.on_hs = try_hs;
  int rc = run(&n, 10000);
  CHECK(rc == 0, "try_write: timed out");
  CHECK(g_try_rc[0] == 4 && (g_try_rc[1] == 3 || g_try_rc[1] == UV_EAGAIN),
        "try_write returned %d, then %d", g_try_rc[0], g_try_rc[1]);
  const char *want = g_try_rc[1] == 3 ? "now! laternow" : "now! later";
  CHECK(n.srv.msgs_len == strlen(want) && !memcmp(n.srv.msgs, want, strlen(want)) &&
            n.srv.rx_eof,
        "try_write: the server got %zu bytes, eof %d", n.srv.msgs_len, n.srv.rx_eof);
  free(n.srv.msgs);
}

/* ---- refusals ---- */

enum { GOOD = 0, PLAIN_CLIENT, GARBAGE_RECORD, GARBAGE_BYTES, PROBE };
static int g_mode;

static void refuse_connect(net *n) {
  if (g_mode == PROBE) {
    side_close(&n->cli);
    return;
  }
  if (g_mode == PLAIN_CLIENT) {
    /* What a pstrain worker without TLS sends first: a frame prefix. */
    uv_buf_t b = uv_buf_init("PSTR\x01\x00\x00\x00\x10\x00\x00\x00\x00\x00\x00\x00", 16);
    side_write(&n->cli, 0, &b, 1);
    return;
  }
  uv_buf_t b = uv_buf_init("hello", 5);
  side_write(&n->cli, 0, &b, 1);
}

static void refuse_hs(side *s) {
  if (s->is_server || s->hs_status != 0 || (g_mode != GARBAGE_RECORD && g_mode != GARBAGE_BYTES))
    return;
  /* Straight onto the socket, past TLS: an application-data record with a forged tag, or
   * bytes that are no record at all. */
  static uint8_t rec[5 + 64] = {0x17, 0x03, 0x03, 0x00, 0x40};
  for (int i = 5; i < (int)sizeof rec; i++) rec[i] = (uint8_t)(i * 13);
  uv_buf_t b = g_mode == GARBAGE_RECORD ? uv_buf_init((char *)rec, sizeof rec)
                                        : uv_buf_init("GARBAGE GARBAGE GARBAGE", 23);
  uv_try_write((uv_stream_t *)&s->st.tcp, &b, 1);
}

/* The plain server of a TLS client: like a pstrain-ps without TLS, it closes on bad bytes. */
static void refuse_data(side *s) {
  if (s->is_server && !s->n->sctx) side_close(s);
}

/* srv_kind, cli_kind: the failure kind each end must see with its reason (when it has one). */
static void refusal(const char *what, pst_tls_ctx *sc, pst_tls_ctx *cc, const char *name,
                    int mode, const char *srv_why, const char *cli_why, pst_tls_failure srv_kind,
                    pst_tls_failure cli_kind) {
  static net n;
  memset(&n, 0, sizeof n);
  n.sctx = sc;
  n.cctx = cc;
  n.name = name;
  g_mode = mode;
  n.on_connect = refuse_connect;
  n.on_hs = refuse_hs;
  n.on_data = refuse_data;
  int rc = run(&n, 10000);
  CHECK(rc == 0, "%s: timed out", what);
  if (srv_why)
    CHECK(n.srv.rx_err == UV_EPROTO && has(n.srv.rx_why, srv_why),
          "%s: the server's reason '%s' (code %d), expected '%s'", what, n.srv.rx_why,
          n.srv.rx_err, srv_why);
  else
    CHECK(!n.srv.rx_err && (mode != PROBE || n.srv.rx_eof), "%s: server eof %d error '%s'", what,
          n.srv.rx_eof, n.srv.rx_why);
  if (cli_why)
    CHECK(n.cli.rx_err < 0 && has(n.cli.rx_why, cli_why),
          "%s: the client's reason '%s' (code %d), expected '%s'", what, n.cli.rx_why,
          n.cli.rx_err, cli_why);
  if (srv_why)
    CHECK(n.srv.rx_kind == srv_kind, "%s: the server's failure kind %d, expected %d", what,
          (int)n.srv.rx_kind, (int)srv_kind);
  if (cli_why)
    CHECK(n.cli.rx_kind == cli_kind, "%s: the client's failure kind %d, expected %d", what,
          (int)n.cli.rx_kind, (int)cli_kind);
  if (srv_kind == PST_TLS_FAIL_PLAINTEXT)
    CHECK(n.srv.rx_first_n >= 4 && !memcmp(n.srv.rx_first, "PSTR", 4),
          "%s: the plaintext peer's first bytes (%zu)", what, n.srv.rx_first_n);
  else
    CHECK(n.srv.rx_first_n == 0 && n.cli.rx_first_n == 0, "%s: first bytes of a TLS peer", what);
  CHECK(n.srv.closed && n.cli.closed, "%s: both ends closed", what);
  if (srv_why || cli_why)
    printf("%-34s server: %s\n%-34s client: %s\n", what, n.srv.rx_why[0] ? n.srv.rx_why : "(eof)",
           "", n.cli.rx_why[0] ? n.cli.rx_why : n.cli.rx_eof ? "(eof)" : "(no read error)");
}

int main(void) {
  /* As in the daemons: a write to a peer that left fails with EPIPE instead of killing us. */
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (pki_setup() < 0) {
    printf("0 passed, 1 failed\n");
    return 1;
  }
  char err[512];
  pst_tls_ctx *srv = ctx(PST_TLS_SERVER, path("a", "server.pem"), path("a", "server.key"),
                         path("a", "ca.pem"));
  pst_tls_ctx *cli = ctx(PST_TLS_CLIENT, path("a", "client.pem"), path("a", "client.key"),
                         path("a", "ca.pem"));
  pst_tls_ctx *cli_nocert = ctx(PST_TLS_CLIENT, NULL, NULL, path("a", "ca.pem"));
  /* A client whose certificate comes from CA b but which trusts a's server. */
  pst_tls_ctx *cli_other = ctx(PST_TLS_CLIENT, path("b", "client.pem"), path("b", "client.key"),
                               path("ab", "ca.pem"));
  /* A client trusting only CA b, and a server that would accept its certificate. */
  pst_tls_ctx *cli_b = ctx(PST_TLS_CLIENT, path("b", "client.pem"), path("b", "client.key"),
                           path("b", "ca.pem"));
  pst_tls_ctx *srv_ab = ctx(PST_TLS_SERVER, path("a", "server.pem"), path("a", "server.key"),
                            path("ab", "ca.pem"));
  pst_tls_ctx *srv_cc = ctx(PST_TLS_SERVER, path("a", "server.pem"), path("a", "server.key"),
                            path("a", "ca.pem"));
  pst_tls_ctx *cli_cc = ctx(PST_TLS_CLIENT, path("a", "client.pem"), path("a", "client.key"),
                            path("a", "ca.pem"));
  if (!srv || !cli || !cli_nocert || !cli_other || !cli_b || !srv_ab || !srv_cc || !cli_cc) {
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return 1;
  }
  pst_tls_ctx_set_ciphersuites(srv_cc, "TLS_CHACHA20_POLY1305_SHA256", err, sizeof err);
  pst_tls_ctx_set_ciphersuites(cli_cc, "TLS_CHACHA20_POLY1305_SHA256", err, sizeof err);
  msgs_fill();
  big_fill();

  test_small(srv, cli, "TLS");
  test_small(NULL, NULL, "plain pass-through");
  test_big(srv, cli);
  test_cancel(srv, cli);
  test_shutdown(srv, cli, "127.0.0.1", NULL);
  test_shutdown(srv_cc, cli_cc, "localhost", "TLS_CHACHA20_POLY1305_SHA256");
  test_try_write(srv, cli);

  const pst_tls_failure NONE = PST_TLS_FAIL_NONE, BROKEN = PST_TLS_FAIL_BROKEN,
                        REFUSED = PST_TLS_FAIL_REFUSED, PLAINTEXT = PST_TLS_FAIL_PLAINTEXT;
  refusal("client without a certificate", srv, cli_nocert, NULL, GOOD, "sent no certificate",
          "certificate required", REFUSED, REFUSED);
  refusal("client certificate of another CA", srv, cli_other, NULL, GOOD,
          "not signed by our CA", "unknown ca", REFUSED, REFUSED);
  refusal("server certificate of another CA", srv_ab, cli_b, NULL, GOOD, "unknown ca",
          "not signed by our CA", REFUSED, REFUSED);
  refusal("wrong expected name", srv, cli, "ps.example", GOOD, "bad certificate",
          "does not carry the expected name", REFUSED, REFUSED);
  refusal("plaintext client, TLS server", srv, NULL, NULL, PLAIN_CLIENT,
          "does not speak TLS (it sent \"PSTR", NULL, PLAINTEXT, NONE);
  refusal("TLS client, plaintext server", NULL, cli, NULL, GOOD, NULL,
          "closed the connection during the handshake", NONE, BROKEN);
  refusal("forged record after the handshake", srv, cli, NULL, GARBAGE_RECORD,
          "integrity check", NULL, BROKEN, NONE);
  refusal("garbage bytes after the handshake", srv, cli, NULL, GARBAGE_BYTES,
          "TLS session failed", NULL, BROKEN, NONE);
  refusal("a port probe (connect, close)", srv, NULL, NULL, PROBE, NULL, NULL, NONE, NONE);

  pst_tls_ctx *all[] = {srv, cli, cli_nocert, cli_other, cli_b, srv_ab, srv_cc, cli_cc};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pst_tls_ctx_free(all[i]);
  free(g_big);
  return pki_done();
}
