/* The ps's push/pull core (ps/server.c, ps/net/pull.c, ps/train/update.c, ps/state/store.c), driven in
 * process: a real ps_server on its own loop and fake peers, plain non-blocking sockets on
 * 127.0.0.1 that send one frame at a time and read every frame the ps sends back. Each case
 * runs in milliseconds and checks one rule the multi-process tests can only sample:
 *
 *   1. sync sums are made in worker order whatever order the pushes arrive in: three
 *      workers whose shares cancel differently in float arithmetic end with the same bits
 *      for every arrival order, equal to the optimizer applied to the worker-order sum;
 *   2. a pull of the next version is streamed: each chunk leaves once it is final, not
 *      before, and every chunk of one reply carries the same version;
 *   3. backpressure: a share that arrives before it is its turn waits (the ps stops reading
 *      that connection) and is summed in its turn;
 *   4. a worker that leaves in the middle of a chunk (half a frame sent, then a close): the
 *      step completes without it, the sum rescaled by N/m, and the other worker goes on;
 *   5. async: each push is applied whole as it comes, scaled by N;
 *   6. pushes that come last chunk first give the same bits, and a push that starts in the
 *      middle is refused without closing its connection;
 *   7. a peer that stops in the middle of a payload does not hold up the ps's stop;
 *   8. a peer that stops reading in the middle of a big reply holds up no other peer's
 *      reply, is closed at once, and the reply's hold on the store is let go;
 *   9. the round trip: a worker's exposed wait, said on its next push, meets the ps's part
 *      of it, and the parts come out between 0 and the whole, adding up to it.
 *
 * Every case runs three times: with the loop thread alone, and with I/O threads (ps/net/io.h,
 * two of them, then one) moving every payload and every reply. The peers and the model are
 * ps/test_peers.h's. */
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
#include <uv.h>

#include "common/clock.h"
#include "common/fpenv.h"
#include "common/log.h"
#include "model/model.h"
#include "proto/wire.h"
#include "ps/train/optim.h"
#include "ps/net/conn.h"
#include "ps/server.h"
#include "ps/test_peers.h"

/* A ps for two workers, both registered and each with a pull of version 0 answered. */
static void two_pulling(pst_mode mode) {
  start(mode, 2);
  join(0);
  join(1);
  pull(0, 0, 0);
  pull(1, 0, 0);
  settle();
}

/* The weights after one SGD step from the initial weights, with the gradient `sum` scaled
 * by `scale`: what the ps must publish (the same library, so the same bits). */
static void reference(const float *sum, float scale, float *out) {
  pst_opt_config c;
  pst_opt_defaults(&c);
  c.kind = PST_OPT_SGD;
  c.lr = 0.5f;
  pst_optimizer o;
  pst_opt_init(&o, &c, N_PARAMS);
  pst_opt_begin_step(&o);
  pst_opt_apply(&o, g.init, out, sum, scale, 0, N_PARAMS);
  pst_opt_free(&o);
}

/* Shares whose float sum depends on the order: (a + b) + c = c, but (c + b) + a = 0 where
 * |a| = |b| is so large that c is lost when added to either alone. */
static void shares(float g3[MAX_PEERS][N_PARAMS]) {
  for (int i = 0; i < N_PARAMS; i++) {
    g3[0][i] = 1e8f;
    g3[1][i] = -1e8f;
    g3[2][i] = 1.0f + (float)i;
  }
}

/* One sync step of three peers on a fresh ps: whole pushes, one peer after another in
 * `order`, the ps running in between (a peer whose turn has not come is held back by TCP,
 * not summed early); peers in desc_mask push last chunk first. Every peer's pull of version
 * 1 must be `want`, of one version. */
static void sync_step(const int order[3], unsigned desc_mask, const float *want) {
  start(PST_MODE_SYNC, 3);
  for (int k = 0; k < 3; k++) join(k);
  for (int k = 0; k < 3; k++) pull(k, 0, 0);
  settle();
  for (int k = 0; k < 3; k++)
    CHECK(g.p[k].reply_done && memcmp(g.p[k].weights, g.init, sizeof g.init) == 0);
  float g3[MAX_PEERS][N_PARAMS];
  shares(g3);
  for (int j = 0; j < 3; j++) {
    int k = order[j];
    push_all(k, 0, (desc_mask >> k) & 1, g3[k]);
    settle();
    if (j < 2) CHECK(g.srv.core.store.version == 0);
  }
  CHECK(g.srv.core.store.version == 1);
  for (int k = 0; k < 3; k++) pull(k, 1, 0);
  settle();
  for (int k = 0; k < 3; k++) {
    CHECK(g.p[k].reply_done && g.p[k].reply_version == 1 && !g.p[k].mixed);
    CHECK(memcmp(g.p[k].weights, want, N_PARAMS * sizeof(float)) == 0);
  }
  stop();
}

