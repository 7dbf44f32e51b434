/* Writes the seed corpora of tests/fuzz/corpus/<target>/: make_seeds CORPUS_DIR.
 *
 * Seeds are small valid inputs of each format plus a few edge cases; the fuzzers start
 * from them (and the CI's short runs only get anywhere because of them). They are
 * committed; this program is how they were made, kept so that a protocol or format change
 * can regenerate them. Frames are encoded with proto/wire.c itself. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "common/codec.h"
#include "model/model.h"
#include "proto/wire.h"

static const char *root;

typedef struct {
  uint8_t b[1 << 17];
  size_t n;
} buf;

static void put(buf *o, const void *p, size_t n) {
  if (o->n + n > sizeof o->b) {
    fprintf(stderr, "make_seeds: seed too big\n");
    exit(1);
  }
  memcpy(o->b + o->n, p, n);
  o->n += n;
}
static void put8(buf *o, uint8_t v) { put(o, &v, 1); }
static void put16(buf *o, uint16_t v) {
  uint8_t b[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
  put(o, b, 2);
}
static void put_be32(buf *o, uint32_t v) {
  uint8_t b[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
  put(o, b, 4);
}

static void save(const char *target, const char *name, const void *p, size_t n) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", root, target);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/%s/%s", root, target, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
    fprintf(stderr, "make_seeds: %s: %s\n", path, strerror(errno));
    exit(1);
  }
}
static void save_buf(const char *target, const char *name, const buf *o) {
  save(target, name, o->b, o->n);
}
static void save_str(const char *target, const char *name, const char *s) {
  save(target, name, s, strlen(s));
}

/* ---- frames ---- */

static void frame(buf *o, Pstrain__Header *h, uint32_t count, float fill) {
  static uint8_t b[PST_WIRE_MAX_FRAME_HEAD];
  int n = pst_wire_encode(h, count * 4, b, sizeof b);
  if (n < 0) exit(1);
  put(o, b, (size_t)n);
  for (uint32_t i = 0; i < count; i++) {
    float v = fill * (float)(i % 5);
    put(o, &v, 4);
  }
}
static void hello(buf *o, int index) {
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  Pstrain__Hello he = PSTRAIN__HELLO__INIT;
  he.worker_name = "seed";
  he.requested_index = index;
  h.type = PSTRAIN__MSG_TYPE__HELLO;
  h.hello = &he;
  frame(o, &h, 0, 0);
}
/* A HELLO that knows the tensor encodings (issue 27), and a PUSH chunk in fp16. */
static void hello_enc(buf *o, int index) {
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  Pstrain__Hello he = PSTRAIN__HELLO__INIT;
  he.worker_name = "seed";
  he.requested_index = index;
  he.encodings = PST_ENC_KNOWN;
  h.type = PSTRAIN__MSG_TYPE__HELLO;
  h.hello = &he;
  frame(o, &h, 0, 0);
}
static void chunk_fp16(buf *o, uint64_t version, uint64_t offset, uint32_t count, int last) {
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  static uint8_t b[PST_WIRE_MAX_FRAME_HEAD];
  h.type = PSTRAIN__MSG_TYPE__PUSH;
  h.version = version;
  h.offset = offset;
  h.count = count;
  h.last = last;
  int n = pst_wire_encode(&h, count * 2, b, sizeof b);
  if (n < 0) exit(1);
  put(o, b, (size_t)n);
  for (uint32_t i = 0; i < count; i++) {
    uint16_t v = pst_fp16_from_float(0.01f * (float)(i % 5));
    put(o, &v, 2);
  }
}
/* A chunk whose payload is in the peer's shared region at pos (the ring flag, issue 41): no
 * payload on the stream. */
static void ring_chunk(buf *o, uint64_t offset, uint32_t count, uint64_t pos) {
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  static uint8_t b[PST_WIRE_MAX_FRAME_HEAD];
  h.type = PSTRAIN__MSG_TYPE__PUSH;
  h.offset = offset;
  h.count = count;
  h.ring_pos = pos;
  int n = pst_wire_encode(&h, count * 4, b, sizeof b);
  if (n < 0) exit(1);
  b[6] = (uint8_t)PST_WIRE_FLAG_RING;
  put(o, b, (size_t)n);
}
static void simple(buf *o, Pstrain__MsgType t, uint64_t version, int last) {
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  h.type = t;
  h.version = version;
  h.last = last;
  frame(o, &h, 0, 0);
}
static void chunk(buf *o, Pstrain__MsgType t, uint64_t version, uint64_t offset, uint32_t count,
                  int last) {
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  h.type = t;
  h.version = version;
  h.offset = offset;
  h.count = count;
  h.last = last;
  frame(o, &h, count, 0.01f);
}
static void report(buf *o, int eval, uint32_t epoch, uint64_t samples) {
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  Pstrain__Report r = PSTRAIN__REPORT__INIT;
  r.epoch = epoch;
  r.is_eval = eval;
  r.samples = samples;
  r.correct = samples / 2;
  r.loss_sum = 0.7 * (double)samples;
  h.type = PSTRAIN__MSG_TYPE__REPORT;
  h.report = &r;
  frame(o, &h, 0, 0);
}
static void status(buf *o, int workers) {
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  Pstrain__Status st = PSTRAIN__STATUS__INIT;
  Pstrain__WorkerStatus ws[4], *wp[4];
  for (int i = 0; i < workers; i++) {
    pstrain__worker_status__init(&ws[i]);
    ws[i].index = (uint32_t)i;
    ws[i].name = "w";
    ws[i].pushes = 3;
    wp[i] = &ws[i];
  }
  st.n_workers = (size_t)workers;
  st.workers = wp;
  st.version = 7;
  h.type = PSTRAIN__MSG_TYPE__STATUS;
  h.status = &st;
  frame(o, &h, 0, 0);
}

