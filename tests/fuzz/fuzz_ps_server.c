/* Fuzzes the ps's message handling in process: a real ps_server (ps/server.h, unmodified)
 * on its own uv loop, fed the fuzz input as the bytes of up to four client connections.
 *
 * Connections: by default each client is one end of a socketpair whose other end the
 * server accepts through its own listener's connection callback (the fd handed over in the
 * listener's accepted_fd, exactly where libuv's accept puts it), so nothing here touches
 * TCP ports and a run costs no TIME_WAIT sockets. FUZZ_PS_TCP=1 connects real TCP sockets
 * to the listener on 127.0.0.1 instead (slower; for checking that both ways agree).
 *
 * Input: two bytes of server settings, then operations.
 *   data[0]  mode (0 sync, 1 async, 2 ssp, 3 sync) | workers - 1 (bits 2-3: 1..3, 3 -> 1) |
 *            bit 4: clients half-close at the end | bit 5: one backup worker (sync, N > 1) |
 *            bit 6: --on-worker-loss wait | bit 7: 16-float chunks (else 4: 3 chunks);
 *            workers bits 3 with bit 6: --workers 2:3, the ps handing out the data (issue 28)
 *   data[1]  staleness (bits 0-1) | epochs - 1 (bit 2) | optimizer (bits 3-4) |
 *            bit 5: a cluster secret (common/auth.h) | bit 6: --max-connections 2 (else 64) |
 *            bit 7: --push-compress fp16 --pull-compress bf16 (common/codec.h; issue 27), or
 *            with staleness bits (which only ssp reads) 1 --push-compress topk:0.5 (with
 *            --topk-warmup 1; with momentum, kept on the workers and --pull-compress delta,
 *            whose chunks are then sparse), 2 int8 pushes with --pull-compress delta
 *   then operations, op = one byte: client k = op & 3, kind = (op >> 2) & 7:
 *     0  write the next data[i] bytes (one-byte length) to client k (connecting it first)
 *     1  the same with a two-byte little-endian length
 *     2  run the loop until nothing moves
 *     3  client k half-closes (shutdown SHUT_WR)
 *     4  client k closes
 *     5  client k reconnects (a new connection; an open one is closed first)
 *     6  client k sends a well-formed frame: next byte picks it (HELLO, PULL, a whole PUSH
 *        in either order, one PUSH chunk, REPORT, eval REPORT, BYE, STATUS_REQ, HEARTBEAT,
 *        ERROR, the handshake's first message (a fresh nonce), ROLLBACK, a HELLO with data
 *        facts, a subset eval REPORT, or a message only a ps sends: WELCOME, WEIGHTS, ACK,
 *        STATUS, SHUTDOWN, EVAL, DATA), the byte after gives its numbers; these get a fuzzer deep
 *        into training quickly, and any of them in any state of a connection (ps/net/rules.h)
 *     7  the ps is stopped (bit 5 of op: as failed; bit 6: as on SIGTERM)
 * At the end the loop runs until idle, the server is stopped (if it has not stopped by
 * itself), every client closes, and the loop must then end by itself within a bound (no
 * handle left behind: a hang), ps_server_free and uv_loop_close must succeed, and ASan's
 * leak check runs after every input. Everything the ps sends is read by a pst_reader and
 * must be well-formed frames of the kinds a ps sends, WEIGHTS inside the parameter vector.
 *
 * With a secret, a client whose first bytes were a handshake hello ("PSTA" and a nonce,
 * from a macro or written raw) answers the ps's challenge by itself once it arrives (the
 * ps's proof must verify), as a worker does; bytes the input writes before the challenge
 * came are what the ps takes for the proof.
 *
 * Not covered: the liveness timer's work (timeouts, heartbeats, rejoin deadlines) and
 * checkpoints, which depend on wall-clock time and files; timeouts are set to a day. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "common/auth.h"
#include "common/log.h"
#include "model/model.h"
#include "proto/wire.h"
#include "ps/net/net.h"
#include "ps/server.h"
#include "ps/test_connect.h"

#define MAX_CLIENTS 4
#define QUIET_ROUNDS 3       /* loop turns without any client I/O that mean "idle" */
#define MAX_ROUNDS 20000     /* loop turns after which a run that still moves is a livelock */
#define MODEL_TEXT "input 4\ndense 2 softmax\n" /* 10 parameters: chunks of 4, 4 and 2 */

