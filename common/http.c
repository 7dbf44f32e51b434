#include "common/http.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cluster.h"
#include "common/config.h"
#include "common/log.h"
#include "common/proc.h"

typedef enum {
  HC_READING = 0, /* the request is arriving */
  HC_WRITING,     /* the response is queued */
  HC_DRAINING,    /* sent and shut down for writing: waiting for the client's EOF */
  HC_CLOSING,     /* uv_close under way on both handles */
} hc_state;

struct pst_http_conn {
  uv_tcp_t tcp;
  uv_timer_t timer;       /* PST_HTTP_TIMEOUT_MS from accept to close */
  uv_write_t wreq;
  uv_shutdown_t sreq;
  hc_state state;
  int open_handles;       /* freed when both handles' close callbacks have run */
  int eof;                /* the client's EOF (or a read error) came while writing */
  pst_http *srv;
  pst_http_conn *next, *prev;
  char peer[64];          /* "ip:port", for log lines */
  char head[256];         /* the status line and headers of the response */
  pst_text body;
  size_t req_len;
  char req[PST_HTTP_MAX_REQUEST + 1];
};

/* ---- listen address ---- */

int pst_http_parse_listen(const char *spec, char *ip, size_t iplen, int *port, char *err,
                          size_t errlen) {
  char host[256];
  int64_t p = 0;
  /* A bare port: digits only (a number too large for any integer is one too). */
  if (spec[0] && strspn(spec, "0123456789") == strlen(spec)) {
    if (pst_parse_int(spec, 0, 65535, &p) < 0) {
      snprintf(err, errlen, "--metrics-listen: port %.20s is not between 0 and 65535", spec);
      return -EINVAL;
    }
    snprintf(host, sizeof host, "127.0.0.1");
    *port = (int)p;
  } else if (pst_parse_hostport(spec, host, sizeof host, port) < 0) {
    snprintf(err, errlen, "--metrics-listen: '%.200s' is not ADDR:PORT or PORT", spec);
    return -EINVAL;
  }
  return pst_resolve_listen(host, ip, iplen, err, errlen);
}

/* ---- connections ---- */

static void unlink_conn(pst_http_conn *c) {
  pst_http *h = c->srv;
  if (c->prev) c->prev->next = c->next;
  else h->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  else h->tail = c->prev;
  c->next = c->prev = NULL;
  h->n_conns--;
}

static void on_handle_closed(uv_handle_t *hd) {
  pst_http_conn *c = hd->data;
  if (--c->open_handles > 0) return;
  pst_text_free(&c->body);
  free(c);
}

/* Closes both handles (once); the struct goes in the second close callback. */
static void conn_close(pst_http_conn *c) {
  if (c->state == HC_CLOSING) return;
  c->state = HC_CLOSING;
  unlink_conn(c);
  uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
  uv_close((uv_handle_t *)&c->timer, on_handle_closed);
}

#define HTTP_STR2(x) #x
#define HTTP_STR(x) HTTP_STR2(x)

/* Lines about bad requests: 10 per 10 s, then a count of what was suppressed. */
#define BAD_LOG_BURST 10
#define BAD_LOG_PERIOD 10.0

/* A bad request or client: counted, and one (rate-limited) line naming the peer. */
static void count_bad(pst_http_conn *c, const char *why) {
  c->srv->bad_requests++;
  if (pst_ratelimit_ok(&c->srv->log_rl, BAD_LOG_BURST, BAD_LOG_PERIOD))
    LOG_WARN("metrics port %s: %s from %s; closing it", c->srv->addr, why, c->peer);
}

static void on_timeout(uv_timer_t *t) {
  pst_http_conn *c = t->data;
  /* Only a client still sending its request is one that misbehaved: a slow reader of its
   * answer may just be slow. Either way the connection goes now. */
  if (c->state == HC_READING) count_bad(c, "no complete request in time");
  conn_close(c);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  (void)req;
  (void)status;
  /* The close follows the client's EOF (on_read), or the timer. */
}