static void wire_seeds(void) {
  const char *t = "wire_reader";
  buf o;
  o.n = 0; put8(&o, 0x00); put8(&o, 1); hello(&o, -1);
  save_buf(t, "hello", &o);
  o.n = 0; put8(&o, 0x02); put8(&o, 7); hello(&o, 0); simple(&o, PSTRAIN__MSG_TYPE__PULL, 0, 0);
  chunk(&o, PSTRAIN__MSG_TYPE__PUSH, 0, 0, 4, 0); chunk(&o, PSTRAIN__MSG_TYPE__PUSH, 0, 4, 4, 0);
  chunk(&o, PSTRAIN__MSG_TYPE__PUSH, 0, 8, 2, 1); report(&o, 0, 1, 8); report(&o, 1, 1, 10);
  simple(&o, PSTRAIN__MSG_TYPE__BYE, 0, 0);
  save_buf(t, "worker_session_random_splits", &o);
  o.n = 0; put8(&o, 0x0d); put8(&o, 3);
  for (int i = 0; i < 6; i++) simple(&o, PSTRAIN__MSG_TYPE__HEARTBEAT, (uint64_t)i, 0);
  status(&o, 3);
  save_buf(t, "pauses_odd_frames_tiny_reads", &o);
  /* A payload of 16 KiB or more is read straight into its destination. */
  o.n = 0; put8(&o, 0x00); put8(&o, 0); chunk(&o, PSTRAIN__MSG_TYPE__WEIGHTS, 3, 0, 4100, 0);
  chunk(&o, PSTRAIN__MSG_TYPE__WEIGHTS, 3, 4100, 16, 1);
  save_buf(t, "large_payload_direct", &o);
  /* Bit 7: the reader has a ring; chunks from the peer's region, a plain one between, then one
   * behind what was read; and one that would run past the region's end. */
  o.n = 0; put8(&o, 0x80); put8(&o, 0); ring_chunk(&o, 0, 100, 0); ring_chunk(&o, 100, 50, 400);
  chunk(&o, PSTRAIN__MSG_TYPE__PUSH, 0, 150, 4, 0); ring_chunk(&o, 154, 10, 64);
  save_buf(t, "ring_chunks_then_behind", &o);
  o.n = 0; put8(&o, 0x82); put8(&o, 5); ring_chunk(&o, 0, 100, 65000);
  save_buf(t, "ring_chunk_past_region", &o);
  o.n = 0; put8(&o, 0x00); put8(&o, 0); ring_chunk(&o, 0, 100, 0);
  save_buf(t, "ring_chunk_without_ring", &o);
  o.n = 0; put8(&o, 0x04); put8(&o, 9); chunk(&o, PSTRAIN__MSG_TYPE__WEIGHTS, 3, 0, 4100, 1);
  status(&o, 1);
  save_buf(t, "large_payload_pause", &o);
  o.n = 0; put8(&o, 0x60); put8(&o, 0); chunk(&o, PSTRAIN__MSG_TYPE__PUSH, 0, 3, 2, 0);
  save_buf(t, "payload_refused", &o);
  o.n = 0; put8(&o, 0x60); put8(&o, 0); chunk(&o, PSTRAIN__MSG_TYPE__PUSH, 0, 5, 2, 0);
  save_buf(t, "payload_no_destination", &o);
  o.n = 0; put8(&o, 0x40); put8(&o, 0);
  {
    Pstrain__Header h = PSTRAIN__HEADER__INIT;
    Pstrain__ErrorInfo e = PSTRAIN__ERROR_INFO__INIT;
    e.reason = "worker failed";
    h.type = PSTRAIN__MSG_TYPE__ERROR;
    h.error = &e;
    frame(&o, &h, 0, 0);
  }
  save_buf(t, "error_frame_refused", &o);
  /* Edge cases of the prefix: magic, version, flags, lengths. */
  o.n = 0; put8(&o, 0); put8(&o, 0); put(&o, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27);
  save_buf(t, "bad_magic_http", &o);
  uint8_t p[16];
  o.n = 0; put8(&o, 0); put8(&o, 0); pst_wire_prefix_encode(p, 0, 0); put(&o, p, 16);
  save_buf(t, "header_len_zero", &o);
  o.n = 0; put8(&o, 0); put8(&o, 0); pst_wire_prefix_encode(p, PST_WIRE_MAX_HEADER + 1, 0);
  put(&o, p, 16);
  save_buf(t, "header_len_over", &o);
  o.n = 0; put8(&o, 0x10); put8(&o, 0); pst_wire_prefix_encode(p, 2, 8192); put(&o, p, 16);
  put(&o, "\x08\x05", 2);
  save_buf(t, "payload_over_small_cap", &o);
  o.n = 0; put8(&o, 0); put8(&o, 0); pst_wire_prefix_encode(p, 2, 0); p[4] = 2; put(&o, p, 16);
  save_buf(t, "version_2", &o);
  o.n = 0; put8(&o, 0); put8(&o, 0); pst_wire_prefix_encode(p, 2, 0); p[6] = 1; put(&o, p, 16);
  save_buf(t, "flags_set", &o);
  o.n = 0; put8(&o, 0); put8(&o, 0); pst_wire_prefix_encode(p, 2, 0); put(&o, p, 16);
  put(&o, "\x08\x63", 2);
  save_buf(t, "unknown_type", &o);
  o.n = 0; put8(&o, 0); put8(&o, 0); pst_wire_prefix_encode(p, 4, 12); put(&o, p, 16);
  put(&o, "\x08\x05\x20\x02", 4); put(&o, "abcdefghijkl", 12);
  save_buf(t, "count_payload_mismatch", &o);
  o.n = 0; put8(&o, 0); put8(&o, 0); pst_wire_prefix_encode(p, 3, 0); put(&o, p, 16);
  put(&o, "\x08\x01\x52", 3);
  save_buf(t, "header_does_not_unpack", &o);
  o.n = 0; put8(&o, 0x03); put8(&o, 5); hello(&o, 1); o.n -= 3;
  save_buf(t, "truncated", &o);
}

