/* ps/net/rules.h's table, enforced: every message type sent in every phase of a connection to a
 * real ps_server (ps/test_peers.h: fake peers over loopback), and the outcome checked
 * against the table's action:
 *   handle  the ps counted it handled, and the connection is open
 *   strike  one more rejected message counted against the worker, the connection open
 *   close   the connection closed, nothing handled
 *   ignore  the ps was stopping: nothing looked at the frame
 * Each message is well formed (a valid chunk of the push in progress, a plausible report),
 * so that a refusal can only come from the table. Before authentication the table is never
 * reached (no frame is read): every frame must close the connection there, and nothing may
 * be counted.
 *
 * Then the table's own promises: no strike where there is no worker, nothing a ps sends is
 * ever handled, nothing at all while stopping. Runs in the sanitizer pass with every other
 * cc_test, so that a handler reached without a worker (the ROLLBACK of issue 23) is a heap
 * error there. */
#include <signal.h>
#include <sodium.h>

#include "common/auth.h"
#include "common/fpenv.h"
#include "common/log.h"
#include "ps/net/rules.h"
#include "ps/test_peers.h"

static pst_secret g_secret;
static int g_epochs = 1;

static void tune(ps_options *o) {
  o->secret = g_secret.set ? &g_secret : NULL;
  o->epochs = g_epochs;
}

static ps_conn *conn_of(int worker) {
  for (ps_conn *c = g.srv.net->conns; c; c = c->next)
    if (c->worker == worker && c->state != CONN_CLOSING) return c;
  return NULL;
}

/* The ps's only unregistered connection (peer 0 before HELLO). */
static ps_conn *open_conn(void) {
  for (ps_conn *c = g.srv.net->conns; c; c = c->next)
    if (c->worker < 0 && c->state != CONN_CLOSING) return c;
  return NULL;
}

static void hello_as(int k, int index, uint32_t train, uint32_t test) {
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  Pstrain__Hello hello = PSTRAIN__HELLO__INIT;
  hello.worker_name = "rules";
  hello.requested_index = index;
  hello.train_samples = train;
  hello.test_samples = test;
  hello.classes = train ? 2 : 0;
  h.type = PSTRAIN__MSG_TYPE__HELLO;
  h.hello = &hello;
  send_header(k, &h);
}

static void simple(int k, Pstrain__MsgType type, uint64_t version, int last) {
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  h.type = type;
  h.version = version;
  h.last = last;
  send_header(k, &h);
}

/* The bytes of one well-formed frame of `type` from peer k in phase ph, into buf. */
static size_t frame_of(int type, ps_phase ph, uint8_t *buf, size_t cap) {
  static const float grad[N_PARAMS] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f, 0.9f, 1.0f};
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  Pstrain__Hello hello = PSTRAIN__HELLO__INIT;
  Pstrain__Report r = PSTRAIN__REPORT__INIT;
  Pstrain__ErrorInfo e = PSTRAIN__ERROR_INFO__INIT;
  Pstrain__Welcome wl = PSTRAIN__WELCOME__INIT;
  h.type = (Pstrain__MsgType)type;
  switch (type) {
    case PSTRAIN__MSG_TYPE__PUSH:
    case PSTRAIN__MSG_TYPE__WEIGHTS: {
      /* In the middle of a push: its next chunk (chunk 1); elsewhere a push's first. */
      int c = ph == PS_PHASE_PUSHING || ph == PS_PHASE_PUSHING_PULLED ? 1 : 0;
      int n = pst_wire_encode_chunk((Pstrain__MsgType)type, 0, (uint64_t)c * CHUNK, CHUNK, 0, buf,
                                    PST_WIRE_CHUNK_HEAD);
      if (n <= 0 || (size_t)n + sizeof(float) * CHUNK > cap) return 0;
      memcpy(buf + n, grad + c * CHUNK, CHUNK * sizeof(float));
      return (size_t)n + CHUNK * sizeof(float);
    }
    case PSTRAIN__MSG_TYPE__HELLO:
      hello.worker_name = "again";
      hello.requested_index = -1;
      h.hello = &hello;
      break;
    case PSTRAIN__MSG_TYPE__REPORT:
      r.epoch = 1;
      r.step = 1;
      r.loss_sum = 0.5;
      r.correct = 1;
      r.samples = 1;
      r.compute_seconds = 0.01;
      h.report = &r;
      break;
    case PSTRAIN__MSG_TYPE__WELCOME:
      wl.n_params = N_PARAMS;
      h.welcome = &wl;
      break;
    case PSTRAIN__MSG_TYPE__ERROR:
      e.reason = "the test's error";
      h.error = &e;
      break;
    default:
      break;
  }
  int n = pst_wire_encode(&h, 0, buf, cap);
  return n > 0 ? (size_t)n : 0;
}