static const int k_orders[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};

/* The worker-order sum of the three shares, after one SGD step. */
static void worker_order_want(float *want) {
  float g3[MAX_PEERS][N_PARAMS], sum[N_PARAMS];
  shares(g3);
  for (int i = 0; i < N_PARAMS; i++) sum[i] = (g3[0][i] + g3[1][i]) + g3[2][i];
  reference(sum, 1.0f, want);
}

/* 1 and 3: every arrival order of three pushes gives the worker-order sum, bit for bit. */
static void test_sync_order(void) {
  float want[N_PARAMS];
  worker_order_want(want);
  for (int o = 0; o < 6; o++) sync_step(k_orders[o], 0, want);
}

/* 2: the pull of version 1 is answered chunk by chunk as chunks become final. */
static void test_streamed_pull(void) {
  float g3[MAX_PEERS][N_PARAMS], sum[N_PARAMS], want[N_PARAMS];
  shares(g3);
  for (int i = 0; i < N_PARAMS; i++) sum[i] = g3[2][i] + g3[2][i];
  reference(sum, 1.0f, want);
  two_pulling(PST_MODE_SYNC);
  for (int c = 0; c < N_CHUNKS; c++) push_chunk(0, 0, c, g3[2], 0);
  pull(0, 1, 0); /* asked before anything of version 1 is final */
  settle();
  CHECK(g.p[0].chunks == 0);
  for (int c = 0; c < N_CHUNKS; c++) {
    push_chunk(1, 0, c, g3[2], 0);
    settle();
    /* Chunk c is final now, and only chunks up to c have gone out. */
    CHECK(g.p[0].chunks == c + 1);
    CHECK(g.p[0].reply_version == 1 && !g.p[0].mixed);
    CHECK(g.p[0].reply_done == (c + 1 == N_CHUNKS));
  }
  CHECK(memcmp(g.p[0].weights, want, sizeof want) == 0);
  stop();
}

/* 4: peer 1 dies in the middle of its second chunk's frame. Its first chunk was summed; the
 * step completes with chunk 0 the mean of both shares and chunks 1-2 peer 0's alone, scaled
 * by N/m = 2, and peer 0 trains on. */
static void test_leave_mid_chunk(void) {
  float g3[MAX_PEERS][N_PARAMS], want[N_PARAMS], sum[N_PARAMS];
  shares(g3);
  two_pulling(PST_MODE_SYNC);
  for (int c = 0; c < N_CHUNKS; c++) push_chunk(0, 0, c, g3[0], 0);
  push_chunk(1, 0, 0, g3[1], 0);
  push_chunk(1, 0, 1, g3[1], 30); /* the header and part of the payload */
  settle();
  CHECK(g.srv.core.store.version == 0);
  peer_close(1);
  settle();
  CHECK(g.srv.core.store.version == 1 && !g.srv.life.stopping);
  CHECK(g.srv.roster.workers[1].lost);
  /* Chunk 0 had both shares (scale 1); chunks 1 and 2 only peer 0's (scale 2). */
  float w0[N_PARAMS], w1[N_PARAMS];
  for (int i = 0; i < N_PARAMS; i++) sum[i] = g3[0][i] + g3[1][i];
  reference(sum, 1.0f, w0);
  reference(g3[0], 2.0f, w1);
  for (int i = 0; i < N_PARAMS; i++) want[i] = i < CHUNK ? w0[i] : w1[i];
  pull(0, 1, 0);
  settle();
  CHECK(g.p[0].reply_done && g.p[0].reply_version == 1);
  CHECK(memcmp(g.p[0].weights, want, sizeof want) == 0);
  /* Peer 0 goes on alone: its next push makes version 2. */
  for (int c = 0; c < N_CHUNKS; c++) push_chunk(0, 1, c, g3[2], 0);
  settle();
  CHECK(g.srv.core.store.version == 2);
  stop();
}