/* ---- ps_server operations (fuzz_ps_server.c) ---- */

enum { OP_W8 = 0, OP_W16 = 1, OP_RUN = 2, OP_HALF = 3, OP_CLOSE = 4, OP_CONNECT = 5,
       OP_MACRO = 6, OP_STOP = 7 };
enum { M_HELLO = 0, M_PULL, M_PUSH, M_CHUNK, M_REPORT, M_EVAL, M_BYE, M_STATUS, M_HEARTBEAT,
       M_ERROR, M_AUTH, M_ROLLBACK, M_HELLO_DATA, M_SUBSET, M_PS_ONLY, M_COUNT };

static void op(buf *o, int kind, int k) { put8(o, (uint8_t)(kind << 2 | k)); }
static void macro(buf *o, int k, int m, uint8_t p) {
  op(o, OP_MACRO, k);
  put8(o, (uint8_t)m);
  put8(o, p);
}
static void raw(buf *o, int k, const buf *frames) {
  op(o, OP_W16, k);
  put16(o, (uint16_t)frames->n);
  put(o, frames->b, frames->n);
}

/* A whole job of n workers through the macros: register, then per step pull and push. */
static void job(buf *o, int n, int steps) {
  for (int k = 0; k < n; k++) macro(o, k, M_HELLO, (uint8_t)(k + 1));
  op(o, OP_RUN, 0);
  for (int s = 0; s < steps; s++) {
    for (int k = 0; k < n; k++) macro(o, k, M_PULL, (uint8_t)s);
    op(o, OP_RUN, 0);
    for (int k = n - 1; k >= 0; k--) macro(o, k, M_PUSH, (uint8_t)s);
    op(o, OP_RUN, 0);
  }
  for (int k = 0; k < n; k++) macro(o, k, M_PULL, (uint8_t)steps);
  for (int k = 0; k < n; k++) macro(o, k, M_EVAL, 5); /* epoch 1, one sample */
  for (int k = 0; k < n; k++) macro(o, k, M_BYE, 0);
  op(o, OP_RUN, 0);
}

/* Every macro in every phase of a connection (ps/net/rules.h): client 0 is brought to the phase
 * (client 1 registered beside it, so that its BYE does not end the job), then sends it. */