/* A ps with peer 0 in phase ph (and peer 1 registered where the job must not end with
 * peer 0's BYE). Returns 0, or -1 when the phase could not be reached. */
static int reach(ps_phase ph) {
  static const float grad[N_PARAMS] = {0};
  g_secret.set = ph == PS_PHASE_AUTH;
  g_epochs = 1;
  if (ph == PS_PHASE_STOPPING) {
    /* One worker, one step per epoch (8 samples, batch 8), two test samples: a whole job,
     * so that its last REPORT stops the ps (see below). */
    start(PST_MODE_SYNC, 1);
    peer_connect(0);
    hello_as(0, 0, 8, 2);
    settle();
    pull(0, 0, 0);
    settle();
    push_all(0, 0, 0, grad);
    simple(0, PSTRAIN__MSG_TYPE__BYE, 1, 0);
    pull(0, 1, 1);
    settle();
    return g.p[0].welcome && g.srv.core.store.version == 1 && g.p[0].reply_done ? 0 : -1;
  }
  start(PST_MODE_SYNC, 2);
  if (ph == PS_PHASE_FINISHED) {
    /* A BYE is a finish only from a slot that has trained through its shard (issue 43):
     * two workers of 8 samples each and batch 8, one step, taken; then peer 0's BYE. */
    for (int k = 0; k < 2; k++) {
      peer_connect(k);
      hello_as(k, k, 16, 4);
      settle();
    }
    for (int k = 0; k < 2; k++) pull(k, 0, 0);
    settle();
    for (int k = 0; k < 2; k++) push_all(k, 0, 0, grad);
    settle();
    simple(0, PSTRAIN__MSG_TYPE__BYE, 1, 0);
    settle();
    ps_conn *c = conn_of(0);
    return g.srv.core.store.version == 1 && c && ps_conn_phase(c) == ph ? 0 : -1;
  }
  if (ph == PS_PHASE_AUTH || ph == PS_PHASE_OPEN) {
    peer_connect(0);
    settle();
    ps_conn *c = open_conn();
    return c && (ph == PS_PHASE_AUTH ? c->state == CONN_AUTH : ps_conn_phase(c) == ph) ? 0 : -1;
  }
  join(0);
  join(1);
  if (ph == PS_PHASE_PUSHING || ph == PS_PHASE_PUSHING_PULLED) push_chunk_as(0, 0, 0, 0, grad, 0);
  /* In the middle of a push, a PULL (issue 41) of version 2, which waits (version 1, the
   * one the push builds, would be streamed at once, its reply under way). */
  if (ph == PS_PHASE_PUSHING_PULLED) pull(0, 2, 0);
  /* Version 2 while the ps stands at 0: a pull that waits (version 1 would be streamed at
   * once, chunk by chunk as the step completes). */
  if (ph == PS_PHASE_PULLING) pull(0, 2, 0);
  settle();
  ps_conn *c = conn_of(0);
  return c && ps_conn_phase(c) == ph ? 0 : -1;
}