static void on_write(uv_write_t *req, int status) {
  pst_http_conn *c = req->data;
  if (c->state == HC_CLOSING) return;
  if (status < 0) {
    conn_close(c);
    return;
  }
  if (c->eof) {
    conn_close(c);
    return;
  }
  /* Shut down for writing and wait for the client's EOF: closing while its bytes are
   * still unread would reset the connection and could lose the answer. */
  c->state = HC_DRAINING;
  c->sreq.data = c;
  if (uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, on_shutdown) < 0) conn_close(c);
}

static const char *reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

/* Queues the response (status line, headers, body); the connection closes after it. */
static void respond(pst_http_conn *c, int status, const char *content_type, int head_only) {
  /* A 503 keeps the handler's text: why the daemon is not ready (/readyz). */
  if (status != 200 && !(status == 503 && c->body.len > 0 && !c->body.failed)) {
    pst_text_free(&c->body);
    pst_text_init(&c->body, 256);
    pst_text_printf(&c->body, "%d %s\n", status, reason_phrase(status));
    content_type = "text/plain; charset=utf-8";
  } else {
    c->srv->requests++;
  }
  snprintf(c->head, sizeof c->head,
           "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
           "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
           status, reason_phrase(status), content_type, c->body.len);
  uv_buf_t bufs[2] = {uv_buf_init(c->head, (unsigned)strlen(c->head)),
                      uv_buf_init(c->body.data ? c->body.data : "",
                                  head_only ? 0u : (unsigned)c->body.len)};
  c->state = HC_WRITING;
  c->wreq.data = c;
  /* Reading goes on (and discards), so that the client's EOF after the answer is seen. */
  if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, bufs, 2, on_write) < 0) conn_close(c);
}

/* A complete request in c->req: answers it. */
static void handle_request(pst_http_conn *c) {
  /* The request line: METHOD SP TARGET SP HTTP/1.x */
  char *eol = strpbrk(c->req, "\r\n");
  if (eol) *eol = '\0';
  char method[8], target[1024], proto[16];
  char extra;
  if (sscanf(c->req, "%7s %1023s %15s %c", method, target, proto, &extra) != 3 ||
      strncmp(proto, "HTTP/1.", 7) != 0 || target[0] != '/') {
    count_bad(c, "a malformed request line");
    respond(c, 400, NULL, 0);
    return;
  }
  int head_only = !strcmp(method, "HEAD");
  if (strcmp(method, "GET") != 0 && !head_only) {
    count_bad(c, "a request other than GET or HEAD");
    respond(c, 405, NULL, 0);
    return;
  }
  char *q = strchr(target, '?');
  if (q) *q = '\0';
  pst_text_init(&c->body, PST_HTTP_MAX_BODY);
  const char *type = "text/plain; charset=utf-8";
  int status = c->srv->handler(c->srv->arg, target, &c->body, &type);
  if (c->body.failed) {
    count_bad(c, "a response too large or out of memory");
    status = 500;
  }
  respond(c, status, type, head_only);
}

static void on_alloc(uv_handle_t *hd, size_t suggested, uv_buf_t *buf) {
  pst_http_conn *c = hd->data;
  (void)suggested;
  if (c->state == HC_READING) {
    /* One byte past the cap is room to see that a request is too long. */
    *buf = uv_buf_init(c->req + c->req_len, (unsigned)(PST_HTTP_MAX_REQUEST + 1 - c->req_len));
  } else {
    /* After the request: whatever else arrives is read into the same buffer and dropped. */
    *buf = uv_buf_init(c->req, (unsigned)sizeof c->req);
  }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  pst_http_conn *c = s->data;
  (void)buf;
  if (c->state == HC_CLOSING || nread == 0) return;
  if (nread < 0) {
    /* EOF or an error. While the answer is being written, the write callback closes. */
    if (c->state == HC_READING) count_bad(c, "a connection closed before a complete request");
    if (c->state != HC_WRITING) {
      conn_close(c);
    } else {
      c->eof = 1;
      uv_read_stop(s);
    }
    return;
  }
  if (c->state != HC_READING) return; /* past the request: dropped */
  size_t scan_from = c->req_len >= 3 ? c->req_len - 3 : 0;
  c->req_len += (size_t)nread;
  c->req[c->req_len] = '\0';
  if (memchr(c->req, '\0', c->req_len)) {
    count_bad(c, "a NUL byte in a request");
    respond(c, 400, NULL, 0);
    return;
  }
  if (strstr(c->req + scan_from, "\r\n\r\n") || strstr(c->req + scan_from, "\n\n")) {
    handle_request(c);
    return;
  }
  if (c->req_len > PST_HTTP_MAX_REQUEST) {
    count_bad(c, "a request over " HTTP_STR(PST_HTTP_MAX_REQUEST) " bytes");
    respond(c, 431, NULL, 0);
  }
}