/* 5: async pushes are applied whole, one at a time, each scaled by N. */
static void test_async(void) {
  float g3[MAX_PEERS][N_PARAMS], want[N_PARAMS];
  shares(g3);
  reference(g3[2], 2.0f, want);
  two_pulling(PST_MODE_ASYNC);
  for (int c = 0; c < N_CHUNKS; c++) push_chunk(1, 0, c, g3[2], 0);
  settle();
  CHECK(g.srv.core.store.version == 1);
  pull(0, 0, 0);
  settle();
  CHECK(g.p[0].reply_done && g.p[0].reply_version == 1 && !g.p[0].mixed);
  CHECK(memcmp(g.p[0].weights, want, sizeof want) == 0);
  stop();
}

/* 6: pushes that come last chunk first, from some peers or all, in every arrival order:
 * the same worker-order sum, bit for bit, and pulls of a single version. A push that starts
 * at a middle chunk is refused (counted against its peer, the rest of it dropped), and the
 * peer's next push is taken. */
static void test_push_directions(void) {
  float want[N_PARAMS], g3[MAX_PEERS][N_PARAMS];
  worker_order_want(want);
  shares(g3);
  static const unsigned masks[] = {1, 2, 5, 7};
  for (size_t m = 0; m < sizeof masks / sizeof masks[0]; m++)
    for (int o = 0; o < 6; o++) sync_step(k_orders[o], masks[m], want);

  /* A push that leaves its run before the run's end (chunk 1, then 0 before 2; ps/net/
   * push_order.h): refused, dropped to its end; then a good one. */
  start(PST_MODE_SYNC, 1);
  join(0);
  pull(0, 0, 0);
  settle();
  push_chunk_as(0, 0, 1, 0, g3[2], 0);
  push_chunk_as(0, 0, 0, 0, g3[2], 0);
  push_chunk_as(0, 0, 2, 1, g3[2], 0);
  settle();
  CHECK(g.srv.net->rejected == 1 && g.srv.core.store.version == 0 && g.p[0].fd >= 0 && !g.p[0].eof);
  push_all(0, 0, 1, g3[2]);
  settle();
  CHECK(g.srv.core.store.version == 1 && g.srv.net->rejected == 1);
  stop();
}

/* 7: a peer that stops in the middle of a payload (with I/O threads, one of them is waiting
 * for its bytes): the ps stops at once all the same, and its loop closes cleanly. A second
 * peer's step is untouched by the first one's half chunk. */
static void test_stall_mid_payload(void) {
  float g3[MAX_PEERS][N_PARAMS];
  shares(g3);
  two_pulling(PST_MODE_SYNC);
  push_chunk(1, 0, 0, g3[1], 30); /* peer 1's share comes second: it waits, half read */
  for (int c = 0; c < N_CHUNKS; c++) push_chunk(0, 0, c, g3[0], 0);
  settle();
  CHECK(g.srv.core.store.version == 0 && g.srv.core.upd.shares[0] == 1);
  int reading = 0;
  for (ps_conn *c = g.srv.net->conns; c; c = c->next) reading += ps_io_busy(&c->rjob);
  CHECK(reading == (g.io_min ? 1 : 0));
  double t0 = pst_now();
  ps_server_stop(&g.srv, "the test stops the ps", 0, 0);
  stop();
  CHECK(pst_now() - t0 < 2.0);
}

/* 8: a peer that stops reading in the middle of a reply too big for the sockets' buffers
 * (with I/O threads, one of them is blocked writing it): a hard close, as the silence
 * timeout makes, takes the reply back at once and lets go of its hold on the store. */
