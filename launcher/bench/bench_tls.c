/* The libuv echo of `pstrain bench --tls`, plain and with TLS (launcher/bench/bench_tls.h). */
#include "launcher/bench/bench_tls.h"

#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "common/clock.h"
#include "common/proc.h"
#include "common/tls.h"
#include "common/tls_pki.h"

#define HDR 32            /* bytes of a chunk's header: about a WEIGHTS/PUSH prefix + header */
#define CHILD_ALARM_S 300 /* a stuck child ends itself */
#define MAX_CLIENTS 256

typedef struct {
  size_t bytes, chunk;
  uint32_t n_chunks;
} layout;

static size_t chunk_len(const layout *l, uint32_t i) {
  size_t off = (size_t)i * l->chunk;
  return l->bytes - off < l->chunk ? l->bytes - off : l->chunk;
}

/* The receiving end of one direction: each chunk's header into a scratch, its payload into
 * place in dst. */
typedef struct {
  uint8_t *dst;
  uint32_t chunk;
  size_t pos; /* bytes of the current chunk (header + payload) received */
  uint8_t hdr[HDR];
} rx;

static void rx_buffer(rx *r, const layout *l, uv_buf_t *b) {
  if (r->pos < HDR) {
    *b = uv_buf_init((char *)r->hdr + r->pos, (unsigned)(HDR - r->pos));
    return;
  }
  size_t done = r->pos - HDR;
  *b = uv_buf_init((char *)r->dst + (size_t)r->chunk * l->chunk + done,
                   (unsigned)(chunk_len(l, r->chunk) - done));
}

/* Returns 1 when the last chunk of a message is complete. */
static int rx_advance(rx *r, const layout *l, size_t n) {
  r->pos += n;
  if (r->pos < HDR + chunk_len(l, r->chunk)) return 0;
  r->pos = 0;
  if (++r->chunk < l->n_chunks) return 0;
  r->chunk = 0;
  return 1;
}

static uint8_t *fault_in(size_t bytes) {
  uint8_t *p = malloc(bytes ? bytes : 1);
  if (p) memset(p, 0x5a, bytes);
  return p;
}

/* Queues a message of l->bytes from src: one write per chunk, header + payload pointer. */
static int send_msg(pst_tls_stream *st, const layout *l, uv_write_t *reqs, uint8_t (*heads)[HDR],
                    const uint8_t *src, uv_write_cb cb, void *data) {
  for (uint32_t i = 0; i < l->n_chunks; i++) {
    memset(heads[i], (int)(i & 0xff), HDR);
    uv_buf_t b[2] = {uv_buf_init((char *)heads[i], HDR),
                     uv_buf_init((char *)src + (size_t)i * l->chunk, (unsigned)chunk_len(l, i))};
    reqs[i].data = data;
    int rc = pst_tls_stream_write(st, &reqs[i], b, 2, cb);
    if (rc < 0) return rc;
  }
  return 0;
}

static pst_tls_ctx *make_ctx(const pl_bench_tls_opts *o, pst_tls_role role) {
  if (!o->pki_dir) return NULL;
  char cert[1024], key[1024], ca[1024], err[512];
  const char *who = role == PST_TLS_SERVER ? "server" : "client";
  char n1[32], n2[32];
  snprintf(n1, sizeof n1, "%s.pem", who);
  snprintf(n2, sizeof n2, "%s.key", who);
  pst_tls_pki_path(cert, sizeof cert, o->pki_dir, "bench", n1);
  pst_tls_pki_path(key, sizeof key, o->pki_dir, "bench", n2);
  pst_tls_pki_path(ca, sizeof ca, o->pki_dir, "bench", "ca.pem");
  pst_tls_ctx *c = NULL;
  if (pst_tls_ctx_new(role, cert, key, ca, &c, err, sizeof err) < 0 ||
      pst_tls_ctx_set_ciphersuites(c, o->suites, err, sizeof err) < 0) {
    fprintf(stderr, "pstrain bench: %s\n", err);
    pst_tls_ctx_free(c);
    exit(1);
  }
  return c;
}

/* ---- the server: every connection reads a message, then writes one back ---- */