static void free_handle(uv_handle_t *h) { free(h); }

static void on_connection(uv_stream_t *ls, int status) {
  pst_http *h = ls->data;
  if (status < 0) return;
  pst_http_conn *c = calloc(1, sizeof *c);
  if (!c) {
    /* Take the connection off the backlog anyway, and close it at once. */
    uv_tcp_t *tmp = malloc(sizeof *tmp);
    if (!tmp) return;
    uv_tcp_init(h->loop, tmp);
    if (uv_accept(ls, (uv_stream_t *)tmp) == 0) { /* nothing to do but close */ }
    uv_close((uv_handle_t *)tmp, free_handle);
    return;
  }
  c->srv = h;
  uv_tcp_init(h->loop, &c->tcp);
  uv_timer_init(h->loop, &c->timer);
  c->tcp.data = c->timer.data = c;
  c->open_handles = 2;
  c->state = HC_READING;
  uv_unref((uv_handle_t *)&c->tcp);
  uv_unref((uv_handle_t *)&c->timer);
  /* Linked before anything can close it (conn_close unlinks). */
  c->prev = h->tail;
  if (h->tail) h->tail->next = c;
  else h->conns = c;
  h->tail = c;
  h->n_conns++;
  if (uv_accept(ls, (uv_stream_t *)&c->tcp) < 0) {
    conn_close(c);
    return;
  }
  pst_tcp_peer_name(&c->tcp, c->peer, sizeof c->peer);
  if (h->n_conns > PST_HTTP_MAX_CONNS) {
    /* Make room: the oldest connection that has not sent a whole request yet, else the
     * oldest whose answer has gone and whose client has not closed yet, else this one (every
     * other is being answered). */
    pst_http_conn *victim = c;
    for (int pass = 0; pass < 2 && victim == c; pass++)
      for (pst_http_conn *o = h->conns; o; o = o->next)
        if (o != c && o->state == (pass == 0 ? HC_READING : HC_DRAINING)) {
          victim = o;
          break;
        }
    h->evicted++;
    conn_close(victim);
    if (victim == c) return;
  }
  uv_timer_start(&c->timer, on_timeout, h->timeout_ms, 0);
  if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0) conn_close(c);
}