static uint64_t counted(int type, ps_action a) {
  return type >= 0 && type < PS_RULE_TYPES ? g.srv.net->frames[type][a] : 0;
}

/* One message of `type` in phase ph: the outcome must be the table's action. */
static void one(ps_phase ph, int type) {
  char name[16];
  if (reach(ph) < 0) {
    fprintf(stderr, "FAIL: could not bring a connection %s\n", ps_phase_name(ph));
    g_fail++;
    stop();
    return;
  }
  ps_action want = ps_rule(ph, type);
  /* A BYE from a slot that has not trained through its data is handled as its loss: the
   * connection closes (issue 43). */
  int bye_closes = type == PSTRAIN__MSG_TYPE__BYE && ph != PS_PHASE_STOPPING &&
                   g.p[0].index >= 0 && !ps_slot_trained(&g.srv, 0);
  uint64_t before[PS_ACT_IGNORE + 1], rejected = g.srv.net->rejected;
  for (int a = 0; a <= PS_ACT_IGNORE; a++) before[a] = counted(type, (ps_action)a);
  uint8_t buf[PST_WIRE_MAX_FRAME_HEAD + 64];
  size_t n = 0;
  if (ph == PS_PHASE_STOPPING) {
    /* The frame comes in the same read as the evaluation that completes the job: the ps
     * stops while handling that one, and the reader still holds this one. */
    Pstrain__Header h = PSTRAIN__HEADER__INIT;
    Pstrain__Report r = PSTRAIN__REPORT__INIT;
    r.epoch = 1;
    r.is_eval = 1;
    r.loss_sum = 1.0;
    r.correct = 1;
    r.samples = 2;
    r.weights_version = 1;
    h.type = PSTRAIN__MSG_TYPE__REPORT;
    h.report = &r;
    int m = pst_wire_encode(&h, 0, buf, sizeof buf);
    n = m > 0 ? (size_t)m : 0;
    if (type == PSTRAIN__MSG_TYPE__REPORT) before[PS_ACT_HANDLE]++; /* that one */
  }
  size_t m = frame_of(type, ph, buf + n, sizeof buf - n);
  if (m == 0) {
    fprintf(stderr, "FAIL: cannot encode message type %d\n", type);
    g_fail++;
    stop();
    return;
  }
  send_bytes(0, buf, n + m);
  settle();
  int closed = g.p[0].eof;
  int ok;
  if (ph == PS_PHASE_AUTH || type == PSTRAIN__MSG_TYPE__MSG_INVALID) {
    /* The handshake, or the wire's own checks, refuse it before the table. */
    ok = closed && counted(type, PS_ACT_HANDLE) == before[PS_ACT_HANDLE];
  } else if (want == PS_ACT_CLOSE && closed && counted(type, PS_ACT_CLOSE) == before[PS_ACT_CLOSE]) {
    /* Closed before the table by the wire's caps: before HELLO a connection's reader takes
     * no tensor payload at all. Nothing may have been handled or struck. */
    ok = counted(type, PS_ACT_HANDLE) == before[PS_ACT_HANDLE] &&
         counted(type, PS_ACT_STRIKE) == before[PS_ACT_STRIKE] && g.srv.net->rejected == rejected;
  } else {
    ok = counted(type, want) == before[want] + 1;
    for (int a = 0; a <= PS_ACT_IGNORE; a++)
      if (a != (int)want && counted(type, (ps_action)a) != before[a]) ok = 0;
    switch (want) {
      case PS_ACT_HANDLE: ok = ok && (!closed || ph == PS_PHASE_STOPPING || bye_closes); break;
      case PS_ACT_STRIKE: ok = ok && !closed && g.srv.net->rejected == rejected + 1; break;
      case PS_ACT_CLOSE: ok = ok && closed; break;
      case PS_ACT_IGNORE: ok = ok && g.srv.life.stopping && g.srv.net->rejected == rejected; break;
    }
  }
  if (ok) {
    g_pass++;
  } else {
    g_fail++;
    fprintf(stderr, "FAIL: %s %s: want %s; counted handle %" PRIu64 " strike %" PRIu64
            " close %" PRIu64 " ignore %" PRIu64 " (before: %" PRIu64 " %" PRIu64 " %" PRIu64
            " %" PRIu64 "), rejected %" PRIu64 " -> %" PRIu64 ", %s\n",
            ps_msg_name(type, name, sizeof name), ps_phase_name(ph), ps_action_name(want),
            counted(type, PS_ACT_HANDLE), counted(type, PS_ACT_STRIKE),
            counted(type, PS_ACT_CLOSE), counted(type, PS_ACT_IGNORE), before[0], before[1],
            before[2], before[3], rejected, g.srv.net->rejected, closed ? "closed" : "open");
  }
  stop();
}

