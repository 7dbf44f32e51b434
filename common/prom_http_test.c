/* The Prometheus text writer (common/prom.h) and the metrics HTTP server (common/http.h),
 * in process: the exposition lines of gauges, counters, escaped labels and histograms, and
 * the server's rules against hostile clients, with plain non-blocking sockets on 127.0.0.1
 * and the server's loop turned between their steps:
 *
 *   1. a GET /metrics gets 200, the handler's body, Content-Length and Connection: close;
 *   2. garbage, a POST, a request past the size cap and a request with a NUL byte each get
 *      their 4xx and a close, and nothing else is disturbed;
 *   3. more idle connections than the cap: the oldest idle ones are closed, the count never
 *      passes the cap, and a real GET still gets its answer;
 *   4. a client that sends half a request and waits is closed at the timeout;
 *   5. 300 requests of random bytes (some of them starting like a real request, in random
 *      pieces): every one ends with an answer of 200, 400, 404, 405 or 431 and a close, and
 *      nothing is left open. */
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <uv.h>

#include "kernels/testing.h"
#include "common/http.h"
#include "common/prom.h"

static void test_text(void) {
  pst_text t;
  pst_text_init(&t, 0);
  pst_prom_gauge(&t, "pstrain_test_accuracy", "Test accuracy.", 0.875);
  pst_prom_counter(&t, "pstrain_steps_total", "Steps.", 12);
  char l[64];
  pst_prom_family(&t, "pstrain_info", PST_PROM_GAUGE, "Info.");
  pst_prom_sample(&t, "pstrain_info", pst_prom_label(l, sizeof l, "model", "a\"b\\c\nd"), 1);
  pst_prom_sample(&t, "pstrain_info", "x=\"1\"", NAN);
  pst_hist h;
  pst_hist_init_staleness(&h);
  pst_hist_observe(&h, 0);
  pst_hist_observe(&h, 0);
  pst_hist_observe(&h, 5);
  pst_hist_observe(&h, 1000);
  pst_prom_hist(&t, "pstrain_gradient_staleness", "Staleness.", &h);
  CHECK(!t.failed);
  const char *want[] = {
      "# HELP pstrain_test_accuracy Test accuracy.\n# TYPE pstrain_test_accuracy gauge\n"
      "pstrain_test_accuracy 0.875\n",
      "# TYPE pstrain_steps_total counter\npstrain_steps_total 12\n",
      "pstrain_info{model=\"a\\\"b\\\\c\\nd\"} 1\n",
      "pstrain_info{x=\"1\"} NaN\n",
      "# TYPE pstrain_gradient_staleness histogram\n"
      "pstrain_gradient_staleness_bucket{le=\"0\"} 2\n"
      "pstrain_gradient_staleness_bucket{le=\"1\"} 2\n",
      "pstrain_gradient_staleness_bucket{le=\"4\"} 2\n"
      "pstrain_gradient_staleness_bucket{le=\"6\"} 3\n",
      "pstrain_gradient_staleness_bucket{le=\"256\"} 3\n"
      "pstrain_gradient_staleness_bucket{le=\"+Inf\"} 4\n"
      "pstrain_gradient_staleness_sum 1005\npstrain_gradient_staleness_count 4\n",
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    int found = strstr(t.data, want[i]) != NULL;
    CHECK(found);
    if (!found) fprintf(stderr, "missing:\n%s\nin:\n%s\n", want[i], t.data);
  }
  /* A capped buffer fails instead of growing. */
  pst_text small;
  pst_text_init(&small, 64);
  for (int i = 0; i < 10; i++) pst_text_printf(&small, "%s", "0123456789");
  CHECK(small.failed);
  pst_text_free(&small);
  pst_text_free(&t);
}

/* ---- the server ---- */

static struct {
  uv_loop_t loop;
  pst_http http;
  int port;
  int handled;
} g;

static int handler(void *arg, const char *path, pst_text *body, const char **type) {
  g.handled++;
  if (!strcmp(path, "/readyz")) {
    pst_text_printf(body, "stopping\n");
    return 503;
  }
  if (strcmp(path, "/metrics") != 0) return 404;
  pst_prom_gauge(body, "pstrain_up", "Up.", 1);
  *type = "text/plain; version=0.0.4";
  return 200;
}

static void turn(int ms) {
  for (int i = 0; i < ms; i++) {
    uv_run(&g.loop, UV_RUN_NOWAIT);
    usleep(1000);
  }
}

static int connect_fd(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g.port)};
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  turn(5);
  return fd;
}

/* Reads what the server sent until EOF (or ms of turning); returns the bytes, -1 if the
 * connection is still open. */
static int read_all(int fd, char *buf, size_t len, int ms) {
  size_t n = 0;
  for (int i = 0; i < ms; i++) {
    uv_run(&g.loop, UV_RUN_NOWAIT);
    ssize_t r = recv(fd, buf + n, len - 1 - n, 0);
    if (r == 0 || (r < 0 && errno == ECONNRESET)) {
      buf[n] = '\0';
      return (int)n;
    }
    if (r > 0) n += (size_t)r;
    else usleep(1000);
  }
  buf[n] = '\0';
  return -1;
}

