/* Framing tests: round trips through the incremental reader fed in every split, and
 * malformed, truncated and oversized frames rejected before anything is allocated. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/wire.h"

#include "common/check.h"

typedef struct {
  int frames;
  int types[64];
  uint64_t versions[64];
  float payload[8192];
  int pause_after;  /* pause after this many frames (0: never) */
} sink;

static int on_payload(pst_reader *r, const Pstrain__Header *h, float **dst) {
  sink *s = r->data;
  if (h->offset + h->count > 8192) return -EPROTO;
  *dst = s->payload + h->offset;
  return 0;
}

static int on_frame(pst_reader *r, const Pstrain__Header *h) {
  sink *s = r->data;
  if (s->frames < 64) {
    s->types[s->frames] = h->type;
    s->versions[s->frames] = h->version;
  }
  s->frames++;
  if (h->type == PSTRAIN__MSG_TYPE__HELLO && strcmp(h->hello->worker_name, "w0") != 0) return -EPROTO;
  return (s->pause_after && s->frames == s->pause_after) ? PST_READER_PAUSE : 0;
}

static const pst_reader_cbs cbs = {on_payload, on_frame};

/* Feeds `len` bytes to the reader in pieces of at most `step` bytes, as libuv would. */
static int feed(pst_reader *r, const uint8_t *data, size_t len, size_t step) {
  size_t pos = 0;
  while (pos < len) {
    char *base;
    size_t cap;
    pst_reader_buffer(r, &base, &cap);
    size_t n = len - pos;
    if (n > cap) n = cap;
    if (n > step) n = step;
    memcpy(base, data + pos, n);
    pos += n;
    int rc = pst_reader_feed(r, n);
    while (rc == PST_READER_PAUSE) rc = pst_reader_resume(r);
    if (rc < 0) return rc;
  }
  return 0;
}

/* A stream: HELLO, a 3000-float PUSH chunk at offset 10, a PULL. */
static size_t build_stream(uint8_t *buf, float *expect) {
  size_t n = 0;
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  Pstrain__Hello hello = PSTRAIN__HELLO__INIT;
  hello.worker_name = "w0";
  hello.model_fingerprint = 0x1234;
  h.type = PSTRAIN__MSG_TYPE__HELLO;
  h.hello = &hello;
  n += (size_t)pst_wire_encode(&h, 0, buf + n, PST_WIRE_MAX_FRAME_HEAD);
  for (int i = 0; i < 3000; i++) expect[i] = (float)i * 0.5f - 7.0f;
  n += (size_t)pst_wire_encode_chunk(PSTRAIN__MSG_TYPE__PUSH, 42, 10, 3000, 1, buf + n, 64);
  memcpy(buf + n, expect, 3000 * 4);
  n += 3000 * 4;
  Pstrain__Header p = PSTRAIN__HEADER__INIT;
  p.type = PSTRAIN__MSG_TYPE__PULL;
  p.version = 43;
  n += (size_t)pst_wire_encode(&p, 0, buf + n, PST_WIRE_MAX_FRAME_HEAD);
  return n;
}

static void test_round_trip(void) {
  static uint8_t buf[1 << 17];
  static float expect[3000];
  size_t len = build_stream(buf, expect);
  size_t steps[] = {1, 7, 16, 100, 4096, 1 << 17};
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    sink s;
    memset(&s, 0, sizeof s);
    s.pause_after = (i % 2) ? 1 : 0;
    pst_reader r;
    CHECK(pst_reader_init(&r, &cbs, &s, 0) == 0);
    CHECK(feed(&r, buf, len, steps[i]) == 0);
    CHECK(s.frames == 3);
    CHECK(s.types[0] == PSTRAIN__MSG_TYPE__HELLO);
    CHECK(s.types[1] == PSTRAIN__MSG_TYPE__PUSH && s.versions[1] == 42);
    CHECK(s.types[2] == PSTRAIN__MSG_TYPE__PULL && s.versions[2] == 43);
    CHECK(memcmp(s.payload + 10, expect, sizeof expect) == 0);
    CHECK(r.state == PST_RD_PREFIX && r.got == 0);
    pst_reader_free(&r);
  }
}