static void phase_seeds(const char *t) {
  static const char *const phases[] = {"open", "registered", "mid_push", "pulling", "finished",
                                       "stopping", "secret"};
  for (int ph = 0; ph < (int)(sizeof phases / sizeof phases[0]); ph++) {
    for (int m = 0; m < M_COUNT; m++) {
      for (int variant = 0; variant < (m == M_PS_ONLY ? 6 : 1); variant++) {
        buf o;
        o.n = 0;
        put8(&o, 0x04);                    /* sync, 2 workers */
        put8(&o, ph == 6 ? 0x20 : 0x00);   /* a secret for "secret": frames before the handshake */
        if (ph >= 1 && ph <= 5) {
          macro(&o, 0, M_HELLO_DATA, 0);   /* 8 training samples, 1 test sample */
          macro(&o, 1, M_HELLO_DATA, 1);
          op(&o, OP_RUN, 0);
        }
        if (ph == 2) macro(&o, 0, M_CHUNK, 0); /* chunk 0 of version 0 */
        if (ph == 3) macro(&o, 0, M_PULL, 2);  /* version 2: waits */
        if (ph == 4) macro(&o, 0, M_BYE, 0);
        if (ph == 5) op(&o, OP_STOP, 0);
        if (ph != 0 && ph != 6) op(&o, OP_RUN, 0);
        macro(&o, 0, m, (uint8_t)(m == M_PS_ONLY ? variant : 0x21));
        op(&o, OP_RUN, 0);
        char name[64];
        snprintf(name, sizeof name, "phase_%s_macro_%d%s%c", phases[ph], m,
                 m == M_PS_ONLY ? "_" : "", m == M_PS_ONLY ? (char)('a' + variant) : '\0');
        save_buf(t, name, &o);
      }
    }
  }
}