typedef struct srv srv;
typedef struct {
  pst_tls_stream st;
  srv *sv;
  rx r;
  uint8_t *out;
  uv_write_t *reqs;
  uint8_t (*heads)[HDR];
  uint32_t writes_left;  /* of the reply being written */
  int reply_waiting;     /* a message came in while the last reply was still being written */
} sconn;

struct srv {
  uv_loop_t loop;
  uv_tcp_t listener;
  layout l;
  pst_tls_ctx *ctx;
  int clients, accepted, open, failed;
  sconn *conns;
};

static void s_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
  sconn *c = h->data;
  (void)suggested;
  rx_buffer(&c->r, &c->sv->l, b);
}

static void s_closed(uv_handle_t *h) {
  sconn *c = h->data;
  if (--c->sv->open == 0) uv_stop(&c->sv->loop);
}

static void s_write_done(uv_write_t *req, int status);

static void s_reply(sconn *c) {
  c->writes_left = c->sv->l.n_chunks;
  if (send_msg(&c->st, &c->sv->l, c->reqs, c->heads, c->out, s_write_done, c) < 0) {
    c->sv->failed = 1;
    pst_tls_stream_close(&c->st, s_closed);
  }
}

/* As the ps does with its pulls, a reply's write requests are reused only once every one of
 * them has called back: the next reply waits for that. */
static void s_write_done(uv_write_t *req, int status) {
  sconn *c = req->data;
  (void)status;
  if (--c->writes_left > 0 || !c->reply_waiting) return;
  c->reply_waiting = 0;
  s_reply(c);
}

static void s_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b) {
  sconn *c = st->data;
  (void)b;
  if (n == 0) return;
  if (n < 0) {
    /* The client is done (EOF), or failed. */
    if (n != UV_EOF) {
      fprintf(stderr, "bench server: %s\n", pst_tls_stream_strerror(&c->st, (int)n));
      c->sv->failed = 1;
    }
    pst_tls_stream_close(&c->st, s_closed);
    return;
  }
  if (!rx_advance(&c->r, &c->sv->l, (size_t)n)) return;
  if (c->writes_left > 0)
    c->reply_waiting = 1;
  else
    s_reply(c);
}

static void s_accept(uv_stream_t *l, int status) {
  srv *sv = l->data;
  char err[256];
  if (status < 0 || sv->accepted == sv->clients) return;
  sconn *c = &sv->conns[sv->accepted++];
  c->sv = sv;
  int rc = pst_tls_stream_init(&c->st, &sv->loop, sv->ctx, NULL, err, sizeof err);
  c->st.tcp.data = c;
  sv->open++;
  if (rc < 0 || uv_accept(l, (uv_stream_t *)&c->st.tcp) < 0) {
    sv->failed = 1;
    pst_tls_stream_close(&c->st, s_closed);
    return;
  }
  uv_tcp_nodelay(&c->st.tcp, 1);
  pst_tls_stream_read_start(&c->st, s_alloc, s_read);
  if (sv->accepted == sv->clients) uv_close((uv_handle_t *)&sv->listener, NULL);
}

static int server_main(int lfd, int clients, const layout *l, const pl_bench_tls_opts *o) {
  static srv sv;
  sv.l = *l;
  sv.clients = clients;
  sv.ctx = make_ctx(o, PST_TLS_SERVER);
  sv.conns = calloc((size_t)clients, sizeof *sv.conns);
  if (!sv.conns) return 1;
  for (int i = 0; i < clients; i++) {
    sconn *c = &sv.conns[i];
    c->r.dst = fault_in(l->bytes);
    c->out = fault_in(l->bytes);
    c->reqs = calloc(l->n_chunks, sizeof *c->reqs);
    c->heads = calloc(l->n_chunks, HDR);
    if (!c->r.dst || !c->out || !c->reqs || !c->heads) return 1;
  }
  uv_loop_init(&sv.loop);
  uv_tcp_init(&sv.loop, &sv.listener);
  sv.listener.data = &sv;
  if (uv_tcp_open(&sv.listener, lfd) < 0 ||
      uv_listen((uv_stream_t *)&sv.listener, 64, s_accept) < 0)
    return 1;
  uv_run(&sv.loop, UV_RUN_DEFAULT);
  return sv.failed;
}

