/* A minimal HTTP/1.x server for GET requests on the daemon's own libuv loop, for /metrics
 * and the status endpoints of pstrain-ps and pstrain-worker.
 *
 * Why not libmicrohttpd: it would run either its own thread, which then reads the
 * training state while the loop changes it (every figure would need a lock or a copy),
 * or an external select loop that libuv cannot drive without polling its descriptors
 * by hand. The requests a scraper sends are one short GET, so this server does only that,
 * on the loop that owns the state, with hard caps that a hostile client cannot get past:
 *
 *   - a request (line and headers) of at most PST_HTTP_MAX_REQUEST bytes, in one
 *     buffer per connection allocated with it (no growth): past that, 431 and close;
 *   - PST_HTTP_TIMEOUT_MS from accept to the end of the response: a client that sends
 *     slowly or never reads its answer is closed then;
 *   - at most PST_HTTP_MAX_CONNS connections: another one closes the oldest that has not
 *     sent its request yet (a flood of idle sockets cannot lock a real scraper out), else
 *     the oldest already answered but not yet closed by its client, or, when every one is
 *     being answered, the newcomer;
 *   - one response per connection, then a graceful close (Connection: close);
 *   - anything but a well-formed GET: 400 or 405, and only that connection closes.
 *
 * Every handle is unreferenced, so the server never keeps the loop alive: the daemon's
 * loop ends when its real work does, and pst_http_close() then closes what is left (one
 * more uv_run lets the close callbacks run before uv_loop_close), as with pst_heartbeat. */
#ifndef PSTRAIN_COMMON_HTTP_H
#define PSTRAIN_COMMON_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/log.h"
#include "common/prom.h"

#define PST_HTTP_MAX_REQUEST 4096
#define PST_HTTP_TIMEOUT_MS 5000
#define PST_HTTP_MAX_CONNS 32
/* The largest response body a handler may produce (a guard against a runaway renderer). */
#define PST_HTTP_MAX_BODY (8u << 20)

/* Answers GET path (the query string removed): fills body, sets *content_type (a static
 * string) and returns the HTTP status (200, 404...). */
typedef int (*pst_http_handler)(void *arg, const char *path, pst_text *body,
                                const char **content_type);

typedef struct pst_http_conn pst_http_conn;

typedef struct {
  uv_loop_t *loop;
  uv_tcp_t listener;
  int listening;          /* the listener was initialised (and is closed by pst_http_close) */
  pst_http_handler handler;
  void *arg;
  pst_http_conn *conns;   /* open connections, oldest first */
  pst_http_conn *tail;
  int n_conns;
  uint64_t timeout_ms;    /* PST_HTTP_TIMEOUT_MS; tests shorten it after pst_http_start */
  char addr[300];         /* "ip:port" it listens on (the port the kernel chose for port 0) */
  /* Figures of the server itself. */
  uint64_t requests;      /* answered with 200 */
  uint64_t bad_requests;  /* answered with 4xx, or closed for their size or time */
  uint64_t evicted;       /* closed to make room for a new connection */
  pst_ratelimit log_rl;   /* lines about bad requests: a client can provoke them */
} pst_http;

/* Parses an --metrics-listen value: "ADDR:PORT", "[V6]:PORT", or a bare "PORT" meaning
 * 127.0.0.1 (a metrics port is for the local scraper unless said otherwise; a bare 0 lets
 * the kernel choose, and h->addr then says which). Host names resolve. 0, or -EINVAL with
 * a one-line reason. */
int pst_http_parse_listen(const char *spec, char *ip, size_t iplen, int *port, char *err,
                          size_t errlen);
/* Starts listening on spec (as above). 0, or a negative code with the reason in err. */
int pst_http_start(pst_http *h, uv_loop_t *loop, const char *spec, pst_http_handler handler,
                   void *arg, char *err, size_t errlen);
/* Closes the listener and every connection; safe to call more than once, and on a server
 * that never started (zeroed). */
void pst_http_close(pst_http *h);

/* A daemon's metrics port: GET /metrics answers with what render writes (the Prometheus
 * text format) followed by the figures every daemon has (its resident memory and CPU time,
 * and the metrics port's own connections and requests); GET /healthz answers "ok" (from the
 * daemon's loop, so an answer says the loop turns: a liveness probe); anything else goes to
 * `other` (set after starting), or is a 404. A handler's 503 keeps its text (the reason). */
typedef void (*pst_http_render)(const void *arg, pst_text *out);

typedef struct {
  pst_http http;
  pst_http_render render;
  const void *arg;
  pst_http_handler other; /* every path but /metrics (the ps's dashboard), or NULL: 404 */
  void *other_arg;
  int on;                 /* listening (pst_metrics_port_close closes it) */
} pst_metrics_port;

/* Starts serving on spec; a NULL or empty spec does nothing (the port is off). Logs the
 * address. 0 or a negative code with the reason in err. */
int pst_metrics_port_start(pst_metrics_port *p, uv_loop_t *loop, const char *spec,
                           pst_http_render render, const void *arg, char *err, size_t errlen);
void pst_metrics_port_close(pst_metrics_port *p);

#endif