#define CHECK(cond, ...)                                              \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "fuzz_ps_server: check failed: %s: ", #cond);  \
      fprintf(stderr, __VA_ARGS__);                                   \
      fprintf(stderr, "\n");                                          \
      abort();                                                        \
    }                                                                 \
  } while (0)

typedef struct {
  int fd;         /* the client's end; -1 when not connected */
  int eof;        /* the ps closed its side */
  pst_reader rd;  /* checks what the ps sends */
  int rd_ok;
  /* With a secret: the handshake's first message as sent, and the ps's first bytes until
   * they are known to be a challenge (answered) or a frame (an ERROR). */
  uint8_t head[PST_AUTH_HELLO_LEN];
  uint32_t head_n;
  int pre;
  uint8_t pre_buf[PST_AUTH_CHALLENGE_LEN];
  uint32_t pre_got;
} client;

static struct {
  int ready, tcp, verbose;
  pst_model model;
  float *init;
  float weights[64]; /* destination of WEIGHTS payloads */
  uv_loop_t loop;
  ps_server srv;
  pst_secret secret;
  int with_secret;
  client cl[MAX_CLIENTS];
  unsigned activity;
} g;

static void pump(void);

/* ---- checking what the ps sends ---- */

static int cl_on_payload(pst_reader *r, const Pstrain__Header *h, float **dst) {
  CHECK(h->type == PSTRAIN__MSG_TYPE__WEIGHTS, "the ps sent a payload with type %d", (int)h->type);
  CHECK(h->offset <= g.model.n_params && h->count <= g.model.n_params - h->offset,
        "WEIGHTS at %llu + %llu outside %zu parameters", (unsigned long long)h->offset,
        (unsigned long long)h->count, g.model.n_params);
  *dst = g.weights + h->offset;
  return 0;
}

static int cl_on_frame(pst_reader *r, const Pstrain__Header *h) {
  switch (h->type) {
    case PSTRAIN__MSG_TYPE__WELCOME:
      CHECK(h->welcome->n_params == g.model.n_params, "WELCOME with %llu parameters",
            (unsigned long long)h->welcome->n_params);
      break;
    case PSTRAIN__MSG_TYPE__ERROR:
    case PSTRAIN__MSG_TYPE__WEIGHTS:
    case PSTRAIN__MSG_TYPE__STATUS:
    case PSTRAIN__MSG_TYPE__SHUTDOWN:
    case PSTRAIN__MSG_TYPE__HEARTBEAT:
      break;
    default:
      CHECK(0, "the ps sent a frame of type %d", (int)h->type);
  }
  return 0;
}

static const pst_reader_cbs cl_cbs = {cl_on_payload, cl_on_frame};

/* ---- clients ---- */

static void client_close(client *c) {
  if (c->fd < 0) return;
  if (g.tcp) {
    /* A reset, not a FIN: no TIME_WAIT left behind per run. */
    struct linger l = {1, 0};
    setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  }
  close(c->fd);
  c->fd = -1;
}