/* ---- a client: rounds of push then pull ---- */

typedef struct {
  pl_bench_client c;
  char suite[64];
} shared_res;

typedef struct {
  uv_loop_t loop;
  pst_tls_stream st;
  uv_connect_t creq;
  layout l;
  rx r;
  uint8_t *grad;
  uv_write_t *reqs;
  uint8_t (*heads)[HDR];
  uint32_t writes_left;
  long round, rounds, warmup;
  int push_busy, pull_busy, failed;
  double t0, t1;
  pid_t srv;
  shared_res *res;
} client;

static void c_closed(uv_handle_t *h) { (void)h; }

static void c_fail(client *c, const char *why) {
  if (!c->failed) fprintf(stderr, "bench client: %s\n", why);
  c->failed = 1;
  pst_tls_stream_close(&c->st, c_closed);
}

static void c_push_done(uv_write_t *req, int status);

static void start_round(client *c) {
  if (c->round == c->warmup + c->rounds) {
    pl_bench_client *r = &c->res->c;
    r->cpu_s = pst_proc_self_cpu_s() - r->cpu_s;
    double s1 = pst_proc_cpu_s((long)c->srv);
    r->server_cpu_s = s1 >= 0 && r->server_cpu_s >= 0 ? s1 - r->server_cpu_s : -1;
    r->server_loop_cpu_s = -1; /* one thread: its CPU is all of it */
    pst_tls_stream_close(&c->st, c_closed);
    return;
  }
  c->t0 = pst_now();
  if (c->round == c->warmup) {
    c->res->c.t_first = c->t0;
    c->res->c.cpu_s = pst_proc_self_cpu_s();
    c->res->c.server_cpu_s = pst_proc_cpu_s((long)c->srv);
    pst_tls_stream_describe(&c->st, c->res->suite, sizeof c->res->suite);
  }
  c->push_busy = c->pull_busy = 1;
  c->writes_left = c->l.n_chunks;
  if (send_msg(&c->st, &c->l, c->reqs, c->heads, c->grad, c_push_done, c) < 0)
    c_fail(c, "cannot queue the push");
}

static void maybe_end_round(client *c) {
  if (c->push_busy || c->pull_busy) return;
  double t2 = pst_now();
  if (c->round >= c->warmup) {
    pl_bench_client *r = &c->res->c;
    r->push_s += c->t1 - c->t0;
    r->pull_s += t2 - c->t1;
    r->lat[c->round - c->warmup] = t2 - c->t0;
    r->t_last = t2;
  }
  c->round++;
  start_round(c);
}

static void c_push_done(uv_write_t *req, int status) {
  client *c = req->data;
  if (status < 0) {
    c_fail(c, uv_strerror(status));
    return;
  }
  if (--c->writes_left > 0) return;
  c->t1 = pst_now();
  c->push_busy = 0;
  maybe_end_round(c);
}

static void c_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
  client *c = h->data;
  (void)suggested;
  rx_buffer(&c->r, &c->l, b);
}

static void c_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b) {
  client *c = st->data;
  (void)b;
  if (n == 0 || c->failed) return;
  if (n < 0) {
    c_fail(c, pst_tls_stream_strerror(&c->st, (int)n));
    return;
  }
  if (rx_advance(&c->r, &c->l, (size_t)n)) {
    c->pull_busy = 0;
    maybe_end_round(c);
  }
}

static void c_connected(uv_connect_t *req, int status) {
  client *c = req->data;
  if (status < 0) {
    c_fail(c, uv_strerror(status));
    return;
  }
  uv_tcp_nodelay(&c->st.tcp, 1);
  pst_tls_stream_read_start(&c->st, c_alloc, c_read);
  start_round(c);
}