static void ps_seeds(void) {
  const char *t = "ps_server";
  buf o, f;
  phase_seeds(t);
  o.n = 0; put8(&o, 0x04); put8(&o, 0x00); job(&o, 2, 3);
  save_buf(t, "sync_2_workers_job", &o);
  o.n = 0; put8(&o, 0x01); put8(&o, 0x10); job(&o, 1, 4);
  save_buf(t, "async_1_worker_job", &o);
  o.n = 0; put8(&o, 0x0a); put8(&o, 0x09); job(&o, 3, 3);
  save_buf(t, "ssp_3_workers_job", &o);
  o.n = 0; put8(&o, 0x88); put8(&o, 0x00); job(&o, 3, 2);
  save_buf(t, "sync_3_workers_one_chunk", &o);
  o.n = 0; put8(&o, 0x24); put8(&o, 0x00); job(&o, 2, 2);
  save_buf(t, "sync_backup_worker", &o);
  o.n = 0; put8(&o, 0x10); put8(&o, 0x04); job(&o, 1, 2);
  save_buf(t, "half_close_at_end_2_epochs", &o);
  /* A worker lost mid-step and its replacement (on-worker-loss wait). */
  o.n = 0; put8(&o, 0x44); put8(&o, 0);
  macro(&o, 0, M_HELLO, 1); macro(&o, 1, M_HELLO, 2); op(&o, OP_RUN, 0);
  macro(&o, 0, M_PULL, 0); macro(&o, 1, M_PULL, 0); op(&o, OP_RUN, 0);
  macro(&o, 0, M_CHUNK, 0); op(&o, OP_RUN, 0); op(&o, OP_CLOSE, 0); op(&o, OP_RUN, 0);
  macro(&o, 2, M_HELLO, 1); macro(&o, 2, M_PULL, 0); macro(&o, 2, M_PUSH, 0);
  macro(&o, 1, M_PUSH, 0); op(&o, OP_RUN, 0); macro(&o, 1, M_STATUS, 0); op(&o, OP_RUN, 0);
  save_buf(t, "worker_lost_and_replaced", &o);
  /* Stopped with pulls and pushes in flight, as on SIGTERM. */
  o.n = 0; put8(&o, 0x04); put8(&o, 0);
  macro(&o, 0, M_HELLO, 1); macro(&o, 1, M_HELLO, 2); macro(&o, 0, M_PULL, 1);
  macro(&o, 1, M_CHUNK, 0); op(&o, OP_RUN, 0); op(&o, OP_STOP | 0x10, 0); op(&o, OP_RUN, 0);
  macro(&o, 1, M_HELLO, 2);
  save_buf(t, "stopped_mid_step", &o);
  /* With the cluster secret: handshakes first (macro and raw), then a job. */
  o.n = 0; put8(&o, 0x04); put8(&o, 0x20);
  macro(&o, 0, M_AUTH, 0); macro(&o, 1, M_AUTH, 0); op(&o, OP_RUN, 0); job(&o, 2, 1);
  save_buf(t, "secret_sync_job", &o);
  o.n = 0; put8(&o, 0x01); put8(&o, 0x20); op(&o, OP_W8, 0); put8(&o, 36);
  put(&o, "PSTA0123456789abcdef0123456789abcdef", 36); op(&o, OP_RUN, 0);
  macro(&o, 0, M_HELLO, 0); macro(&o, 1, M_HELLO, 0); op(&o, OP_W8, 2); put8(&o, 40);
  put(&o, "PSTA0123456789abcdef0123456789abcdefXXXX", 40); op(&o, OP_RUN, 0);
  save_buf(t, "secret_raw_handshakes", &o);
  /* --max-connections 2 with four clients. */
  o.n = 0; put8(&o, 0x08); put8(&o, 0x40);
  macro(&o, 0, M_STATUS, 0); macro(&o, 1, M_HELLO, 0); op(&o, OP_RUN, 0);
  macro(&o, 2, M_STATUS, 0); op(&o, OP_RUN, 0); macro(&o, 3, M_HELLO, 0); op(&o, OP_RUN, 0);
  macro(&o, 0, M_HELLO, 0); op(&o, OP_RUN, 0);
  save_buf(t, "max_connections", &o);
  /* Raw frames written as bytes: the fuzzer mutates these directly. */
  f.n = 0; hello(&f, -1); simple(&f, PSTRAIN__MSG_TYPE__PULL, 0, 0);
  chunk(&f, PSTRAIN__MSG_TYPE__PUSH, 0, 0, 4, 0); chunk(&f, PSTRAIN__MSG_TYPE__PUSH, 0, 4, 4, 0);
  chunk(&f, PSTRAIN__MSG_TYPE__PUSH, 0, 8, 2, 1); simple(&f, PSTRAIN__MSG_TYPE__PULL, 1, 0);
  simple(&f, PSTRAIN__MSG_TYPE__STATUS_REQ, 0, 0); report(&f, 0, 1, 8);
  report(&f, 1, 1, 4); simple(&f, PSTRAIN__MSG_TYPE__BYE, 0, 0);
  simple(&f, PSTRAIN__MSG_TYPE__PULL, 0, 1);
  o.n = 0; put8(&o, 0x01); put8(&o, 0); raw(&o, 0, &f); op(&o, OP_RUN, 0);
  save_buf(t, "raw_async_session", &o);
  o.n = 0; put8(&o, 0x00); put8(&o, 0); raw(&o, 0, &f);
  save_buf(t, "raw_sync_session", &o);
  /* Messages a registered worker may send, before registering. */
  f.n = 0; simple(&f, PSTRAIN__MSG_TYPE__STATUS_REQ, 0, 0);
  chunk(&f, PSTRAIN__MSG_TYPE__PUSH, 0, 0, 4, 0);
  o.n = 0; put8(&o, 0x00); put8(&o, 0); raw(&o, 1, &f); op(&o, OP_RUN, 1);
  save_buf(t, "push_before_hello", &o);
  /* Garbage on one connection while another trains. */
  o.n = 0; put8(&o, 0x01); put8(&o, 0); macro(&o, 0, M_HELLO, 0); op(&o, OP_W8, 1); put8(&o, 8);
  put(&o, "PSTR\x01\x00\x00\x00", 8); macro(&o, 0, M_PULL, 0); macro(&o, 0, M_PUSH, 0);
  op(&o, OP_RUN, 0);
  save_buf(t, "garbage_beside_a_worker", &o);
  /* Out-of-order chunks, a second PULL, a second HELLO, a wrong fingerprint. */
  o.n = 0; put8(&o, 0x00); put8(&o, 0); macro(&o, 0, M_HELLO, 0); macro(&o, 0, M_CHUNK, 0x20);
  macro(&o, 1, M_HELLO, 0x80); macro(&o, 2, M_HELLO, 0); macro(&o, 2, M_PULL, 3);
  macro(&o, 2, M_PULL, 3); macro(&o, 3, M_HELLO, 0); macro(&o, 3, M_HELLO, 0);
  op(&o, OP_RUN, 0);
  save_buf(t, "protocol_violations", &o);
  /* Issue 27: jobs that push fp16 and pull bf16 (data[1] bit 7). */
  o.n = 0; put8(&o, 0x04); put8(&o, 0x80); job(&o, 2, 3);
  save_buf(t, "sync_2_workers_fp16_bf16_job", &o);
  o.n = 0; put8(&o, 0x01); put8(&o, 0x90); job(&o, 1, 4);
  save_buf(t, "async_1_worker_fp16_bf16_job", &o);
  /* Top-k pushes (bits 7 and 0): a job, and a push with a repeated index. */
  o.n = 0; put8(&o, 0x04); put8(&o, 0x81); job(&o, 2, 3);
  save_buf(t, "sync_2_workers_topk_job", &o);
  o.n = 0; put8(&o, 0x04); put8(&o, 0x81);
  macro(&o, 0, M_HELLO, 1); macro(&o, 1, M_HELLO, 2); op(&o, OP_RUN, 0);
  macro(&o, 0, M_PULL, 0); op(&o, OP_RUN, 0); macro(&o, 0, M_PUSH, 0xc0); op(&o, OP_RUN, 0);
  save_buf(t, "topk_repeated_index", &o);
  /* int8 pushes (bits 7 and 1): a job, and a chunk one byte short. */
  o.n = 0; put8(&o, 0x04); put8(&o, 0x82); job(&o, 2, 3);
  save_buf(t, "sync_2_workers_int8_job", &o);
  o.n = 0; put8(&o, 0x04); put8(&o, 0x82);
  macro(&o, 0, M_HELLO, 1); macro(&o, 1, M_HELLO, 2); op(&o, OP_RUN, 0);
  macro(&o, 0, M_PULL, 0); op(&o, OP_RUN, 0); macro(&o, 0, M_PUSH, 0xc0); op(&o, OP_RUN, 0);
  save_buf(t, "int8_short_chunk", &o);
  /* A push with an fp16 infinity (macro byte 0xc0), then a good one. */
  o.n = 0; put8(&o, 0x04); put8(&o, 0x80);
  macro(&o, 0, M_HELLO, 1); macro(&o, 1, M_HELLO, 2); op(&o, OP_RUN, 0);
  macro(&o, 0, M_PULL, 0); macro(&o, 1, M_PULL, 0); op(&o, OP_RUN, 0);
  macro(&o, 0, M_PUSH, 0xc0); macro(&o, 1, M_PUSH, 0); op(&o, OP_RUN, 0);
  macro(&o, 0, M_PUSH, 0); op(&o, OP_RUN, 0); macro(&o, 0, M_STATUS, 0); op(&o, OP_RUN, 0);
  save_buf(t, "fp16_nonfinite_push", &o);
  /* A worker from before the encodings (its HELLO names none): refused. */
  o.n = 0; put8(&o, 0x04); put8(&o, 0x80);
  macro(&o, 0, M_HELLO_DATA, 0x20); op(&o, OP_RUN, 0); macro(&o, 1, M_HELLO, 1);
  op(&o, OP_RUN, 0);
  save_buf(t, "fp16_old_worker_refused", &o);
  /* Raw fp16 frames (2 bytes a value), then a float32 chunk where fp16 is due. */
  f.n = 0; hello_enc(&f, -1); simple(&f, PSTRAIN__MSG_TYPE__PULL, 0, 0);
  chunk_fp16(&f, 0, 0, 4, 0); chunk_fp16(&f, 0, 4, 4, 0); chunk_fp16(&f, 0, 8, 2, 1);
  simple(&f, PSTRAIN__MSG_TYPE__PULL, 1, 0); chunk(&f, PSTRAIN__MSG_TYPE__PUSH, 1, 0, 4, 0);
  o.n = 0; put8(&o, 0x01); put8(&o, 0x80); raw(&o, 0, &f); op(&o, OP_RUN, 0);
  save_buf(t, "raw_fp16_session", &o);
}

