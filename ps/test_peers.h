/* For in-process tests of the ps (ps/server_test.c, ps/net/rules_test.c): a real ps_server on
 * its own loop and fake peers, plain non-blocking sockets on 127.0.0.1 that send one frame at
 * a time and read every frame the ps sends back. Header only, test use only: include it once,
 * from the test's .c file.
 *
 * The model has 10 parameters in chunks of 4, 4 and 2 floats, so every rule meets a chunk
 * boundary and a short last chunk. */
#ifndef PSTRAIN_PS_TEST_PEERS_H
#define PSTRAIN_PS_TEST_PEERS_H

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "common/clock.h"
#include "model/model.h"
#include "proto/wire.h"
#include "ps/net/conn.h"
#include "ps/server.h"
#include "ps/test_connect.h"

#define MODEL_TEXT "input 4\ndense 2 softmax\n" /* 10 parameters */
#define N_PARAMS 10
#define CHUNK 4
#define N_CHUNKS 3
#define MAX_PEERS 3

#include "common/check.h"

/* A fake worker: its socket, a reader for what the ps sends, and what arrived. */
typedef struct {
  int fd;
  int eof;
  pst_reader rd;
  float *weights;           /* [the model's parameters]: where WEIGHTS payloads land */
  int welcome;              /* WELCOME received */
  int index;                /* its slot, from the WELCOME */
  int chunks;               /* WEIGHTS chunks of the reply in progress */
  uint64_t reply_version;   /* the version the reply's first chunk carried */
  int mixed;                /* a reply whose chunks carried different versions */
  int reply_done;           /* the reply's last chunk came */
  int errors;               /* ERROR or SHUTDOWN frames */
  int deaf;                 /* reads nothing more (a peer stopped by SIGSTOP, say) */
} peer;

static struct {
  uv_loop_t loop;
  ps_server srv;
  pst_model model;
  float init[N_PARAMS];
  size_t n_params;          /* the running ps's model's */
  peer p[MAX_PEERS];
  int activity;
  pst_model big;            /* for replies bigger than the sockets' buffers (case 8) */
  float *big_init;
  int threads;              /* the ps's --threads: above 1, I/O threads too (ps/net/io.h) */
  uint32_t io_min;          /* their threshold: 1 hands every payload and reply to them */
  void (*tune)(ps_options *o); /* a test's own settings, applied last (NULL: none) */
  uint32_t wait_us;         /* the next push's first chunk says this exposed wait (0: none) */
} g;

static inline int on_payload(pst_reader *r, const Pstrain__Header *h, float **dst) {
  peer *p = r->data;
  if (h->type != PSTRAIN__MSG_TYPE__WEIGHTS || h->offset + h->count > g.n_params) return -EPROTO;
  if (p->chunks == 0 || p->reply_done) {
    p->chunks = 0;
    p->reply_done = 0;
    p->reply_version = h->version;
  }
  if (h->version != p->reply_version) p->mixed++;
  p->chunks++;
  p->reply_done = h->last;
  *dst = p->weights + h->offset;
  return 0;
}

static inline int on_frame(pst_reader *r, const Pstrain__Header *h) {
  peer *p = r->data;
  if (h->type == PSTRAIN__MSG_TYPE__WELCOME) {
    p->welcome = 1;
    p->index = (int)h->welcome->worker_index;
  } else if (h->type == PSTRAIN__MSG_TYPE__ERROR || h->type == PSTRAIN__MSG_TYPE__SHUTDOWN) {
    p->errors++;
  }
  return 0;
}

static const pst_reader_cbs peer_cbs = {on_payload, on_frame};