static int request(const char *req, size_t len, char *resp, size_t resplen) {
  int fd = connect_fd();
  if (fd < 0) return -1;
  send(fd, req, len, MSG_NOSIGNAL);
  int n = read_all(fd, resp, resplen, 2000);
  close(fd);
  turn(5);
  return n;
}

static void on_alive(uv_timer_t *t) { (void)t; }

static void test_server(void) {
  char err[256], resp[8192];
  uv_loop_init(&g.loop);
  /* The server's handles never keep a loop alive (a daemon's training does): this timer
   * plays that part, or uv_run would not poll at all. */
  uv_timer_t alive;
  uv_timer_init(&g.loop, &alive);
  uv_timer_start(&alive, on_alive, 1000000, 1000000);
  CHECK(pst_http_start(&g.http, &g.loop, "0", handler, NULL, err, sizeof err) == 0);
  g.http.timeout_ms = 300;
  const char *colon = strrchr(g.http.addr, ':');
  g.port = colon ? atoi(colon + 1) : 0;
  CHECK(g.port > 0 && !strncmp(g.http.addr, "127.0.0.1:", 10));

  /* 1. */
  const char *get = "GET /metrics?x=1 HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n";
  CHECK(request(get, strlen(get), resp, sizeof resp) > 0);
  CHECK(!strncmp(resp, "HTTP/1.1 200 OK\r\n", 17));
  CHECK(strstr(resp, "Connection: close\r\n") != NULL);
  CHECK(strstr(resp, "Content-Length: 59\r\n") != NULL);
  CHECK(strstr(resp, "\r\n\r\n# HELP pstrain_up Up.\n# TYPE pstrain_up gauge\npstrain_up 1\n"));
  const char *missing = "GET /nothing HTTP/1.0\n\n";
  CHECK(request(missing, strlen(missing), resp, sizeof resp) > 0);
  CHECK(!strncmp(resp, "HTTP/1.1 404 ", 13));
  /* A 503 keeps the handler's reason (a readiness probe's answer). */
  const char *ready = "GET /readyz HTTP/1.1\r\n\r\n";
  CHECK(request(ready, strlen(ready), resp, sizeof resp) > 0);
  CHECK(!strncmp(resp, "HTTP/1.1 503 Service Unavailable\r\n", 34));
  CHECK(strstr(resp, "\r\n\r\nstopping\n") != NULL);

  /* 2. */
  uint64_t bad0 = g.http.bad_requests;
  const char *garbage = "\x16\x03\x01 hello there\r\n\r\n";
  CHECK(request(garbage, strlen(garbage), resp, sizeof resp) > 0);
  CHECK(!strncmp(resp, "HTTP/1.1 400 ", 13));
  const char *post = "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n";
  CHECK(request(post, strlen(post), resp, sizeof resp) > 0);
  CHECK(!strncmp(resp, "HTTP/1.1 405 ", 13));
  static char big[PST_HTTP_MAX_REQUEST + 100];
  memcpy(big, "GET /metrics HTTP/1.1\r\nX: ", 26);
  memset(big + 26, 'a', sizeof big - 26);
  CHECK(request(big, sizeof big, resp, sizeof resp) > 0);
  CHECK(!strncmp(resp, "HTTP/1.1 431 ", 13));
  const char nul[] = "GET /met\0rics HTTP/1.1\r\n\r\n";
  CHECK(request(nul, sizeof nul - 1, resp, sizeof resp) > 0);
  CHECK(!strncmp(resp, "HTTP/1.1 400 ", 13));
  CHECK(g.http.bad_requests == bad0 + 4);
  CHECK(g.http.n_conns == 0);

  /* 3. A timeout that the idle ones do not reach while they are being opened, even under
   * ASan (5 ms per connection here). */
  g.http.timeout_ms = 1000;
  enum { IDLE = PST_HTTP_MAX_CONNS + 20 };
  int idle[IDLE];
  for (int i = 0; i < IDLE; i++) {
    idle[i] = connect_fd();
    CHECK(g.http.n_conns <= PST_HTTP_MAX_CONNS);
  }
  CHECK(g.http.n_conns == PST_HTTP_MAX_CONNS);
  CHECK(g.http.evicted >= 20);
  CHECK(request(get, strlen(get), resp, sizeof resp) > 0);
  CHECK(!strncmp(resp, "HTTP/1.1 200 OK\r\n", 17));
  /* The oldest were closed (EOF), the newest are still open. */
  CHECK(read_all(idle[0], resp, sizeof resp, 20) == 0);
  CHECK(read_all(idle[IDLE - 1], resp, sizeof resp, 20) == -1);

  /* 3b. Clients that read their answer and never close fill the cap: a new scrape still gets
   * through (the oldest answered one makes room). */
  for (int i = 0; i < IDLE; i++) close(idle[i]);
  turn(20);
  int lazy[PST_HTTP_MAX_CONNS];
  for (int i = 0; i < PST_HTTP_MAX_CONNS; i++) {
    lazy[i] = connect_fd();
    send(lazy[i], get, strlen(get), MSG_NOSIGNAL);
    ssize_t r = -1;
    for (int k = 0; k < 1000 && r <= 0; k++) {
      turn(1);
      r = recv(lazy[i], resp, sizeof resp, 0);
    }
    CHECK(r > 12 && !strncmp(resp, "HTTP/1.1 200 ", 13));
  }
  CHECK(g.http.n_conns == PST_HTTP_MAX_CONNS);
  CHECK(request(get, strlen(get), resp, sizeof resp) > 0);
  CHECK(!strncmp(resp, "HTTP/1.1 200 OK\r\n", 17));
  for (int i = 0; i < PST_HTTP_MAX_CONNS; i++) close(lazy[i]);
  turn(20);
  CHECK(g.http.n_conns == 0);
  for (int i = 0; i < IDLE; i++) idle[i] = connect_fd();

  /* 4. Everyone left is idle past the timeout. */
  int slow = connect_fd();
  send(slow, "GET /met", 8, MSG_NOSIGNAL);
  CHECK(read_all(slow, resp, sizeof resp, 3000) == 0);
  CHECK(read_all(idle[IDLE - 1], resp, sizeof resp, 100) == 0);
  turn(20);
  CHECK(g.http.n_conns == 0);
  close(slow);
  for (int i = 0; i < IDLE; i++)
    if (idle[i] >= 0) close(idle[i]);

  /* 5. */
  uint64_t seed = 12345;
  static char junk[6000];
  for (int i = 0; i < 300; i++) {
    size_t n = (size_t)(t_rand64(&seed) % sizeof junk);
    for (size_t k = 0; k < n; k++) {
      uint64_t r = t_rand64(&seed);
      /* Mostly printable, with the bytes a parser trips on: CR, LF, space, NUL, '?'. */
      static const char special[] = "\r\n \0?/:";
      junk[k] = r % 4 == 0 ? special[(r >> 8) % (sizeof special - 1)] : (char)(32 + (r >> 16) % 95);
    }
    if (i % 3 == 0 && n > 20) memcpy(junk, "GET /metrics HTTP/1.1\r\n", 23);
    if (i % 5 == 0 && n > 4) memcpy(junk + n - 4, "\r\n\r\n", 4);
    int fd = connect_fd();
    for (size_t off = 0; off < n;) { /* in pieces, to exercise the reassembly */
      size_t piece = 1 + (size_t)(t_rand64(&seed) % 700);
      if (piece > n - off) piece = n - off;
      if (send(fd, junk + off, piece, MSG_NOSIGNAL) < 0) break;
      off += piece;
      uv_run(&g.loop, UV_RUN_NOWAIT);
    }
    shutdown(fd, SHUT_WR); /* a request that never ends gets its close from the EOF */
    int got = read_all(fd, resp, sizeof resp, 2000);
    close(fd);
    int ok = got == 0 || (got > 12 && (!strncmp(resp, "HTTP/1.1 200 ", 13) ||
                                       !strncmp(resp, "HTTP/1.1 400 ", 13) ||
                                       !strncmp(resp, "HTTP/1.1 404 ", 13) ||
                                       !strncmp(resp, "HTTP/1.1 405 ", 13) ||
                                       !strncmp(resp, "HTTP/1.1 431 ", 13)));
    CHECK(ok);
    if (!ok) fprintf(stderr, "random request %d (%zu bytes): answer %d '%.40s'\n", i, n, got, resp);
  }
  turn(20);
  CHECK(g.http.n_conns == 0);

  pst_http_close(&g.http);
  uv_close((uv_handle_t *)&alive, NULL);
  uv_run(&g.loop, UV_RUN_DEFAULT);
  CHECK(uv_loop_close(&g.loop) == 0);
}