/* ---- model specs ---- */

static void model_seeds(void) {
  const char *t = "model_spec";
  save_str(t, "mlp", "# Multi-layer perceptron, 784-256-128-10.\ninput 784\ndense 256 relu\n"
                     "dense 128 relu\ndense 10 softmax\n");
  save_str(t, "cnn", "input 28x28x1\nconv2d 32 3x3 relu\nmaxpool 2x2\nflatten\ndense 10 softmax\n");
  save_str(t, "cnn2", "input 28x28x1\nconv2d 32 3x3 relu padding=same\nmaxpool 2x2\n"
                      "conv2d 64 3x3 relu padding=same\nmaxpool 2x2\nflatten\ndense 64 relu\n"
                      "dense 10 softmax\noptimizer adam lr=0.002\n");
  save_str(t, "strides_and_options", "input 32x24x3   # HxWxC\r\n\tconv2d 8 5x3 stride=2x1 "
                                     "padding=valid linear\nmaxpool 3x3 stride=2 padding=same\n"
                                     "flatten\ndense 16\ndense 4 softmax\n"
                                     "optimizer momentum lr=0.05 momentum=0.9 weight_decay=1e-4");
  save_str(t, "optimizer_sgd_first", "optimizer sgd lr=1\ninput 4\ndense 2 softmax\n");
  save_str(t, "optimizer_bad", "input 4\ndense 2 softmax\noptimizer adam beta1=1 eps=0\n");
  save_str(t, "empty", "");
  save_str(t, "only_comments", "# nothing\n   \n#\n");
  save_str(t, "softmax_in_the_middle", "input 10\ndense 5 softmax\ndense 2 softmax\n");
  save_str(t, "window_too_big", "input 2x2x1\nconv2d 1 3x3\nflatten\ndense 2 softmax\n");
  save_str(t, "too_large", "input 4096x4096x1\nconv2d 65536 64x64 padding=same\nflatten\n"
                           "dense 65536 softmax\n");
  save_str(t, "bad_numbers", "input 0784\ndense -1 relu\n");
  static char many[16 * (PST_MODEL_MAX_LAYERS + 2)];
  strcpy(many, "input 8\n");
  for (int i = 0; i < PST_MODEL_MAX_LAYERS + 1; i++) strcat(many, "dense 8 relu\n");
  strcat(many, "dense 2 softmax\n");
  save_str(t, "too_many_layers", many);
  /* Graphs: a residual block, two towers joined by concatenate (images and vectors), and
   * the graph's errors (a cycle, a name below, a dead end, mismatched shapes). */
  save_str(t, "graph_residual", "input 8x8x3 name=x\nconv2d 4 3x3 padding=same relu name=s\n"
                                "conv2d 4 3x3 padding=same relu\nconv2d 4 3x3 padding=same name=f\n"
                                "add relu inputs=s,f\nglobal_avgpool\ndense 3 softmax\n");
  save_str(t, "graph_towers", "input 8x8x2 name=img\nconv2d 3 3x3 padding=same name=l\n"
                              "maxpool 2x2 stride=1 padding=same inputs=img name=r\n"
                              "concatenate inputs=l,r,img\nflatten name=f\ndense 4 name=a\n"
                              "dense 2 inputs=f name=b\nconcatenate inputs=a,b,a\n"
                              "dense 2 softmax\n");
  save_str(t, "graph_errors", "input 4 name=x\ndense 4 name=a inputs=c\ndense 4 name=b\n"
                              "dense 4 name=c\nadd inputs=x,a\ndense 9 inputs=zz\n"
                              "dense 2 softmax\n");
  char longline[1100];
  memset(longline, 'x', sizeof longline - 1);
  longline[sizeof longline - 1] = '\0';
  save_str(t, "line_too_long", longline);
  save_str(t, "binary_token", "input 4\ndense 2 \x01\xff\x7f softmax\n");
  save_str(t, "batchnorm", "input 8x8x2\nconv2d 4 3x3 relu\nbatchnorm\nmaxpool 2x2\nflatten\n"
                           "dense 8 relu\nbatchnorm momentum=0.9 eps=1e-2\ndense 2 softmax\n");
  save_str(t, "batchnorm_bad", "input 4\nbatchnorm momentum=1 eps=0\n"
                               "batchnorm eps=1e-60 momentum=0.99999999\n"
                               "batchnorm momentum=0.5 momentum=0.5 relu\ndense 2 softmax\n");
}