static void client_connect(int k) {
  client *c = &g.cl[k];
  client_close(c);
  c->eof = 0;
  c->head_n = 0;
  c->pre = g.with_secret;
  c->pre_got = 0;
  if (c->rd_ok) pst_reader_free(&c->rd);
  CHECK(pst_reader_init(&c->rd, &cl_cbs, c, 0) == 0, "pst_reader_init");
  /* The job's pull encoding: WEIGHTS of any other size are malformed (delta pulls: float32,
   * or int8 chunks marked delta). */
  int delta = g.srv.opt.pull_enc == PST_ENC_DELTA;
  pst_reader_set_value_bytes(&c->rd, delta ? 4 : pst_enc_bytes(g.srv.opt.pull_enc));
  pst_reader_take_delta(&c->rd, delta);
  c->rd_ok = 1;
  /* A stopping server has closed its listener: the connection is refused. */
  if (g.srv.life.stopping || uv_is_closing((uv_handle_t *)&g.srv.net->listener)) return;
  if (g.tcp) {
    int fd = ps_test_connect(&g.loop, &g.srv.net->listener);
    if (fd < 0) return;
    c->fd = fd;
    return;
  }
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0,
        "socketpair: %s", strerror(errno));
  /* What uv__server_io does after accept(2): the fd waits in accepted_fd for uv_accept. */
  uv_stream_t *l = (uv_stream_t *)&g.srv.net->listener;
  CHECK(l->accepted_fd == -1, "listener holds an fd");
  l->accepted_fd = sv[0];
  l->connection_cb(l, 0);
  if (l->accepted_fd != -1) { /* the server did not take it */
    close(l->accepted_fd);
    l->accepted_fd = -1;
  }
  c->fd = sv[1];
}

static void client_send(int k, const uint8_t *p, size_t n) {
  client *c = &g.cl[k];
  int stalls = 0;
  if (c->fd < 0 && !c->eof) client_connect(k);
  if (c->fd >= 0)
    for (size_t i = 0; i < n && c->head_n < sizeof c->head; i++) c->head[c->head_n++] = p[i];
  while (c->fd >= 0 && n > 0) {
    ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= (size_t)w;
      g.activity++;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      /* The ps is behind, or stopped reading this connection on purpose (a sync chunk held
       * back until another worker's share is in: TCP backpressure). Let it run a little;
       * if it still takes nothing, the rest of this write is dropped, as a real sender
       * would sit blocked. */
      if (++stalls > 64) return;
      uv_run(&g.loop, UV_RUN_NOWAIT);
      pump();
      continue;
    }
    return; /* EPIPE, ECONNRESET: the ps closed this connection */
  }
}

/* Hands bytes that arrived before the frames started to the frame checker. */
static void feed_reader(client *c, const uint8_t *p, size_t n) {
  while (n > 0) {
    char *base;
    size_t len;
    pst_reader_buffer(&c->rd, &base, &len);
    size_t k = len < n ? len : n;
    memcpy(base, p, k);
    p += k;
    n -= k;
    int rc = pst_reader_feed(&c->rd, k);
    CHECK(rc >= 0, "the ps sent a bad frame: %s (\"%s\")", c->rd.err, c->rd.sample);
  }
}

/* The ps's first bytes on a connection with a secret: its challenge (answered as a worker
 * does), or an ERROR frame for a client that did not start with a handshake. */
static void pre_frames(int k, client *c) {
  if (c->pre_got >= 4 && memcmp(c->pre_buf, "PSTR", 4) == 0) {
    c->pre = 0;
    feed_reader(c, c->pre_buf, c->pre_got);
    return;
  }
  if (c->pre_got < sizeof c->pre_buf) return;
  c->pre = 0;
  CHECK(c->head_n == PST_AUTH_HELLO_LEN && memcmp(c->head, PST_AUTH_MAGIC, 4) == 0,
        "a challenge for a client that sent no handshake hello");
  pst_auth a;
  memset(&a, 0, sizeof a);
  memcpy(a.mine, c->head + 4, PST_AUTH_NONCE);
  uint8_t proof[PST_AUTH_PROOF_LEN];
  CHECK(pst_auth_respond(&a, &g.secret, c->pre_buf, proof) == 0,
        "the ps's proof does not verify with the secret");
  client_send(k, proof, sizeof proof);
}