/* A large payload goes straight to its destination, not through the staging buffer. */
static void test_direct_payload(void) {
  uint8_t head[64];
  int hn = pst_wire_encode_chunk(PSTRAIN__MSG_TYPE__PUSH, 1, 0, 4096, 1, head, sizeof head);
  CHECK(hn > 0 && hn <= PST_WIRE_CHUNK_HEAD);
  sink s;
  memset(&s, 0, sizeof s);
  pst_reader r;
  pst_reader_init(&r, &cbs, &s, 0);
  char *base;
  size_t cap;
  pst_reader_buffer(&r, &base, &cap);
  memcpy(base, head, (size_t)hn);
  CHECK(pst_reader_feed(&r, (size_t)hn) == 0);
  pst_reader_buffer(&r, &base, &cap);
  CHECK(base == (char *)s.payload && cap == 4096 * 4);
  for (int i = 0; i < 4096; i++) ((float *)base)[i] = (float)i;
  CHECK(pst_reader_feed(&r, 4096 * 4) == 0);
  CHECK(s.frames == 1 && s.payload[4095] == 4095.0f);
  pst_reader_free(&r);
}

/* In a stream of large tensor chunks the reader stages only each frame's head (at most
 * PST_WIRE_CHUNK_HEAD bytes), so the payloads land in place, not through the stage. The
 * "socket" here has one frame more to give each time the reader runs dry. */
static void test_tensor_stream(void) {
  enum { CH = 8192 }; /* floats per chunk: 32 KiB, a payload read in place */
  static uint8_t buf[3 * (PST_WIRE_CHUNK_HEAD + CH * 4) + PST_WIRE_CHUNK_HEAD];
  size_t len = 0, ends[4];
  for (int k = 0; k < 3; k++) {
    int hn = pst_wire_encode_chunk(PSTRAIN__MSG_TYPE__PUSH, 7, 0, CH, k == 2, buf + len,
                                   PST_WIRE_CHUNK_HEAD);
    CHECK(hn > 0);
    len += (size_t)hn;
    for (int i = 0; i < CH; i++) {
      float v = (float)(k * CH + i);
      memcpy(buf + len + 4 * (size_t)i, &v, 4);
    }
    len += CH * 4;
    ends[k] = len;
  }
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  h.type = PSTRAIN__MSG_TYPE__PULL;
  h.version = 8;
  int n = pst_wire_encode(&h, 0, buf + len, PST_WIRE_CHUNK_HEAD);
  CHECK(n > 0);
  len += (size_t)n;
  ends[3] = len;
  sink s;
  memset(&s, 0, sizeof s);
  pst_reader r;
  CHECK(pst_reader_init(&r, &cbs, &s, 0) == 0);
  size_t pos = 0, staged[4] = {0, 0, 0, 0};
  for (int k = 0; k < 4; k++) {
    while (pos < ends[k]) {
      char *base;
      size_t cap;
      pst_reader_buffer(&r, &base, &cap);
      int in_place = base >= (char *)s.payload && base < (char *)(s.payload + CH);
      size_t take = ends[k] - pos < cap ? ends[k] - pos : cap;
      memcpy(base, buf + pos, take);
      pos += take;
      if (!in_place) staged[k] += take;
      CHECK(pst_reader_feed(&r, take) == 0);
    }
  }
  CHECK(s.frames == 4 && s.types[3] == PSTRAIN__MSG_TYPE__PULL && s.versions[3] == 8);
  CHECK(s.payload[0] == (float)(2 * CH) && s.payload[CH - 1] == (float)(3 * CH - 1));
  CHECK(staged[0] == ends[0]); /* the first frame is staged whole */
  CHECK(staged[1] <= PST_WIRE_CHUNK_HEAD && staged[2] <= PST_WIRE_CHUNK_HEAD);
  CHECK(staged[3] == ends[3] - ends[2]);
  pst_reader_free(&r);
}

static int feed_bad(const uint8_t *bytes, size_t len, char *why, size_t whylen) {
  sink s;
  memset(&s, 0, sizeof s);
  pst_reader r;
  pst_reader_init(&r, &cbs, &s, 1 << 20);
  int rc = feed(&r, bytes, len, len);
  snprintf(why, whylen, "%s", r.err);
  pst_reader_free(&r);
  return rc;
}