static int client_main(int port, pid_t srv_pid, const layout *l, long rounds, long warmup,
                       const pl_bench_tls_opts *o, shared_res *res) {
  static client c;
  char err[256];
  c.l = *l;
  c.rounds = rounds;
  c.warmup = warmup;
  c.srv = srv_pid;
  c.res = res;
  c.grad = fault_in(l->bytes);
  c.r.dst = fault_in(l->bytes);
  c.reqs = calloc(l->n_chunks, sizeof *c.reqs);
  c.heads = calloc(l->n_chunks, HDR);
  if (!c.grad || !c.r.dst || !c.reqs || !c.heads) return 1;
  pst_tls_ctx *ctx = make_ctx(o, PST_TLS_CLIENT);
  uv_loop_init(&c.loop);
  if (pst_tls_stream_init(&c.st, &c.loop, ctx, NULL, err, sizeof err) < 0) {
    fprintf(stderr, "bench client: %s\n", err);
    return 1;
  }
  c.st.tcp.data = &c;
  struct sockaddr_in a;
  uv_ip4_addr("127.0.0.1", port, &a);
  c.creq.data = &c;
  if (uv_tcp_connect(&c.creq, &c.st.tcp, (struct sockaddr *)&a, c_connected) < 0) return 1;
  uv_run(&c.loop, UV_RUN_DEFAULT);
  return c.failed || c.round != warmup + rounds;
}

/* ---- one cell ---- */

int pl_bench_uv(size_t bytes, int clients, long rounds, long warmup, const pl_bench_tls_opts *o,
                pl_bench_figs *f, char *suite_out, size_t suite_len, char *err, size_t errlen) {
  memset(f, 0, sizeof *f);
  f->peak_rss_kib = -1;
  if (clients > MAX_CLIENTS) clients = MAX_CLIENTS;
  layout l = {.bytes = bytes, .chunk = o->chunk ? o->chunk : bytes};
  l.n_chunks = (uint32_t)((bytes + l.chunk - 1) / l.chunk);
  size_t shared = (size_t)clients * (sizeof(shared_res) + (size_t)rounds * sizeof(double));
  char *mem = mmap(NULL, shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    snprintf(err, errlen, "cannot map %zu bytes: %s", shared, strerror(errno));
    return -errno;
  }
  memset(mem, 0, shared);
  shared_res *res = (shared_res *)mem;
  double *lat = (double *)(mem + (size_t)clients * sizeof(shared_res));

  int port;
  int lfd = pl_bench_listen(&port, err, errlen);
  if (lfd < 0) {
    munmap(mem, shared);
    return lfd;
  }
  fflush(NULL);
  pid_t pids[1 + MAX_CLIENTS];
  int n_pids = 0, bad = 0;
  pid_t srv = fork();
  if (srv == 0) {
    alarm(CHILD_ALARM_S);
    _exit(server_main(lfd, clients, &l, o));
  }
  close(lfd);
  if (srv < 0) bad = 1;
  else pids[n_pids++] = srv;
  for (int i = 0; i < clients && !bad; i++) {
    res[i].c.lat = lat + (size_t)i * (size_t)rounds;
    res[i].c.rounds = rounds;
    pid_t p = fork();
    if (p == 0) {
      alarm(CHILD_ALARM_S);
      _exit(client_main(port, srv, &l, rounds, warmup, o, &res[i]));
    }
    if (p < 0) bad = 1;
    else pids[n_pids++] = p;
  }
  if (bad && srv > 0) kill(srv, SIGTERM);
  /* Clients first: the server exits once they all closed. */
  for (int i = n_pids - 1; i >= 0; i--) {
    int st = 0;
    if (waitpid(pids[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      if (!bad && srv > 0) kill(srv, SIGTERM);
      bad = 1;
    }
  }
  if (bad) {
    snprintf(err, errlen, "the %s echo failed (%zu bytes, %d clients)",
             o->pki_dir ? "TLS" : "plain libuv", bytes, clients);
    munmap(mem, shared);
    return -EIO;
  }
  pl_bench_client cs[MAX_CLIENTS];
  for (int i = 0; i < clients; i++) cs[i] = res[i].c;
  pl_bench_reduce(cs, clients, bytes, f);
  snprintf(suite_out, suite_len, "%s", o->pki_dir ? res[0].suite : "plain");
  munmap(mem, shared);
  return 0;
}