/* ---- configuration ---- */

static void config_seed(const char *name, const char *ini, const char *const *args, int n) {
  buf o;
  o.n = 0;
  put16(&o, (uint16_t)strlen(ini));
  put(&o, ini, strlen(ini));
  for (int i = 0; i < n; i++) put(&o, args[i], strlen(args[i]) + 1);
  save_buf("config", name, &o);
}

static void config_seeds(void) {
  const char *a1[] = {"--workers", "3", "--lr=0.5", "--verbose", "--log-placement", "false"};
  config_seed("file_and_flags", "# ps.conf\nlisten = 0.0.0.0:7070\nworkers = 2\n[fuzz]\n"
                                "batch_size = 3\nmode=async\nlr = 1e-3\nverbose = yes\n",
              a1, 6);
  const char *a2[] = {"--print-config", "--seed", "9223372036854775807", "--index=-5"};
  config_seed("print_config", "model = cnn2\nstatus-interval = 0.5\n", a2, 4);
  const char *a3[] = {"--help"};
  config_seed("help", "", a3, 1);
  const char *a4[] = {"--workers", "0"};
  config_seed("out_of_range", "workers = 5000\n", a4, 2);
  const char *a5[] = {"--lr", "nan", "--nope"};
  config_seed("bad_values", "lr = inf\nverbose = maybe\n", a5, 3);
  config_seed("unknown_section", "[ps]\nworkers = 2\n", NULL, 0);
  config_seed("unknown_key", "config = other.ini\nfoo = bar\n", NULL, 0);
  config_seed("not_ini", "this is not = \n= value\n[unterminated\n", NULL, 0);
  const char *a6[] = {"--config", "x", "--config=y", "positional", "--mode"};
  config_seed("config_flags", "mode = ssp\n", a6, 5);
  const char *a7[] = {"--listen", "[::1]:7070"};
  config_seed("ipv6_listen", "listen = [fe80::1]:99999\n", a7, 2);
  char longv[700] = "model = ";
  memset(longv + 8, 'm', 600);
  longv[608] = '\n';
  longv[609] = '\0';
  config_seed("value_too_long", longv, NULL, 0);
}