/* What the table promises beyond its cells. */
static void table_promises(void) {
  static const int ps_only[] = {PSTRAIN__MSG_TYPE__MSG_INVALID, PSTRAIN__MSG_TYPE__WELCOME,
                                PSTRAIN__MSG_TYPE__WEIGHTS,     PSTRAIN__MSG_TYPE__ACK,
                                PSTRAIN__MSG_TYPE__STATUS,      PSTRAIN__MSG_TYPE__SHUTDOWN,
                                PSTRAIN__MSG_TYPE__EVAL,        PSTRAIN__MSG_TYPE__ERROR,
                                PSTRAIN__MSG_TYPE__DATA};
  for (int ph = 0; ph < PS_PHASE_COUNT; ph++) {
    for (int t = -1; t <= PS_RULE_TYPES; t++) {
      ps_action a = ps_rule((ps_phase)ph, t);
      int worker = ph >= PS_PHASE_WORKER && ph <= PS_PHASE_FINISHED;
      CHECK(a != PS_ACT_STRIKE || worker);
      CHECK((ph == PS_PHASE_STOPPING) == (a == PS_ACT_IGNORE));
      if (ph == PS_PHASE_OPEN)
        CHECK((a == PS_ACT_HANDLE) == (t == PSTRAIN__MSG_TYPE__HELLO ||
                                       t == PSTRAIN__MSG_TYPE__STATUS_REQ ||
                                       t == PSTRAIN__MSG_TYPE__HEARTBEAT));
      if (ph == PS_PHASE_AUTH) CHECK(a == PS_ACT_CLOSE);
      if (worker && t == PSTRAIN__MSG_TYPE__HELLO) CHECK(a == PS_ACT_CLOSE);
    }
    for (size_t i = 0; i < sizeof ps_only / sizeof ps_only[0]; i++)
      CHECK(ps_rule((ps_phase)ph, ps_only[i]) != PS_ACT_HANDLE);
  }
}

int main(void) {
  char err[256];
  pst_log_init("rules_test", getenv("PSTRAIN_TEST_VERBOSE") ? PST_LOG_DEBUG : 0);
  signal(SIGPIPE, SIG_IGN);
  pst_fp_flush_denormals();
  unsetenv("NOTIFY_SOCKET");
  if (sodium_init() < 0) return 1;
  randombytes_buf(g_secret.key, sizeof g_secret.key);
  snprintf(g_secret.source, sizeof g_secret.source, "the test");
  if (pst_model_parse(MODEL_TEXT, "test", &g.model, err, sizeof err) < 0) {
    fprintf(stderr, "model: %s\n", err);
    return 1;
  }
  pst_model_init_params(&g.model, 1, g.init);
  g.threads = 1;
  g.tune = tune;
  table_promises();
  for (int ph = 0; ph < PS_PHASE_COUNT; ph++)
    for (int t = 0; t < PS_RULE_TYPES; t++) one((ps_phase)ph, t);
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