/* Reads whatever the ps sent to every client. */
static void pump(void) {
  for (int k = 0; k < MAX_CLIENTS; k++) {
    client *c = &g.cl[k];
    while (c->fd >= 0 && !c->eof) {
      char *base;
      size_t len;
      if (c->pre) {
        base = (char *)c->pre_buf + c->pre_got;
        len = sizeof c->pre_buf - c->pre_got;
      } else {
        pst_reader_buffer(&c->rd, &base, &len);
      }
      ssize_t n = recv(c->fd, base, len, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      g.activity++;
      if (n <= 0) {
        c->eof = 1;
        break;
      }
      if (c->pre) {
        c->pre_got += (uint32_t)n;
        pre_frames(k, c);
        continue;
      }
      int rc = pst_reader_feed(&c->rd, (size_t)n);
      CHECK(rc >= 0, "the ps sent a bad frame: %s (\"%s\")", c->rd.err, c->rd.sample);
    }
  }
}

/* Runs the loop until neither the ps nor a client has anything left to do. */
static void run_until_quiet(void) {
  int quiet = 0, rounds = 0;
  while (quiet < QUIET_ROUNDS) {
    CHECK(++rounds < MAX_ROUNDS, "the ps never went idle (livelock)");
    g.activity = 0;
    pump();
    uv_run(&g.loop, UV_RUN_NOWAIT);
    pump();
    quiet = g.activity ? 0 : quiet + 1;
  }
}

/* ---- well-formed frames, so that inputs reach training quickly ---- */

/* A frame with count values of vb bytes each (4: float32; 2: fp16 or bf16 encoded). */
static void send_frame_vb(int k, Pstrain__Header *h, const void *payload, uint32_t count,
                          unsigned vb) {
  static uint8_t buf[PST_WIRE_MAX_FRAME_HEAD + 64 * 8];
  int n = pst_wire_encode(h, count * vb, buf, PST_WIRE_MAX_FRAME_HEAD);
  CHECK(n > 0, "pst_wire_encode: %d", n);
  if (count) memcpy(buf + n, payload, count * vb);
  client_send(k, buf, (size_t)n + count * vb);
}

static void send_frame(int k, Pstrain__Header *h, const float *payload, uint32_t count) {
  send_frame_vb(k, h, payload, count, 4);
}

static void send_chunk(int k, uint64_t version, uint32_t chunk, int last, uint8_t p) {
  /* The ps's own chunks (one layer here: pieces of chunk_floats), or past the last one. */
  uint32_t cf = g.srv.core.upd.chunk_floats;
  size_t off = chunk < g.srv.core.upd.n_chunks ? pst_update_chunk_off(&g.srv.core.upd, chunk)
                                          : (size_t)chunk * cf;
  uint32_t count = chunk < g.srv.core.upd.n_chunks ? pst_update_chunk_len(&g.srv.core.upd, chunk)
                   : (uint32_t)(g.model.n_params - off < cf ? g.model.n_params - off : cf);
  float v[64];
  for (uint32_t i = 0; i < count; i++)
    v[i] = (p & 0x80) && i == 1 ? (p & 0x40 ? 1e30f : -0.0f) : 0.01f * (float)((p + i) % 7) - 0.03f;
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  h.type = PSTRAIN__MSG_TYPE__PUSH;
  h.version = version;
  h.offset = off;
  h.count = count;
  h.last = last;
  pst_enc e = g.srv.opt.push_enc;
  if (e == PST_ENC_NONE) {
    send_frame(k, &h, v, count);
    return;
  }
  if (e == PST_ENC_INT8) {
    /* Bits 7 and 6: a chunk one byte short (a malformed frame). */
    uint8_t q[64 + 4];
    pst_int8_encode(v, NULL, count, q);
    send_frame_vb(k, &h, q, count + 4 - ((p & 0xc0) == 0xc0), 1);
    return;
  }
  if (e == PST_ENC_TOPK) {
    /* The pairs a worker sends; bits 7 and 6 repeat an index (a malformed frame) when there
     * are two pairs, or give index count (out of range) when there is one. */
    uint8_t pairs[64 * 8];
    uint32_t scratch[64];
    size_t bytes = pst_topk_encode(v, NULL, count, pst_topk_k(0.5, count), scratch, pairs);
    if ((p & 0xc0) == 0xc0) {
      uint32_t bad = bytes >= 16 ? 0 : count;
      memcpy(pairs + (bytes >= 16 ? 8 : 0), &bad, 4);
      if (bytes >= 16) memcpy(pairs, &bad, 4);
    }
    send_frame_vb(k, &h, pairs, (uint32_t)(bytes / 8), 8);
    return;
  }
  /* The job's encoding, as a worker sends it; bit 7 with bit 6 puts an fp16 infinity (or a
   * bf16 NaN) in, which the ps must reject as it rejects one in float32. */
  uint16_t enc[64];
  pst_enc_encode(e, v, NULL, enc, count);
  if ((p & 0xc0) == 0xc0 && count > 1) enc[1] = e == PST_ENC_FP16 ? 0x7c00 : 0x7fc1;
  send_frame_vb(k, &h, enc, count, 2);
}

/* Macros (the byte after op 6, modulo M_COUNT): tests/fuzz/make_seeds.c names them. */
#define M_COUNT 15

static void send_macro(int k, uint8_t t, uint8_t p) {
  if (t % M_COUNT == 10) {
    uint8_t hello[PST_AUTH_HELLO_LEN];
    pst_auth a;
    pst_auth_hello(&a, hello);
    client_send(k, hello, sizeof hello);
    return;
  }
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  Pstrain__Hello hello = PSTRAIN__HELLO__INIT;
  Pstrain__Report rep = PSTRAIN__REPORT__INIT;
  Pstrain__ErrorInfo e = PSTRAIN__ERROR_INFO__INIT;
  Pstrain__Welcome wl = PSTRAIN__WELCOME__INIT;
  Pstrain__Status st = PSTRAIN__STATUS__INIT;
  Pstrain__Shutdown sd = PSTRAIN__SHUTDOWN__INIT;
  Pstrain__DataRange dr = PSTRAIN__DATA_RANGE__INIT;
  if (g.srv.roster.workers == NULL) return; /* the server failed to start */
  uint32_t nc = g.srv.core.upd.n_chunks;
  switch (t % M_COUNT) {
    case 0:
      hello.worker_name = (p & 0x20) ? "a-worker-with-a-name-longer-than-sixty-four-bytes-so-it-gets-cut-x" : "fz";
      hello.model_fingerprint = (p & 0x80) ? 0x1234 : (p & 0x40) ? g.model.fingerprint : 0;
      hello.requested_index = (int)(p % 5) - 1;
      hello.dropped_gradients = (p >> 3) & 3;
      hello.encodings = PST_ENC_KNOWN;
      h.type = PSTRAIN__MSG_TYPE__HELLO;
      h.hello = &hello;
      break;
    case 1:
      h.type = PSTRAIN__MSG_TYPE__PULL;
      h.version = p & 0x3f;
      h.last = (p & 0x40) != 0;
      h.delta = (p & 0x80) != 0; /* a delta pull's reply may come (--pull-compress delta) */
      break;
    case 2: /* bit 5: last chunk first, as --push-by-layer sends it */
      for (uint32_t c = 0; c < nc; c++)
        send_chunk(k, p & 0x1f, (p & 0x20) ? nc - 1 - c : c, c + 1 == nc, p);
      return;
    case 3: {
      uint32_t c = (uint32_t)(p >> 5) % nc;
      send_chunk(k, p & 0x1f, c, c + 1 == nc, p);
      return;
    }
    case 4:
    case 5:
    case 13:
      rep.epoch = p % 4;
      rep.step = p;
      rep.is_eval = t % M_COUNT != 4;
      rep.subset_point = t % M_COUNT == 13 ? 1 + (p & 1) : 0;
      rep.weights_version = (p >> 1) & 7;
      rep.loss_sum = (p & 0x80) ? 1e308 : 0.5 * p;
      rep.samples = (p >> 2) % 4;
      rep.correct = (p & 0x40) ? 1000 : rep.samples / 2; /* more correct than samples too */
      rep.compute_seconds = (p & 0x10) ? 0.5 : 0;
      rep.data_wait_seconds = (p & 0x20) ? 0.25 : 0; /* longer than no compute time too */
      h.type = PSTRAIN__MSG_TYPE__REPORT;
      h.report = &rep;
      break;
    case 6: /* a goodbye at the end, or on leaving the job (the data handout, issue 28) */
      h.type = PSTRAIN__MSG_TYPE__BYE;
      h.leaving = p & 1;
      break;
    case 7: h.type = PSTRAIN__MSG_TYPE__STATUS_REQ; break;
    case 8: h.type = PSTRAIN__MSG_TYPE__HEARTBEAT; break;
    case 11:
      h.type = PSTRAIN__MSG_TYPE__ROLLBACK;
      h.version = p & 0x3f;
      break;
    case 12: /* the data facts a worker tells: 8 to 64 training samples, 1-4 test, or a lie */
      hello.worker_name = "fz-data";
      hello.requested_index = (int)(p % 5) - 1;
      hello.train_samples = (p & 0x80) ? 6400000 : 8u * (1 + (p & 7));
      hello.test_samples = 1 + ((p >> 3) & 3);
      hello.classes = (p & 0x40) ? 3 : 2;
      /* Bit 5: a worker from before the encodings (refused by a job that uses them). */
      hello.encodings = (p & 0x20) ? 0 : PST_ENC_KNOWN;
      h.type = PSTRAIN__MSG_TYPE__HELLO;
      h.hello = &hello;
      break;
    case 14: /* what only a ps sends: no peer may send it */
      switch (p % 7) {
        case 0:
          wl.n_params = g.model.n_params;
          h.type = PSTRAIN__MSG_TYPE__WELCOME;
          h.welcome = &wl;
          break;
        case 1: {
          float w[4] = {0};
          h.type = PSTRAIN__MSG_TYPE__WEIGHTS;
          h.count = 4;
          send_frame(k, &h, w, 4);
          return;
        }
        case 2: h.type = PSTRAIN__MSG_TYPE__ACK; break;
        case 3:
          h.type = PSTRAIN__MSG_TYPE__STATUS;
          h.status = &st;
          break;
        case 4:
          sd.reason = "fuzz";
          h.type = PSTRAIN__MSG_TYPE__SHUTDOWN;
          h.shutdown = &sd;
          break;
        case 5:
          h.type = PSTRAIN__MSG_TYPE__EVAL;
          h.eval_point = p;
          break;
        default:
          h.type = PSTRAIN__MSG_TYPE__DATA;
          h.data = &dr;
          dr.epoch = p;
          dr.count = p;
          break;
      }
      break;
    default:
      e.reason = "fuzz";
      h.type = PSTRAIN__MSG_TYPE__ERROR;
      h.error = (p & 1) ? &e : NULL;
      break;
  }
  send_frame(k, &h, NULL, 0);
}

/* ---- one run ---- */

static void walk_cb(uv_handle_t *h, void *arg) {
  (void)arg;
  fprintf(stderr, "  handle %s %p%s%s\n", uv_handle_type_name(uv_handle_get_type(h)), (void *)h,
          uv_is_active(h) ? " active" : "", uv_is_closing(h) ? " closing" : "");
}

static void setup(void) {
  char err[256];
  g.verbose = getenv("FUZZ_VERBOSE") != NULL;
  g.tcp = getenv("FUZZ_PS_TCP") != NULL && strcmp(getenv("FUZZ_PS_TCP"), "0") != 0;
  /* The ps's log at its own levels with FUZZ_VERBOSE, else silent. */
  pst_log_init("fuzz-ps", g.verbose ? PST_LOG_DEBUG : 0);
  unsetenv("NOTIFY_SOCKET"); /* sd_notify stays a no-op */
  /* As the daemon does (pst_log_guard_signals): a write to a closed peer fails with EPIPE
   * instead of killing the process. */
  signal(SIGPIPE, SIG_IGN);
  CHECK(pst_model_parse(MODEL_TEXT, "fuzz", &g.model, err, sizeof err) == 0, "%s", err);
  CHECK(g.model.n_params <= sizeof g.weights / sizeof g.weights[0], "model too big");
  g.init = malloc(g.model.n_params * sizeof(float));
  pst_model_init_params(&g.model, 1, g.init);
  for (int k = 0; k < MAX_CLIENTS; k++) g.cl[k].fd = -1;
  g.secret.set = 1;
  for (int i = 0; i < (int)sizeof g.secret.key; i++) g.secret.key[i] = (uint8_t)(i * 7 + 1);
  snprintf(g.secret.source, sizeof g.secret.source, "the fuzzer");
  g.ready = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g.ready) setup();
  if (size < 2) return 0;
  uint8_t b0 = data[0], b1 = data[1];
  ps_options o;
  memset(&o, 0, sizeof o);
  snprintf(o.listen_host, sizeof o.listen_host, "127.0.0.1");
  o.listen_port = 0;
  o.mode = (b0 & 3) == 3 ? PST_MODE_SYNC : (pst_mode)(b0 & 3);
  o.workers = ((b0 >> 2) & 3) == 3 ? 1 : 1 + ((b0 >> 2) & 3);
  o.backup_workers = (b0 & 0x20) && o.mode == PST_MODE_SYNC && o.workers > 1;
  o.wait_on_loss = (b0 & 0x40) && o.mode == PST_MODE_SYNC;
  /* The data handed out by the ps (issue 28): workers 2 to 3 that come and go, the data's
   * size fixed up front (a HELLO with 16 training samples matches it). */
  if (((b0 >> 2) & 3) == 3 && (b0 & 0x40)) {
    o.workers = 3;
    o.workers_min = 2;
    o.data_handout = 1;
    o.wait_on_loss = 0;
    o.backup_workers = 0;
    o.data_train = 16;
    o.data_test = 8;
    o.data_classes = 2;
  }
  o.chunk_floats = (b0 & 0x80) ? 16 : 4;
  o.layer_chunks = 1;
  o.staleness = b1 & 3;
  o.epochs = 1 + ((b1 >> 2) & 1);
  o.batch_size = 8;
  o.seed = 1;
  o.report_every = 1;
  o.status_interval = 0;
  o.model_name = "fuzz";
  o.metrics_path = "";
  o.summary_path = "";
  pst_opt_defaults(&o.opt);
  o.opt.kind = ((b1 >> 3) & 3) == 3 ? PST_OPT_ADAM : (pst_opt_kind)((b1 >> 3) & 3);
  g.with_secret = (b1 >> 5) & 1;
  o.secret = g.with_secret ? &g.secret : NULL;
  o.max_connections = (b1 & 0x40) ? 2 : 64;
  o.push_enc = (b1 & 0x80) ? ((b1 & 3) == 1   ? PST_ENC_TOPK
                               : (b1 & 3) == 2 ? PST_ENC_INT8
                                               : PST_ENC_FP16)
                           : PST_ENC_NONE;
  o.topk_fraction = 0.5;
  /* int8 pushes go with delta pulls, the others with bf16 pulls. */
  o.pull_enc = (b1 & 0x80) ? ((b1 & 3) == 2 ? PST_ENC_DELTA : PST_ENC_BF16) : PST_ENC_NONE;
  /* Top-k jobs warm up over an epoch, and with momentum keep it on the workers, as
   * ps/main.c arranges it (the WELCOME then says both), and pull deltas, which a step of
   * plain SGD on top-k pushes leaves sparse. */
  if (o.push_enc == PST_ENC_TOPK) {
    o.topk_warmup = 1;
    if (o.opt.kind == PST_OPT_MOMENTUM) {
      o.topk_momentum = o.opt.momentum;
      o.opt.momentum = 0;
      o.pull_enc = PST_ENC_DELTA;
    }
  }
  o.hello_timeout = 86400;
  o.worker_timeout = 86400;
  o.rejoin_timeout = 604800;
  o.checkpoint_dir = "";
  o.checkpoint_keep = 1;
  o.resume = "never";

  /* libuv's signal handles put SIG_DFL back when they close; libFuzzer's go back after. */
  struct sigaction old_int, old_term;
  sigaction(SIGINT, NULL, &old_int);
  sigaction(SIGTERM, NULL, &old_term);

  CHECK(uv_loop_init(&g.loop) == 0, "uv_loop_init");
  char err[256];
  int rc = ps_server_start(&g.srv, &g.loop, &o, &g.model, g.init, err, sizeof err);
  CHECK(rc == 0, "ps_server_start: %s", err);

  for (size_t i = 2; i < size;) {
    uint8_t op = data[i++];
    int k = op & 3;
    size_t len;
    switch ((op >> 2) & 7) {
      case 0:
      case 1:
        if ((op >> 2) & 1) {
          len = i + 1 < size ? (size_t)data[i] | (size_t)data[i + 1] << 8 : 0;
          i += 2;
        } else {
          len = i < size ? data[i] : 0;
          i += 1;
        }
        if (i > size) i = size;
        if (len > size - i) len = size - i;
        client_send(k, data + i, len);
        i += len;
        break;
      case 2:
        run_until_quiet();
        break;
      case 3:
        if (g.cl[k].fd >= 0) shutdown(g.cl[k].fd, SHUT_WR);
        break;
      case 4:
        client_close(&g.cl[k]);
        break;
      case 5:
        client_connect(k);
        break;
      case 6: {
        uint8_t t = i < size ? data[i] : 0, p = i + 1 < size ? data[i + 1] : 0;
        i += 2;
        send_macro(k, t, p);
        break;
      }
      default:
        if (!g.srv.life.stopping) {
          g.srv.life.stop_requested = (op >> 6) & 1;
          ps_server_stop(&g.srv, "stopped by the fuzzer", (op >> 5) & 1,
                         g.srv.life.stop_requested ? PST_EXIT_STOPPED : 0);
        }
        break;
    }
  }

  /* The end: clients may half-close, the ps stops, everyone closes, and the loop must
   * then end by itself. */
  if (b0 & 0x10)
    for (int k = 0; k < MAX_CLIENTS; k++)
      if (g.cl[k].fd >= 0) shutdown(g.cl[k].fd, SHUT_WR);
  run_until_quiet();
  if (!g.srv.life.stopping) ps_server_stop(&g.srv, "the fuzz input ended", 0, 0);
  run_until_quiet();
  for (int k = 0; k < MAX_CLIENTS; k++) {
    client_close(&g.cl[k]);
    if (g.cl[k].rd_ok) pst_reader_free(&g.cl[k].rd);
    g.cl[k].rd_ok = 0;
    g.cl[k].eof = 0;
  }
  int rounds = 0;
  while (uv_loop_alive(&g.loop) && rounds++ < MAX_ROUNDS) uv_run(&g.loop, UV_RUN_NOWAIT);
  if (uv_loop_alive(&g.loop)) {
    fprintf(stderr, "fuzz_ps_server: the loop still has work after the ps stopped:\n");
    uv_walk(&g.loop, walk_cb, NULL);
    CHECK(0, "the ps left a handle behind (it would hang at exit)");
  }
  ps_server_free(&g.srv);
  rc = uv_loop_close(&g.loop);
  if (rc != 0) uv_walk(&g.loop, walk_cb, NULL);
  CHECK(rc == 0, "uv_loop_close: %s", uv_strerror(rc));
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  return 0;
}