/* Reads whatever the ps sent to every peer. */
static inline void drain(void) {
  for (int k = 0; k < MAX_PEERS; k++) {
    peer *p = &g.p[k];
    while (p->fd >= 0 && !p->eof && !p->deaf) {
      char *base;
      size_t len;
      pst_reader_buffer(&p->rd, &base, &len);
      ssize_t n = recv(p->fd, base, len, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      g.activity++;
      if (n <= 0) {
        p->eof = 1;
        break;
      }
      if (pst_reader_feed(&p->rd, (size_t)n) < 0) {
        fprintf(stderr, "peer %d: bad frame from the ps: %s\n", k, p->rd.err);
        p->eof = 1;
        g_fail++;
      }
    }
  }
}

/* Runs the ps and the peers until nothing moves (a few quiet turns in a row). */
/* Whether an I/O thread holds one of the ps's jobs (ps/net/io.h). */
static inline int io_jobs_out(void) {
  for (ps_conn *c = g.srv.net->conns; c; c = c->next)
    if (ps_io_busy(&c->rjob) || ps_io_busy(&c->wjob)) return 1;
  return 0;
}

static inline void settle(void) {
  int quiet = 0;
  double quiet_since = pst_now();
  /* With I/O threads, a job's end reaches the loop a wake-up later, and on a busy machine a
   * helper may wait many milliseconds for a core: while a job is out, quiet means 300 ms
   * without activity (a job that cannot move, a deaf peer's reply, costs that much). */
  for (int turns = 0; turns < 200000; turns++) {
    if (g.threads > 1 && io_jobs_out() ? pst_now() - quiet_since > 0.3
                                       : quiet >= (g.threads > 1 ? 6 : 3))
      break;
    g.activity = 0;
    drain();
    uv_run(&g.loop, UV_RUN_NOWAIT);
    drain();
    if (g.activity) {
      quiet = 0;
      quiet_since = pst_now();
    } else {
      quiet++;
      /* Give the kernel a moment to move bytes across loopback. */
      poll(NULL, 0, 1);
    }
  }
}

static inline void send_bytes(int k, const void *buf, size_t n) {
  const uint8_t *b = buf;
  while (n > 0) {
    ssize_t w = send(g.p[k].fd, b, n, MSG_NOSIGNAL);
    if (w > 0) {
      b += w;
      n -= (size_t)w;
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      uv_run(&g.loop, UV_RUN_NOWAIT);
      drain();
    } else {
      return; /* the ps closed this connection */
    }
  }
}

static inline void send_header(int k, Pstrain__Header *h) {
  uint8_t buf[PST_WIRE_MAX_FRAME_HEAD];
  int n = pst_wire_encode(h, 0, buf, sizeof buf);
  if (n > 0) send_bytes(k, buf, (size_t)n);
}

/* One PUSH chunk of peer k's gradient (its values for chunk c), or only its first `cut`
 * bytes (a peer that dies mid-frame). */
static inline void push_chunk_as(int k, uint64_t version, int c, int last, const float *grad,
                          size_t cut) {
  uint8_t buf[PST_WIRE_CHUNK_HEAD + CHUNK * sizeof(float)];
  uint32_t off = (uint32_t)c * CHUNK, count = N_PARAMS - off < CHUNK ? N_PARAMS - off : CHUNK;
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  h.type = PSTRAIN__MSG_TYPE__PUSH;
  h.version = version;
  h.offset = off;
  h.count = count;
  h.last = last != 0;
  h.wait_us = g.wait_us; /* a push's first frame is the first sent after it was set */
  g.wait_us = 0;
  int n = pst_wire_encode(&h, count * 4u, buf, PST_WIRE_CHUNK_HEAD);
  if (n <= 0) {
    g_fail++;
    return;
  }
  memcpy(buf + n, grad + off, count * sizeof(float));
  size_t len = (size_t)n + count * sizeof(float);
  send_bytes(k, buf, cut && cut < len ? cut : len);
}

/* Chunk c of an ascending push (the last chunk ends it). */
static inline void push_chunk(int k, uint64_t version, int c, const float *grad, size_t cut) {
  push_chunk_as(k, version, c, c + 1 == N_CHUNKS, grad, cut);
}

/* The whole push, ascending or (desc) last chunk first, as a worker that pushes each layer
 * when its backward pass ends sends it. */
static inline void push_all(int k, uint64_t version, int desc, const float *grad) {
  for (int j = 0; j < N_CHUNKS; j++)
    push_chunk_as(k, version, desc ? N_CHUNKS - 1 - j : j, j + 1 == N_CHUNKS, grad, 0);
}

static inline void pull(int k, uint64_t version, int last) {
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  h.type = PSTRAIN__MSG_TYPE__PULL;
  h.version = version;
  h.last = last;
  g.p[k].reply_done = 0;
  g.p[k].chunks = 0;
  send_header(k, &h);
}

static inline void peer_connect(int k) {
  peer *p = &g.p[k];
  free(p->weights);
  memset(p, 0, sizeof *p);
  p->fd = -1;
  p->weights = calloc(g.n_params, sizeof(float));
  if (!p->weights) {
    g_fail++;
    return;
  }
  if (pst_reader_init(&p->rd, &peer_cbs, p, 0) < 0) {
    g_fail++;
    return;
  }
  int fd = ps_test_connect(&g.loop, &g.srv.net->listener);
  if (fd < 0) {
    g_fail++;
    return;
  }
  p->fd = fd;
}

static inline void peer_close(int k) {
  peer *p = &g.p[k];
  if (p->fd >= 0) close(p->fd);
  p->fd = -1;
}

/* Connects and registers peer k with slot k. */
static inline void join(int k) {
  peer_connect(k);
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  Pstrain__Hello hello = PSTRAIN__HELLO__INIT;
  char name[16];
  snprintf(name, sizeof name, "peer%d", k);
  hello.worker_name = name;
  hello.requested_index = k;
  h.type = PSTRAIN__MSG_TYPE__HELLO;
  h.hello = &hello;
  send_header(k, &h);
  settle();
  CHECK(g.p[k].welcome && g.p[k].index == k);
}

static inline void start_with(pst_mode mode, int workers, const pst_model *model,
                              const float *init,
                       uint32_t chunk) {
  ps_options o;
  memset(&o, 0, sizeof o);
  snprintf(o.listen_host, sizeof o.listen_host, "127.0.0.1");
  o.mode = mode;
  o.workers = workers;
  o.chunk_floats = chunk;
  o.layer_chunks = 1; /* as the ps runs by default (one layer here: pieces of the chunk) */
  g.n_params = model->n_params;
  o.epochs = 1;
  o.batch_size = 8;
  o.seed = 1;
  o.report_every = 1;
  o.model_name = "test";
  o.metrics_path = "";
  o.summary_path = "";
  pst_opt_defaults(&o.opt);
  o.opt.kind = PST_OPT_SGD;
  o.opt.lr = 0.5f;
  o.max_connections = 16;
  o.hello_timeout = 86400;
  o.worker_timeout = 86400;
  o.rejoin_timeout = 86400;
  o.checkpoint_dir = "";
  o.checkpoint_keep = 1;
  o.resume = "never";
  o.threads = g.threads;
  o.io_min = g.io_min;
  if (g.tune) g.tune(&o);
  uv_loop_init(&g.loop);
  char err[256];
  int rc = ps_server_start(&g.srv, &g.loop, &o, model, init, err, sizeof err);
  if (rc < 0) fprintf(stderr, "ps_server_start: %s\n", err);
  CHECK(rc == 0);
  for (int k = 0; k < MAX_PEERS; k++) g.p[k].fd = -1;
}

static inline void start(pst_mode mode, int workers) {
  start_with(mode, workers, &g.model, g.init, CHUNK);
}

static inline void stop(void) {
  if (!g.srv.life.stopping) ps_server_stop(&g.srv, "the test is over", 0, 0);
  settle();
  for (int k = 0; k < MAX_PEERS; k++) {
    peer_close(k);
    pst_reader_free(&g.p[k].rd);
    free(g.p[k].weights);
    g.p[k].weights = NULL;
  }
  for (int i = 0; i < 10000 && uv_loop_alive(&g.loop); i++) uv_run(&g.loop, UV_RUN_NOWAIT);
  CHECK(!uv_loop_alive(&g.loop));
  ps_server_free(&g.srv);
  CHECK(uv_loop_close(&g.loop) == 0);
}


#endif