static void test_deaf_peer(void) {
  start_with(PST_MODE_SYNC, 2, &g.big, g.big_init, 256 * 1024);
  join(0);
  join(1);
  int small = 4096;
  setsockopt(g.p[0].fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  g.p[0].deaf = 1;
  pull(0, 0, 0);
  settle();
  /* Peer 1's reply goes whole while peer 0's waits (with one I/O thread, the same one). */
  pull(1, 0, 0);
  settle();
  CHECK(g.p[1].reply_done && g.p[1].reply_version == 0 &&
        memcmp(g.p[1].weights, g.big_init, g.big.n_params * sizeof(float)) == 0);
  ps_conn *c = NULL;
  for (ps_conn *k = g.srv.net->conns; k; k = k->next)
    if (k->worker == 0) c = k;
  CHECK(c && c->pull_writing && c->pull_done < g.srv.core.upd.n_chunks);
  CHECK(c && ps_io_busy(&c->wjob) == (g.io_min ? 1 : 0));
  CHECK(g.srv.core.store.refs[g.srv.core.store.front] == 1);
  double t0 = pst_now();
  if (c) ps_conn_close(c, "the test's silence timeout", 1);
  settle();
  CHECK(pst_now() - t0 < 2.0);
  CHECK(g.srv.net->n_conns == 1 && g.srv.core.store.refs[0] == 0 && g.srv.core.store.refs[1] == 0);
  stop();
}

/* 9: one worker's step, its pull, and its next push saying the step's exposed wait (5 ms,
 * more than the ps's part here): one step measured, the whole as said, and the parts
 * between 0 and it; the ps's sums and optimizer passes were timed. A push that says nothing
 * (an older worker) and the first push of a session (no step before) count nothing. */
static void test_round_trip(void) {
  float grad[N_PARAMS];
  for (int i = 0; i < N_PARAMS; i++) grad[i] = 0.25f;
  start(PST_MODE_SYNC, 1);
  join(0);
  pull(0, 0, 0);
  settle();
  g.wait_us = 7000; /* no step before this push: its figure has nothing to meet */
  push_all(0, 0, 0, grad);
  pull(0, 1, 0);
  settle();
  const pst_quant *rt = g.srv.obs.metrics.round_trip;
  CHECK(rt[PST_RT_EXPOSED].n == 0);
  CHECK(g.srv.core.upd.opt_seconds > 0);
  push_all(0, 1, 0, grad); /* says nothing */
  pull(0, 2, 0);
  settle();
  CHECK(rt[PST_RT_EXPOSED].n == 0);
  g.wait_us = 5000;
  push_all(0, 2, 0, grad);
  settle();
  CHECK(g.srv.core.store.version == 3);
  for (int i = 0; i < PST_RT_PARTS; i++) {
    double v = pst_quant_value(&rt[i], 0.5);
    CHECK(rt[i].n == 1 && v >= 0 && v <= 0.00505);
  }
  CHECK(fabs(pst_quant_value(&rt[PST_RT_EXPOSED], 0.5) - 0.005) < 0.00005);
  /* The parts add up to the whole (each within its 1% bucket). */
  double parts = 0;
  for (int i = PST_RT_WIRE; i < PST_RT_PARTS; i++) parts += pst_quant_value(&rt[i], 0.5);
  CHECK(fabs(parts - 0.005) < 0.0001);
  stop();
}

/* The shares of case 1 are 1e8 and more, over the default gradient limit (ps/train/update.h). */
static void tune(ps_options *o) { o->grad_limit = 1e9; }

int main(void) {
  char err[256];
  pst_log_init("server_test", getenv("PSTRAIN_TEST_VERBOSE") ? PST_LOG_DEBUG : 0);
  signal(SIGPIPE, SIG_IGN);
  pst_fp_flush_denormals();
  unsetenv("NOTIFY_SOCKET");
  if (pst_model_parse(MODEL_TEXT, "test", &g.model, err, sizeof err) < 0 ||
      g.model.n_params != N_PARAMS) {
    fprintf(stderr, "model: %s\n", err);
    return 1;
  }
  pst_model_init_params(&g.model, 1, g.init);
  g.tune = tune;
  if (pst_model_parse("input 2048\ndense 2048 softmax\n", "big", &g.big, err, sizeof err) < 0 ||
      !(g.big_init = calloc(g.big.n_params, sizeof(float)))) {
    fprintf(stderr, "model: %s\n", err);
    return 1;
  }
  /* Every case on the loop thread alone, then with every payload and every reply moved by
   * I/O threads (the threshold at one byte: two threads, then one that every job shares),
   * which must not change a bit. */
  const struct { int threads; uint32_t io_min; } runs[] = {{1, 0}, {3, 1}, {2, 1}};
  for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
    g.threads = runs[r].threads;
    g.io_min = runs[r].io_min;
    int failed = g_fail;
    test_sync_order();
    test_streamed_pull();
    test_leave_mid_chunk();
    test_async();
    test_push_directions();
    test_stall_mid_payload();
    test_deaf_peer();
    test_round_trip();
    printf("%d thread%s%s: %s\n", g.threads, g.threads == 1 ? "" : "s",
           g.io_min ? ", every payload on the I/O threads" : "", g_fail == failed ? "ok" : "FAILED");
  }
  printf("%d passed, %d failed\n", g_pass, g_fail);
  free(g.big_init);
  return g_fail ? 1 : 0;
}
