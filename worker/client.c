/* The connection to the ps: connecting with retries, TLS and the secret's handshake, reading
 * frames, and closing. Sending (control frames and the chunked push) is in client_send.c. */
#include "worker/client.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/timeline.h"
#include "proto/send.h"

static void try_connect(wk_client *c);

/* Milliseconds an attempt made at (or after) the connect deadline is given. */
#define WK_LAST_ATTEMPT_MS 250

static int rd_payload(pst_reader *r, const Pstrain__Header *h, float **dst) {
  wk_client *c = r->data;
  /* A reply that begins while the push before it is still leaving (its PULL went out in
   * the push's middle, worker/step.c's wk_pull_ahead) hid all of its wait: on_push_write
   * counts it as 0 when the push is out. */
  if (h->type == PSTRAIN__MSG_TYPE__WEIGHTS && c->push_queued > 0 && !c->push_timed &&
      c->push_done_at == 0)
    c->reply_early = 1;
  if (h->type == PSTRAIN__MSG_TYPE__WEIGHTS && c->push_done_at > 0) {
    /* The first weights after a push: the reply to the pull that followed it. */
    c->reply_at = pst_now();
    c->pushed_at = c->push_done_at;
    double wait = c->reply_at - c->push_done_at;
    if (wait < 0) wait = 0;
    c->push_done_at = 0;
    c->wait_us = wait * 1e6 < 4e9 ? (uint32_t)(wait * 1e6 + 0.5) : 4000000000u;
    if (c->wait_us == 0) c->wait_us = 1; /* measured: 0 means none */
    pst_quant_observe(&c->waits, wait);
  }
  /* The chunk's span on the timeline begins with its header (trainer.c ends it). */
  if (h->type == PSTRAIN__MSG_TYPE__WEIGHTS && pst_tl_on()) c->tl_chunk_at = pst_now();
  return c->cbs->on_payload(c, h, dst);
}

static int rd_frame(pst_reader *r, const Pstrain__Header *h) {
  wk_client *c = r->data;
  return c->cbs->on_frame(c, h);
}

static const pst_reader_cbs reader_cbs = {rd_payload, rd_frame};

/* ---- closing ---- */

/* Closed once the connection, the timer and any name lookup are done with: a lookup that
 * uv_cancel took off the thread pool's queue still calls back (UV_EAI_CANCELED), and the
 * client must not be started again over its request before it has. The timer counts as
 * done only once its close callback has run, not when uv_close was called: the cancelled
 * lookup's callback comes in the same loop turn before the closing handles' callbacks, and
 * a client started again from on_closed then (a reconnection) would initialise a timer that
 * libuv still holds on its closing list (an assertion in uv__finish_close, seen in CI). */
static void finish_close(wk_client *c) {
  if (c->tcp_open || c->resolving || c->timer_open) return;
  if (c->state == WK_CONN_CLOSED) return;
  c->state = WK_CONN_CLOSED;
  /* The regions were this connection's: the next one offers a new one. */
  pst_ring_free(&c->ring);
  c->ring_on = 0;
  c->cbs->on_closed(c, c->close_why);
}

static void on_handle_closed(uv_handle_t *h) {
  wk_client *c = h->data;
  if (h == (uv_handle_t *)&c->io.tcp) c->tcp_open = 0;
  if (h == (uv_handle_t *)&c->timer) c->timer_open = 0;
  finish_close(c);
}

void wk_client_close(wk_client *c, const char *why) {
  if (c->state == WK_CONN_CLOSING || c->state == WK_CONN_CLOSED) return;
  if (why) {
    snprintf(c->close_buf, sizeof c->close_buf, "%s", why);
    c->close_why = c->close_buf;
  } else {
    c->close_why = NULL;
  }
  int resolving = c->state == WK_CONN_RESOLVING;
  c->state = WK_CONN_CLOSING;
  if (resolving) uv_cancel((uv_req_t *)&c->gai);
  if (c->tcp_open && !uv_is_closing((uv_handle_t *)&c->io.tcp))
    pst_tls_stream_close(&c->io, on_handle_closed);
  if (!uv_is_closing((uv_handle_t *)&c->timer)) uv_close((uv_handle_t *)&c->timer, on_handle_closed);
}