static void tf_seeds(void) {
  const char *t = "tf_config";
  save_str(t, "ps", "{\"cluster\": {\"ps\": [\"ps0.example:7070\"], \"worker\": "
                    "[\"gpu1.example:7071\", \"gpu2.example:7071\"]}, \"task\": {\"type\": \"ps\", "
                    "\"index\": 0}}");
  save_str(t, "worker", "{\"cluster\": {\"ps\": [\"10.0.0.1:7070\"], \"worker\": "
                        "[\"10.0.0.2:7071\", \"10.0.0.3:7071\"]}, \"task\": {\"type\": \"worker\", "
                        "\"index\": 1}}");
  save_str(t, "ipv6", "{\"cluster\":{\"ps\":[\"[::1]:7070\"],\"worker\":[\"[fe80::1]:1\"]},"
                      "\"task\":{\"type\":\"ps\"},\"chief\":[\"x:1\"]}");
  save_str(t, "no_task", "{\"cluster\":{\"ps\":[\"127.0.0.1:7070\"],\"worker\":[\"a:1\"]}}");
  save_str(t, "two_ps", "{\"cluster\":{\"ps\":[\"a:1\",\"b:2\"],\"worker\":[\"c:3\"]}}");
  save_str(t, "bad_index", "{\"cluster\":{\"ps\":[\"a:1\"],\"worker\":[\"c:3\"]},"
                           "\"task\":{\"type\":\"worker\",\"index\":1e300}}");
  save_str(t, "fractional_index", "{\"cluster\":{\"ps\":[\"a:1\"],\"worker\":[\"c:3\",\"d:4\"]},"
                                  "\"task\":{\"type\":\"worker\",\"index\":0.5}}");
  save_str(t, "negative_index", "{\"cluster\":{\"ps\":[\"a:1\"],\"worker\":[\"c:3\"]},"
                                "\"task\":{\"type\":\"worker\",\"index\":-1}}");
  save_str(t, "not_host_port", "{\"cluster\":{\"ps\":[\"a\"],\"worker\":[1, null, {}]}}");
  save_str(t, "evaluator_task", "{\"cluster\":{\"ps\":[\"a:1\"],\"worker\":[\"c:3\"]},"
                                "\"task\":{\"type\":\"evaluator\",\"index\":0}}");
  save_str(t, "not_json", "{\"cluster\": [1, 2");
  save_str(t, "array", "[{\"cluster\":{}}]");
  save_str(t, "at_file", "@/nonexistent/tf_config.json");
}

/* ---- IDX files ---- */

static void idx_pair(buf *img, buf *lab, uint32_t n, uint32_t rows, uint32_t cols) {
  img->n = lab->n = 0;
  put_be32(img, 0x803);
  put_be32(img, n);
  put_be32(img, rows);
  put_be32(img, cols);
  for (uint32_t i = 0; i < n * rows * cols; i++) put8(img, (uint8_t)(i * 37));
  put_be32(lab, 0x801);
  put_be32(lab, n);
  for (uint32_t i = 0; i < n; i++) put8(lab, (uint8_t)(i % 10));
}

static void idx_seed(const char *name, uint8_t flags, const buf *img, const buf *lab) {
  buf o;
  o.n = 0;
  put8(&o, flags);
  put16(&o, (uint16_t)img->n);
  put(&o, img->b, img->n);
  put(&o, lab->b, lab->n);
  save_buf("idx", name, &o);
}

static void idx_seeds(void) {
  static buf img, lab, gz;
  idx_pair(&img, &lab, 3, 2, 4);
  idx_seed("plain", 0, &img, &lab);
  idx_seed("gzip_both", 3, &img, &lab);
  idx_seed("gzip_images_split_names", 5, &img, &lab);
  idx_seed("split_names_plain", 4, &img, &lab);
  /* A gzip file made here: zlib's own parsing of the gzip header and stream. */
  uLongf zn = sizeof gz.b;
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  deflateInit2(&zs, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  zs.next_in = img.b;
  zs.avail_in = (uInt)img.n;
  zs.next_out = gz.b;
  zs.avail_out = (uInt)zn;
  deflate(&zs, Z_FINISH);
  gz.n = zs.total_out;
  deflateEnd(&zs);
  idx_seed("raw_gzip_stream", 0, &gz, &lab);
  idx_pair(&img, &lab, 2, 3, 3);
  img.n -= 2;
  idx_seed("truncated_pixels", 0, &img, &lab);
  idx_pair(&img, &lab, 2, 3, 3);
  put8(&img, 0);
  idx_seed("trailing_byte", 1, &img, &lab);
  idx_pair(&img, &lab, 2, 3, 3);
  lab.b[lab.n - 1] = 10;
  idx_seed("label_out_of_range", 2, &img, &lab);
  idx_pair(&img, &lab, 2, 3, 3);
  lab.b[7] = 3;
  idx_seed("count_mismatch", 0, &img, &lab);
  idx_pair(&img, &lab, 1, 1, 1);
  img.b[3] = 0x01;
  idx_seed("labels_magic_for_images", 0, &img, &lab);
  idx_pair(&img, &lab, 1, 1, 1);
  img.n = 10;
  idx_seed("short_header", 0, &img, &lab);
  /* A header that claims the most samples and the largest images, with no data. */
  img.n = lab.n = 0;
  put_be32(&img, 0x803); put_be32(&img, 10000000); put_be32(&img, 4096); put_be32(&img, 4096);
  put_be32(&lab, 0x801); put_be32(&lab, 10000000);
  idx_seed("huge_claims", 3, &img, &lab);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: make_seeds CORPUS_DIR\n");
    return 2;
  }
  root = argv[1];
  mkdir(root, 0755);
  wire_seeds();
  ps_seeds();
  model_seeds();
  config_seeds();
  tf_seeds();
  idx_seeds();
  return 0;
}