static void test_malformed(void) {
  uint8_t b[256];
  char why[200];
  /* Garbage bytes: bad magic, reported with the reason. */
  memset(b, 'A', sizeof b);
  CHECK(feed_bad(b, sizeof b, why, sizeof why) == -EPROTO && strstr(why, "magic"));
  /* Wrong protocol version. */
  pst_wire_prefix_encode(b, 4, 0);
  b[4] = 9;
  CHECK(feed_bad(b, 20, why, sizeof why) == -EPROTO && strstr(why, "version"));
  /* Oversized header and payload: refused from the prefix alone. */
  pst_wire_prefix_encode(b, PST_WIRE_MAX_HEADER + 1, 0);
  CHECK(feed_bad(b, 16, why, sizeof why) == -EPROTO && strstr(why, "header length"));
  pst_wire_prefix_encode(b, 4, 0xFFFFFFFFu);
  CHECK(feed_bad(b, 16, why, sizeof why) == -EPROTO && strstr(why, "cap"));
  pst_wire_prefix_encode(b, 0, 0);
  CHECK(feed_bad(b, 16, why, sizeof why) == -EPROTO);
  /* A header that is not protobuf. */
  pst_wire_prefix_encode(b, 8, 0);
  memset(b + 16, 0xff, 8);
  CHECK(feed_bad(b, 24, why, sizeof why) == -EPROTO && strstr(why, "unpack"));
  /* A PUSH whose count disagrees with the payload length. */
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  h.type = PSTRAIN__MSG_TYPE__PUSH;
  h.count = 10;
  int n = pst_wire_encode(&h, 8, b, sizeof b);
  CHECK(n > 0 && feed_bad(b, (size_t)n + 8, why, sizeof why) == -EPROTO);
  /* A PULL with a payload, an unknown type, a HELLO without its body. */
  h.type = PSTRAIN__MSG_TYPE__PULL;
  h.count = 0;
  n = pst_wire_encode(&h, 4, b, sizeof b);
  CHECK(feed_bad(b, (size_t)n + 4, why, sizeof why) == -EPROTO);
  h.type = 77;
  n = pst_wire_encode(&h, 0, b, sizeof b);
  CHECK(feed_bad(b, (size_t)n, why, sizeof why) == -EPROTO && strstr(why, "unknown"));
  h.type = PSTRAIN__MSG_TYPE__HELLO;
  n = pst_wire_encode(&h, 0, b, sizeof b);
  CHECK(feed_bad(b, (size_t)n, why, sizeof why) == -EPROTO);
  /* A chunk outside the receiver's tensor is refused by its owner. */
  n = pst_wire_encode_chunk(PSTRAIN__MSG_TYPE__PUSH, 0, 8190, 10, 1, b, sizeof b);
  memset(b + n, 0, 40);
  CHECK(feed_bad(b, (size_t)n + 40, why, sizeof why) < 0);
}

/* A truncated frame is not an error by itself: the reader waits mid-frame, and the
 * owner sees that when the peer closes. */
static void test_truncated(void) {
  static uint8_t buf[1 << 17];
  static float expect[3000];
  size_t len = build_stream(buf, expect);
  sink s;
  memset(&s, 0, sizeof s);
  pst_reader r;
  pst_reader_init(&r, &cbs, &s, 0);
  CHECK(feed(&r, buf, len - 5, 999) == 0);
  CHECK(s.frames == 2 && !(r.state == PST_RD_PREFIX && r.got == 0));
  pst_reader_free(&r);
}

/* Fuzz-ish: random mutations of a valid stream never crash the reader. */
static void test_mutations(void) {
  static uint8_t buf[1 << 17], mut[1 << 17];
  static float expect[3000];
  size_t len = build_stream(buf, expect);
  unsigned seed = 12345;
  for (int iter = 0; iter < 3000; iter++) {
    memcpy(mut, buf, len);
    for (int k = 0; k < 4; k++) {
      seed = seed * 1103515245u + 12345u;
      size_t pos = (seed >> 8) % 64;
      mut[pos] ^= (uint8_t)(seed >> 3);
    }
    sink s;
    memset(&s, 0, sizeof s);
    pst_reader r;
    pst_reader_init(&r, &cbs, &s, 1 << 20);
    (void)feed(&r, mut, len, 1 + iter % 50);
    pst_reader_free(&r);
  }
  g_pass++;
}