/* ---- connecting, with retries ---- */

static int closing(const wk_client *c);

static void on_backoff_timer(uv_timer_t *t) {
  wk_client *c = t->data;
  if (c->state == WK_CONN_BACKOFF) try_connect(c);
}

static void give_up(wk_client *c) {
  char why[512]; /* host (255) + last_error (127) + the words always fit */
  snprintf(why, sizeof why, "cannot reach the ps at %s:%d after %d attempt%s: %s", c->host,
           c->port, c->attempts, c->attempts == 1 ? "" : "s", c->last_error);
  wk_client_close(c, why);
}

/* The attempt in flight has run into the deadline. Without this a connect whose SYNs are
 * dropped (a firewall, a host that went away) would wait out the kernel's own retries,
 * about two minutes, whatever --connect-timeout says. */
static void on_attempt_timer(uv_timer_t *t) {
  wk_client *c = t->data;
  if (c->state != WK_CONN_RESOLVING && c->state != WK_CONN_CONNECTING) return;
  snprintf(c->last_error, sizeof c->last_error, "%s",
           c->state == WK_CONN_RESOLVING ? "name resolution timed out" : "connection timed out");
  give_up(c);
}

static void on_tcp_closed_for_retry(uv_handle_t *h) {
  wk_client *c = h->data;
  c->tcp_open = 0;
  if (c->state == WK_CONN_CLOSING) {
    on_handle_closed(h);
    return;
  }
  /* The attempt made at the deadline was the last: the timer that brought it may fire up to
   * a millisecond early (the loop's clock counts whole milliseconds), and retrying whatever
   * sliver was left would fire a burst of attempts with no wait between them. */
  double left = c->deadline - pst_now();
  if (left <= 0 || c->last_attempt) {
    give_up(c);
    return;
  }
  if (c->attempts == 1 || c->attempts % 10 == 0)
    LOG_INFO("ps at %s:%d not reachable yet (%s); retrying", c->host, c->port, c->last_error);
  /* The last wait is cut short so that one more attempt is made right at the deadline:
   * giving up a whole backoff early would make --connect-timeout 3 mean 1.5 s. */
  uint64_t wait_ms = c->backoff_ms;
  if ((double)wait_ms >= left * 1000.0) {
    wait_ms = (uint64_t)(left * 1000.0);
    c->last_attempt = 1;
  }
  c->state = WK_CONN_BACKOFF;
  uv_timer_start(&c->timer, on_backoff_timer, wait_ms, 0);
  c->backoff_ms = c->backoff_ms * 2 > 2000 ? 2000 : c->backoff_ms * 2;
}

static void retry_later(wk_client *c, int status) {
  snprintf(c->last_error, sizeof c->last_error, "%s", uv_strerror(status));
  if (c->tcp_open)
    pst_tls_stream_close(&c->io, on_tcp_closed_for_retry);
  else
    on_tcp_closed_for_retry((uv_handle_t *)&c->io.tcp);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  wk_client *c = h->data;
  (void)suggested;
  char *base;
  size_t len;
  if (c->state == WK_CONN_AUTH) {
    /* Just the ps's challenge: frames after it stay in the socket for the reader. */
    base = (char *)c->hs + c->hs_got;
    len = PST_AUTH_CHALLENGE_LEN - c->hs_got;
  } else {
    pst_reader_buffer(&c->rd, &base, &len);
  }
  *buf = uv_buf_init(base, (unsigned)len);
}

/* The handshake's raw bytes (no frame). */
static int send_raw(wk_client *c, const void *bytes, size_t n) {
  c->last_tx = pst_now();
  return pst_send_copy(&c->io, bytes, n);
}

