/* The client's closing, in process: on_closed comes once per start, and only when every
 * handle and request of the client is done with, so that the owner may start the client
 * again from on_closed, as the worker does when it reconnects (worker/trainer.c). CI once
 * saw a worker abort in libuv (uv__finish_close: the timer was initialised again while
 * still on the loop's closing list): a name lookup cancelled by wk_client_close called back
 * before the timer's close callback had run, and the client counted itself closed. */
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "common/check.h"
#include "worker/client.h"

enum { RESTARTS = 200 };

typedef struct {
  uv_loop_t *loop;
  wk_client c;
  int port;
  int starts, closes, connects;
  int close_at_connect; /* close from on_connected rather than at once */
} fixture;

static void on_connected(wk_client *c) {
  fixture *f = c->data;
  f->connects++;
  if (f->close_at_connect) wk_client_close(c, "closed at connect");
}
static int on_payload(wk_client *c, const Pstrain__Header *h, float **dst) {
  (void)c, (void)h, (void)dst;
  return -1;
}
static int on_frame(wk_client *c, const Pstrain__Header *h) {
  (void)c, (void)h;
  return 0;
}
static void on_push_sent(wk_client *c) { (void)c; }

static const wk_client_cbs cbs;

static void start(fixture *f) {
  f->starts++;
  int rc = wk_client_start(&f->c, f->loop, "127.0.0.1", f->port, 5.0, NULL, NULL, NULL, &cbs, f);
  CHECK(rc == 0);
  /* At once: the lookup is still out (RESOLVING), as when a peer's loss closes every shard's
   * connection while one of them is still reconnecting. */
  if (!f->close_at_connect) wk_client_close(&f->c, "closed at once");
}

static void on_closed(wk_client *c, const char *why) {
  fixture *f = c->data;
  (void)why;
  f->closes++;
  CHECK(c->state == WK_CONN_CLOSED);
  CHECK(!c->tcp_open && !c->timer_open && !c->resolving);
  wk_client_free(c);
  if (f->starts < RESTARTS) start(f); /* started again from its own on_closed */
}

static const wk_client_cbs cbs = {on_connected, on_payload, on_frame, on_push_sent, on_closed};

/* A listener that accepts each connection and closes it at once (the client's own close
 * may come first or second). */
static void on_conn(uv_stream_t *s, int status) {
  if (status < 0) return;
  uv_tcp_t *t = malloc(sizeof *t);
  if (!t) return;
  uv_tcp_init(s->loop, t);
  (void)uv_accept(s, (uv_stream_t *)t);
  uv_close((uv_handle_t *)t, (uv_close_cb)free);
}

static void run_case(int close_at_connect) {
  uv_loop_t loop;
  CHECK(uv_loop_init(&loop) == 0);
  uv_tcp_t server;
  uv_tcp_init(&loop, &server);
  struct sockaddr_in a;
  uv_ip4_addr("127.0.0.1", 0, &a);
  CHECK(uv_tcp_bind(&server, (const struct sockaddr *)&a, 0) == 0);
  CHECK(uv_listen((uv_stream_t *)&server, 64, on_conn) == 0);
  int len = sizeof a;
  uv_tcp_getsockname(&server, (struct sockaddr *)&a, &len);
  fixture f;
  memset(&f, 0, sizeof f);
  f.loop = &loop;
  f.port = ntohs(a.sin_port);
  f.close_at_connect = close_at_connect;
  start(&f);
  /* Runs until the last client has closed; the listener alone keeps the loop alive, so
   * it runs in turns until the client is done with. */
  while (f.closes < RESTARTS) uv_run(&loop, UV_RUN_ONCE);
  uv_close((uv_handle_t *)&server, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK(f.starts == RESTARTS);
  CHECK(f.closes == RESTARTS);
  if (close_at_connect) CHECK(f.connects == RESTARTS);
  CHECK(uv_loop_close(&loop) == 0);
}

/* Top-k by tensor's kinds (pst_topk_encode_tensors): over a part of a model with batch
 * norm, a layer's weights are sparse, its biases and batch norm's gamma and beta dense, the
 * moving statistics state; and a part that starts inside a layer gets that layer's kinds. */
static void check_tensor_kinds(void) {
  static pst_model m;
  char err[256];
  const char *spec = "input 8x8x1\nconv2d 4 3x3 relu\nbatchnorm\nflatten\ndense 10 softmax\n";
  CHECK(pst_model_parse(spec, "test", &m, err, sizeof err) == 0);
  for (size_t lo = 0; lo < 40; lo += 13) {
    wk_client c;
    memset(&c, 0, sizeof c);
    size_t n = m.n_params - lo;
    CHECK(wk_client_prepare_push(&c, &m, lo, n, 64, 1) == 0);
    size_t seen = 0;
    for (int l = 0; l < m.n_layers; l++) {
      const pst_layer *L = &m.layers[l];
      int bn = L->kind == PST_LAYER_BATCHNORM;
      for (size_t i = L->w_offset; i < L->w_offset + L->w_count; i++, seen++)
        if (i >= lo) CHECK(c.push_kind[i - lo] == (bn ? PST_TOPK_DENSE : PST_TOPK_SPARSE));
      for (size_t i = L->b_offset; i < L->b_offset + L->b_count; i++, seen++)
        if (i >= lo) CHECK(c.push_kind[i - lo] == PST_TOPK_DENSE);
      for (size_t i = L->s_offset; i < L->s_offset + L->s_count; i++, seen++)
        if (i >= lo) CHECK(c.push_kind[i - lo] == PST_TOPK_STATE);
    }
    CHECK(seen == m.n_params); /* every value is some layer's */
    wk_client_free(&c);
  }
}

int main(void) {
  run_case(0); /* closed while resolving */
  run_case(1); /* closed once connected */
  check_tensor_kinds();
  printf("client_test: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