/* Delta pulls (Header.delta): a reader that takes them reads a marked WEIGHTS chunk as int8
 * (4 + count bytes) and an unmarked one as float32; a marked chunk of the wrong length, a
 * marked PUSH, or a marked chunk on a reader that takes none, is malformed. flags: 1 delta,
 * 2 sparse (Header.sparse: 0 to count / 8 pairs of 8 bytes, in chunks of 8 values or more,
 * and only in a delta WEIGHTS chunk). */
static int feed_delta(int takes, Pstrain__MsgType type, int flags, uint32_t count,
                      uint32_t payload) {
  uint8_t b[128 + 64];
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  h.type = type;
  h.count = count;
  h.delta = flags & 1;
  h.sparse = (flags & 2) != 0;
  int n = pst_wire_encode(&h, payload, b, 64);
  memset(b + n, 0, payload);
  sink s;
  memset(&s, 0, sizeof s);
  pst_reader r;
  pst_reader_init(&r, &cbs, &s, 1 << 20);
  pst_reader_take_delta(&r, takes);
  int rc = feed(&r, b, (size_t)n + payload, 7);
  pst_reader_free(&r);
  return rc < 0 ? rc : s.frames;
}

static void test_delta(void) {
  uint8_t b[64];
  CHECK(pst_wire_encode_delta_chunk(9, 0, 10, 1, -1, b, sizeof b) > 0);
  CHECK(feed_delta(1, PSTRAIN__MSG_TYPE__WEIGHTS, 1, 10, 14) == 1);
  CHECK(feed_delta(1, PSTRAIN__MSG_TYPE__WEIGHTS, 0, 10, 40) == 1);
  CHECK(feed_delta(1, PSTRAIN__MSG_TYPE__WEIGHTS, 1, 10, 40) == -EPROTO);
  CHECK(feed_delta(1, PSTRAIN__MSG_TYPE__WEIGHTS, 0, 10, 14) == -EPROTO);
  CHECK(feed_delta(1, PSTRAIN__MSG_TYPE__PUSH, 1, 10, 14) == -EPROTO);
  CHECK(feed_delta(0, PSTRAIN__MSG_TYPE__WEIGHTS, 1, 10, 14) == -EPROTO);
  CHECK(feed_delta(0, PSTRAIN__MSG_TYPE__PUSH, 1, 10, 40) == -EPROTO);
  /* A PULL may carry the flag (the worker allows a delta reply). */
  CHECK(feed_delta(0, PSTRAIN__MSG_TYPE__PULL, 1, 0, 0) == 1);
  /* Sparse delta chunks. */
  CHECK(pst_wire_encode_delta_chunk(9, 0, 16, 1, 2, b, sizeof b) > 0);
  CHECK(feed_delta(1, PSTRAIN__MSG_TYPE__WEIGHTS, 3, 16, 16) == 1);
  CHECK(feed_delta(1, PSTRAIN__MSG_TYPE__WEIGHTS, 3, 16, 0) == 1);
  CHECK(feed_delta(1, PSTRAIN__MSG_TYPE__WEIGHTS, 3, 16, 24) == -EPROTO); /* over count / 8 */
  CHECK(feed_delta(1, PSTRAIN__MSG_TYPE__WEIGHTS, 3, 16, 12) == -EPROTO); /* no pair count */
  CHECK(feed_delta(1, PSTRAIN__MSG_TYPE__WEIGHTS, 3, 7, 0) == -EPROTO);   /* under 8 values */
  CHECK(feed_delta(1, PSTRAIN__MSG_TYPE__WEIGHTS, 2, 16, 16) == -EPROTO); /* sparse, no delta */
  CHECK(feed_delta(1, PSTRAIN__MSG_TYPE__PUSH, 3, 16, 16) == -EPROTO);
  CHECK(feed_delta(0, PSTRAIN__MSG_TYPE__WEIGHTS, 3, 16, 16) == -EPROTO);
  CHECK(feed_delta(1, PSTRAIN__MSG_TYPE__HEARTBEAT, 2, 0, 0) == -EPROTO);
}

int main(void) {
  test_delta();
  test_round_trip();
  test_direct_payload();
  test_tensor_stream();
  test_malformed();
  test_truncated();
  test_mutations();
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