/* Quantiles within 1% of the values they stand for, whatever the order of observation. */
static void test_quant(void) {
  static pst_quant q;
  memset(&q, 0, sizeof q);
  CHECK(pst_quant_value(&q, 0.5) == 0);
  /* 1..1000 ms, shuffled by a stride coprime with 1000. */
  for (int i = 0; i < 1000; i++) pst_quant_observe(&q, ((i * 617) % 1000 + 1) * 1e-3);
  CHECK(q.n == 1000);
  CHECK(fabs(pst_quant_value(&q, 0.5) - 0.500) <= 0.005);
  CHECK(fabs(pst_quant_value(&q, 0.99) - 0.990) <= 0.0099);
  CHECK(fabs(pst_quant_value(&q, 1.0) - 1.000) <= 0.01);
  CHECK(fabs(pst_quant_value(&q, 0) - 0.001) <= 0.00001);
  /* Outside the range: counted at its ends. */
  memset(&q, 0, sizeof q);
  pst_quant_observe(&q, 0);
  pst_quant_observe(&q, 1e9);
  CHECK(q.n == 2 && pst_quant_value(&q, 0.5) == 1e-6 && pst_quant_value(&q, 1) > 2000);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  test_quant();
  test_text();
  test_server();
  return t_summary();
}