/* The ps's challenge is in: check its proof, send ours, and the connection is open. */
static void auth_read(wk_client *c, size_t n) {
  c->hs_got += (uint32_t)n;
  if (c->hs_got >= 4 && memcmp(c->hs, "PSTR", 4) == 0) {
    /* A frame instead of a challenge: a ps without a cluster secret refusing the handshake
     * (it says so in an ERROR frame). Trying again would not mend it. */
    c->auth_refused = 1;
    wk_client_close(c, "the ps runs without a cluster secret, and this worker has one: start "
                       "both with the cluster's --secret-file, or neither");
    return;
  }
  if (c->hs_got < PST_AUTH_CHALLENGE_LEN) return;
  uint8_t proof[PST_AUTH_PROOF_LEN];
  if (pst_auth_respond(&c->auth, c->secret, c->hs, proof) < 0) {
    wk_client_close(c, "the ps failed authentication: it does not hold this cluster secret");
    return;
  }
  c->state = WK_CONN_OPEN;
  if (send_raw(c, proof, sizeof proof) < 0) {
    wk_client_close(c, "cannot send the authentication proof");
    return;
  }
  c->cbs->on_connected(c);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  wk_client *c = s->data;
  (void)buf;
  if (nread == 0 || (c->state != WK_CONN_OPEN && c->state != WK_CONN_AUTH)) return;
  c->last_rx = pst_now();
  if (nread > 0) c->heard = 1;
  if (nread < 0 && !c->heard && (nread == UV_EOF || nread == UV_ECONNRESET))
    c->closed_unheard = 1;
  if (nread < 0) {
    pst_tls_failure tf = pst_tls_stream_failure(&c->io);
    if (tf != PST_TLS_FAIL_NONE) {
      /* TLS's own reason, in either state (the authentication's sentence would hide it): "TLS
       * handshake failed: the peer's certificate is not signed by our CA (...)", or the ps's
       * refusal of ours, "TLS session failed: the peer refused the session: tlsv1 alert
       * unknown ca (...)", which a TLS 1.3 client hears after its own handshake finished. */
      char why[512];
      snprintf(why, sizeof why, "the ps at %.200s:%d: %s", c->host, c->port,
               pst_tls_stream_strerror(&c->io, (int)nread));
      c->tls_refused = tf == PST_TLS_FAIL_REFUSED || tf == PST_TLS_FAIL_PLAINTEXT;
      wk_client_close(c, why);
      return;
    }
    wk_client_close(c, c->state == WK_CONN_AUTH
                           ? (c->tls ? "the ps closed the connection during authentication (it "
                                       "runs without a cluster secret, or with another one)"
                                     : "the ps closed the connection during authentication (it "
                                       "runs without a cluster secret, with another one, or "
                                       "requires TLS)")
                       : nread == UV_EOF ? "the ps closed the connection"
                                         : uv_strerror((int)nread));
    return;
  }
  if (c->state == WK_CONN_AUTH) {
    auth_read(c, (size_t)nread);
    return;
  }
  int rc = pst_reader_feed(&c->rd, (size_t)nread);
  if (rc < 0 && c->state == WK_CONN_OPEN) {
    char why[256];
    snprintf(why, sizeof why, "bad frame from the ps: %s", c->rd.err);
    wk_client_close(c, why);
  }
}

/* A request that completes after wk_client_close (a signal during connecting) must not
 * touch the handles again. */
static int closing(const wk_client *c) {
  return c->state == WK_CONN_CLOSING || c->state == WK_CONN_CLOSED;
}

static void on_connect(uv_connect_t *req, int status) {
  wk_client *c = req->data;
  if (closing(c)) return;
  if (status < 0) {
    retry_later(c, status);
    return;
  }
  uv_timer_stop(&c->timer); /* the attempt's deadline */
  c->last_rx = c->last_tx = pst_now();
  c->heard = c->closed_unheard = 0;
  uv_tcp_nodelay(&c->io.tcp, 1);
  /* With TLS the handshake starts with the first read_start; what is written before it
   * finished (the auth hello, or the HELLO on_connected sends) waits for it. */
  if (c->secret && c->secret->set) {
    uint8_t hello[PST_AUTH_HELLO_LEN];
    pst_auth_hello(&c->auth, hello);
    c->state = WK_CONN_AUTH;
    c->hs_got = 0;
    pst_tls_stream_read_start(&c->io, on_alloc, on_read);
    if (send_raw(c, hello, sizeof hello) < 0)
      wk_client_close(c, "cannot start authenticating with the ps");
    return;
  }
  c->state = WK_CONN_OPEN;
  pst_tls_stream_read_start(&c->io, on_alloc, on_read);
  c->cbs->on_connected(c);
}

/* The TLS handshake finished (a refusal by the ps comes later, as a read error): what the
 * session is, for the registration's log line. */