int pst_http_start(pst_http *h, uv_loop_t *loop, const char *spec, pst_http_handler handler,
                   void *arg, char *err, size_t errlen) {
  memset(h, 0, sizeof *h);
  h->loop = loop;
  h->handler = handler;
  h->arg = arg;
  h->timeout_ms = PST_HTTP_TIMEOUT_MS;
  char ip[64];
  int port, rc;
  if ((rc = pst_http_parse_listen(spec, ip, sizeof ip, &port, err, errlen)) < 0) return rc;
  struct sockaddr_storage sa;
  if (uv_ip4_addr(ip, port, (struct sockaddr_in *)&sa) != 0 &&
      uv_ip6_addr(ip, port, (struct sockaddr_in6 *)&sa) != 0) {
    snprintf(err, errlen, "--metrics-listen: '%s' is not an IP address", ip);
    return -EINVAL;
  }
  uv_tcp_init(loop, &h->listener);
  h->listener.data = h;
  h->listening = 1;
  rc = uv_tcp_bind(&h->listener, (struct sockaddr *)&sa, 0);
  if (rc == 0) rc = uv_listen((uv_stream_t *)&h->listener, 64, on_connection);
  if (rc < 0) {
    snprintf(err, errlen, "--metrics-listen: cannot listen on %s:%d: %s", ip, port,
             uv_strerror(rc));
    pst_http_close(h);
    return rc;
  }
  uv_unref((uv_handle_t *)&h->listener);
  /* The port the kernel chose, for a bare port 0 (tests, and a daemon's log line). */
  struct sockaddr_storage bound;
  int blen = sizeof bound;
  if (uv_tcp_getsockname(&h->listener, (struct sockaddr *)&bound, &blen) == 0)
    port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                             : ((struct sockaddr_in *)&bound)->sin_port);
  snprintf(h->addr, sizeof h->addr, strchr(ip, ':') ? "[%s]:%d" : "%s:%d", ip, port);
  return 0;
}

void pst_http_close(pst_http *h) {
  while (h->conns) conn_close(h->conns);
  if (h->listening) {
    h->listening = 0;
    uv_close((uv_handle_t *)&h->listener, NULL);
  }
}

/* ---- a daemon's metrics port ---- */

/* The figures of the process and of this port, the same in every daemon. */
static void render_common(const pst_http *h, pst_text *t) {
  long rss = pst_proc_status_kib((long)getpid(), "VmRSS");
  pst_prom_gauge(t, "pstrain_resident_memory_bytes", "Resident memory of this process.",
                 rss >= 0 ? (double)rss * 1024.0 : 0);
  pst_prom_counter(t, "pstrain_cpu_seconds_total", "CPU time of this process.",
                   pst_proc_self_cpu_s());
  pst_prom_gauge(t, "pstrain_metrics_open_connections", "Open connections on the metrics port.",
                 h->n_conns);
  pst_prom_counter(t, "pstrain_metrics_requests_total", "Requests answered with 200.",
                   (double)h->requests);
  pst_prom_counter(t, "pstrain_metrics_bad_requests_total",
                   "Requests refused (malformed, too long, too slow).", (double)h->bad_requests);
}

static int metrics_handler(void *arg, const char *path, pst_text *body, const char **type) {
  pst_metrics_port *p = arg;
  if (!strcmp(path, "/healthz")) {
    /* Answered from the daemon's loop, so an answer means the loop turns: what systemd's
     * watchdog checks, for a liveness probe. */
    pst_text_printf(body, "ok\n");
    return 200;
  }
  if (strcmp(path, "/metrics") != 0)
    return p->other ? p->other(p->other_arg, path, body, type) : 404;
  p->render(p->arg, body);
  render_common(&p->http, body);
  *type = "text/plain; version=0.0.4; charset=utf-8";
  return 200;
}

int pst_metrics_port_start(pst_metrics_port *p, uv_loop_t *loop, const char *spec,
                           pst_http_render render, const void *arg, char *err, size_t errlen) {
  memset(p, 0, sizeof *p);
  p->render = render;
  p->arg = arg;
  if (!spec || !spec[0]) return 0;
  int rc = pst_http_start(&p->http, loop, spec, metrics_handler, p, err, errlen);
  if (rc < 0) return rc;
  p->on = 1;
  LOG_INFO("metrics on http://%s/metrics", p->http.addr);
  /* Read-only figures, but without authentication: say so when others can reach them. */
  if (strncmp(p->http.addr, "127.", 4) != 0 && strncmp(p->http.addr, "[::1]", 5) != 0)
    LOG_WARN("the metrics port %s has no authentication: anyone who reaches it can read the "
             "job's figures", p->http.addr);
  return 0;
}

void pst_metrics_port_close(pst_metrics_port *p) {
  if (p->on) pst_http_close(&p->http);
  p->on = 0;
}