static void on_handshake(pst_tls_stream *io, int status) {
  wk_client *c = io->tcp.data;
  if (status == 0) pst_tls_stream_describe(io, c->session, sizeof c->session);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res) {
  wk_client *c = req->data;
  c->resolving = 0;
  if (closing(c)) {
    if (res) uv_freeaddrinfo(res);
    finish_close(c);
    return;
  }
  if (status < 0) {
    char why[400];
    snprintf(why, sizeof why, "cannot resolve the ps host '%s': %s", c->host, uv_strerror(status));
    /* Retried with backoff until the deadline, as a refused connect is: a resolver's
     * passing failure, and a name that does not exist yet. In a cluster a name exists
     * while its pod does: a StatefulSet's pstrain-ps-0.pstrain-ps has no DNS record before
     * the pod first runs, nor while it is being replaced, and the worker must wait for it
     * rather than fail (at start) or reconnect in a loop with no pause (after a loss). */
    if (status == UV_EAI_AGAIN || status == UV_EAI_NONAME || status == UV_EAI_NODATA ||
        status == UV_EAI_FAIL) {
      retry_later(c, status);
    } else {
      wk_client_close(c, why);
    }
    return;
  }
  c->state = WK_CONN_CONNECTING;
  char why[256];
  c->session[0] = '\0';
  int rc = pst_tls_stream_init(&c->io, c->loop, c->tls, c->tls_name, why, sizeof why);
  c->io.tcp.data = c;
  c->tcp_open = 1;
  if (rc < 0) {
    uv_freeaddrinfo(res);
    wk_client_close(c, why);
    return;
  }
  pst_tls_stream_on_handshake(&c->io, on_handshake);
  c->connect_req.data = c;
  rc = uv_tcp_connect(&c->connect_req, &c->io.tcp, res->ai_addr, on_connect);
  uv_freeaddrinfo(res);
  if (rc < 0) retry_later(c, rc);
}

static void try_connect(wk_client *c) {
  c->attempts++;
  c->state = WK_CONN_RESOLVING;
  /* Each attempt may take until the deadline; the one made at the deadline still gets a
   * short window, enough for an answer (or a refusal) from a reachable host. */
  double left = c->deadline - pst_now();
  uint64_t attempt_ms = left * 1000.0 > WK_LAST_ATTEMPT_MS ? (uint64_t)(left * 1000.0)
                                                            : WK_LAST_ATTEMPT_MS;
  uv_timer_start(&c->timer, on_attempt_timer, attempt_ms, 0);
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  char port[16];
  snprintf(port, sizeof port, "%d", c->port);
  c->gai.data = c;
  int rc = uv_getaddrinfo(c->loop, &c->gai, on_resolved, c->host, port, &hints);
  c->resolving = rc == 0;
  if (rc < 0) {
    char why[400];
    snprintf(why, sizeof why, "cannot resolve the ps host '%s': %s", c->host, uv_strerror(rc));
    wk_client_close(c, why);
  }
}

int wk_client_start(wk_client *c, uv_loop_t *loop, const char *host, int port,
                    double timeout_s, const pst_secret *secret, pst_tls_ctx *tls,
                    const char *tls_name, const wk_client_cbs *cbs, void *data) {
  memset(c, 0, sizeof *c);
  c->loop = loop;
  c->secret = secret;
  c->tls = tls;
  c->tls_name = tls_name && tls_name[0] ? tls_name : NULL;
  /* A retry before the first stream exists (a resolver's EAI_AGAIN) finds the client here. */
  c->io.tcp.data = c;
  c->cbs = cbs;
  c->data = data;
  snprintf(c->host, sizeof c->host, "%s", host);
  c->port = port;
  c->deadline = pst_now() + timeout_s;
  c->backoff_ms = 100;
  int rc = pst_reader_init(&c->rd, &reader_cbs, c, PST_WIRE_MAX_PAYLOAD);
  if (rc < 0) return rc;
  uv_timer_init(loop, &c->timer);
  c->timer.data = c;
  c->timer_open = 1;
  /* The loop's clock is cached: after seconds of work outside it (the worker loads its data
   * before the loop runs) the backoff timers would all be due at once. */
  uv_update_time(loop);
  try_connect(c);
  return 0;
}
