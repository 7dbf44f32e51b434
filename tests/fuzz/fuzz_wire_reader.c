/* Fuzzes the incremental frame reader (proto/wire.c) as the ps drives it.
 *
 * Input: two control bytes, then the byte stream a peer sends.
 *   data[0]  how the stream is cut into reads (bits 0-1: whole buffers, single bytes, random
 *            sizes, or mostly tiny with some whole), when on_frame pauses the reader (bit 2:
 *            after every frame, bit 3: after odd frames), a small payload cap (bit 4), and
 *            which frames the callbacks refuse (bits 5-6, see below), and whether the reader
 *            has a ring (bit 7: frames flagged PST_WIRE_FLAG_RING take their payload from a
 *            peer's region, made once, holding a fixed pattern; proto/ring.h)
 *   data[1]  seed of the read sizes
 * The stream is fed through pst_reader_buffer/pst_reader_feed exactly as libuv's alloc and
 * read callbacks do in ps/server.c (a paused reader is resumed before the next read), with
 * payload destinations of exactly `count` floats (malloc'd per frame, so ASan sees the
 * first byte written past one).
 *
 * Besides "no crash, no leak, no UB", the result is checked against a reference parse of
 * the whole stream at once with the same limits (prefix checks, an unpack arena of the same
 * size, pst_wire_validate, the same callback rules): the incremental reader must deliver
 * the same frames with the same payload bytes and fail exactly where the reference fails,
 * however the stream was cut. Each delivered header is also re-encoded with pst_wire_encode
 * and must survive a pack/unpack round trip. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/ring.h"
#include "proto/wire.h"

#define MAX_FRAMES 4096
#define PAYLOAD_CAP (64u * 1024u) /* floats a destination may have; more is refused */

#define CHECK(cond, ...)                                            \
  do {                                                              \
    if (!(cond)) {                                                  \
      fprintf(stderr, "fuzz_wire_reader: check failed: %s: ", #cond); \
      fprintf(stderr, __VA_ARGS__);                                 \
      fprintf(stderr, "\n");                                        \
      abort();                                                      \
    }                                                               \
  } while (0)

typedef struct {
  int type;
  uint64_t version, offset, count;
  int last;
  uint32_t payload_len;
  uint64_t payload_hash;
} frame_rec;

typedef struct {
  uint8_t policy;
  frame_rec got[MAX_FRAMES];
  int n_got;
  float *payload; /* the destination handed out for the frame being read */
  uint32_t frame_no;
} ctx;

static uint64_t fnv(const uint8_t *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

/* ---- the callbacks' rules, shared with the reference parse ---- */

/* on_payload refuses chunks too big for its buffer (the ps: anything but the expected
 * chunk) and, with bit 5, some offsets; with bit 5 an offset of 5 mod 7 gets no buffer at
 * all (dst NULL), which the reader must turn into an error itself. */
static int payload_refused(uint8_t policy, const Pstrain__Header *h) {
  if (h->count > PAYLOAD_CAP) return 1;
  return (policy & 0x20) && h->offset % 7 == 3;
}
static int payload_nulled(uint8_t policy, const Pstrain__Header *h) {
  return (policy & 0x20) && h->offset % 7 == 5;
}
/* on_frame fails on ERROR frames with bit 6, as the ps does on a worker's ERROR. */
static int frame_refused(uint8_t policy, const Pstrain__Header *h) {
  return (policy & 0x40) && h->type == PSTRAIN__MSG_TYPE__ERROR;
}
static uint32_t max_payload(uint8_t policy) { return (policy & 0x10) ? 4096 : 0; }

/* Bit 7: this end of a ring pair, the peer's region (PST_RING_MIN_SIZE bytes of data)
 * holding byte i = i * 31 + 7, made once per process; each input starts it with nothing read. */
#define RING_SIZE PST_RING_MIN_SIZE
static pst_ring *fuzz_ring(uint8_t policy, const uint8_t **data) {
  static pst_ring mine, peer;
  static int made;
  if (!(policy & 0x80)) return NULL;
  if (!made) {
    char err[200];
    pst_ring_init(&mine);
    pst_ring_init(&peer);
    CHECK(pst_ring_create(&mine, RING_SIZE, err, sizeof err) == 0, "%s", err);
    CHECK(pst_ring_create(&peer, RING_SIZE, err, sizeof err) == 0, "%s", err);
    CHECK(pst_ring_attach(&mine, getpid(), peer.fd, peer.token, sizeof peer.token, RING_SIZE, err,
                          sizeof err) == 0, "%s", err);
    for (size_t i = 0; i < RING_SIZE; i++) peer.mine[PST_RING_HEAD + i] = (uint8_t)(i * 31 + 7);
    made = 1;
  }
  mine.tail = 0;
  *data = peer.mine + PST_RING_HEAD;
  return &mine;
}

/* ---- the incremental reader under test ---- */

static int on_payload(pst_reader *r, const Pstrain__Header *h, float **dst) {
  ctx *c = r->data;
  CHECK(h->type == PSTRAIN__MSG_TYPE__PUSH || h->type == PSTRAIN__MSG_TYPE__WEIGHTS,
        "payload for type %d", (int)h->type);
  CHECK(h->count * 4 == r->prefix.payload_len, "count %llu, payload %u",
        (unsigned long long)h->count, r->prefix.payload_len);
  CHECK(c->payload == NULL, "a second destination before the frame ended");
  if (payload_refused(c->policy, h)) {
    snprintf(r->err, sizeof r->err, "chunk refused by the harness");
    return -EPROTO;
  }
  if (payload_nulled(c->policy, h)) {
    *dst = NULL;
    return 0;
  }
  c->payload = malloc(h->count * 4);
  CHECK(c->payload != NULL, "malloc");
  *dst = c->payload;
  return 0;
}

/* The header packs, unpacks and packs again to the same bytes, and stays valid. */
static void check_round_trip(const Pstrain__Header *h, uint32_t payload_len) {
  static uint8_t a[PST_WIRE_MAX_FRAME_HEAD], b[PST_WIRE_MAX_FRAME_HEAD];
  int n = pst_wire_encode(h, payload_len, a, sizeof a);
  if (n == -EMSGSIZE) return; /* re-encoding may not fit where the sender's bytes did */
  CHECK(n > PST_WIRE_PREFIX_LEN, "pst_wire_encode returned %d", n);
  pst_prefix p;
  char err[160];
  CHECK(pst_wire_prefix_decode(a, PST_WIRE_MAX_PAYLOAD, &p, err, sizeof err) == 0, "%s", err);
  CHECK(p.header_len == (uint32_t)n - PST_WIRE_PREFIX_LEN && p.payload_len == payload_len,
        "prefix says %u + %u", p.header_len, p.payload_len);
  Pstrain__Header *u = pstrain__header__unpack(NULL, p.header_len, a + PST_WIRE_PREFIX_LEN);
  CHECK(u != NULL, "a header the ps encoded does not unpack");
  CHECK(pst_wire_validate(u, payload_len, err, sizeof err) == 0, "re-encoded header: %s", err);
  size_t m = pstrain__header__pack(u, b);
  CHECK(m == p.header_len && memcmp(a + PST_WIRE_PREFIX_LEN, b, m) == 0,
        "pack(unpack(pack(h))) differs (%zu vs %u bytes)", m, p.header_len);
  pstrain__header__free_unpacked(u, NULL);
}

static int on_frame(pst_reader *r, const Pstrain__Header *h) {
  ctx *c = r->data;
  CHECK(c->n_got < MAX_FRAMES, "too many frames");
  frame_rec *f = &c->got[c->n_got++];
  f->type = (int)h->type;
  f->version = h->version;
  f->offset = h->offset;
  f->count = h->count;
  f->last = h->last;
  f->payload_len = r->prefix.payload_len;
  f->payload_hash = c->payload ? fnv((const uint8_t *)c->payload, f->payload_len) : 0;
  free(c->payload);
  c->payload = NULL;
  check_round_trip(h, f->payload_len);
  uint32_t no = c->frame_no++;
  if (frame_refused(c->policy, h)) return -EPROTO;
  if ((c->policy & 0x04) || ((c->policy & 0x08) && (no & 1))) return PST_READER_PAUSE;
  return 0;
}

static const pst_reader_cbs cbs = {on_payload, on_frame};

/* ---- the reference: the whole stream at once ---- */

typedef struct {
  uint8_t *mem;
  size_t used;
} ref_arena;

/* The reader's arena policy (wire.c's arena_alloc), so that what fails to unpack there
 * fails here too. */
static void *ref_alloc(void *data, size_t size) {
  ref_arena *a = data;
  size_t need = (size + 15) & ~(size_t)15;
  if (need < size || a->used + need > PST_WIRE_ARENA) return NULL;
  void *p = a->mem + a->used;
  a->used += need;
  return p;
}
static void ref_free(void *data, void *p) { (void)data, (void)p; }

/* Fills want[] with the frames a correct reader delivers; returns 1 when it must fail
 * (at the frame after the last one in want), 0 when the stream just ends. */
static int reference(const uint8_t *s, size_t n, uint8_t policy, frame_rec *want, int *n_want,
                     const uint8_t *region) {
  static uint8_t mem[PST_WIRE_ARENA];
  ref_arena arena = {mem, 0};
  ProtobufCAllocator alloc = {ref_alloc, ref_free, &arena};
  uint32_t cap = max_payload(policy) ? max_payload(policy) : PST_WIRE_MAX_PAYLOAD;
  size_t pos = 0;
  uint64_t tail = 0; /* what has been read of the peer's region */
  char err[160];
  *n_want = 0;
  for (;;) {
    pst_prefix p;
    if (n - pos < PST_WIRE_PREFIX_LEN) return 0;
    if (pst_wire_prefix_decode(s + pos, cap, &p, err, sizeof err) < 0) return 1;
    int ring = (p.flags & PST_WIRE_FLAG_RING) != 0;
    if (ring && (!region || p.payload_len == 0)) return 1;
    pos += PST_WIRE_PREFIX_LEN;
    if (n - pos < p.header_len) return 0;
    arena.used = 0;
    Pstrain__Header *h = pstrain__header__unpack(&alloc, p.header_len, s + pos);
    if (h == NULL) return 1;
    /* This reader takes no delta chunks (pst_reader_take_delta): a tensor chunk marked delta
     * fails, as does any frame marked sparse without it (found with the ring's frames,
     * 2026-11-29: the reference had left both out). */
    int tensor = h->type == PSTRAIN__MSG_TYPE__WEIGHTS || h->type == PSTRAIN__MSG_TYPE__PUSH;
    if ((tensor && h->delta) || h->sparse) return 1;
    if (pst_wire_validate(h, p.payload_len, err, sizeof err) < 0) return 1;
    pos += p.header_len;
    if (p.payload_len > 0 && (payload_refused(policy, h) || payload_nulled(policy, h))) return 1;
    /* A payload in the region: after what was read, whole inside it (proto/ring.h). */
    uint64_t rp = h->ring_pos;
    if (ring && (rp < tail || p.payload_len > RING_SIZE || rp % RING_SIZE + p.payload_len > RING_SIZE))
      return 1;
    if (!ring && n - pos < p.payload_len) return 0;
    CHECK(*n_want < MAX_FRAMES, "too many frames");
    frame_rec *f = &want[(*n_want)++];
    f->type = (int)h->type;
    f->version = h->version;
    f->offset = h->offset;
    f->count = h->count;
    f->last = h->last;
    f->payload_len = p.payload_len;
    if (ring) {
      f->payload_hash = fnv(region + rp % RING_SIZE, p.payload_len);
      tail = rp + p.payload_len;
    } else {
      f->payload_hash = p.payload_len ? fnv(s + pos, p.payload_len) : 0;
      pos += p.payload_len;
    }
    if (frame_refused(policy, h)) return 1;
  }
}

/* ---- reads of arbitrary sizes ---- */

static uint32_t rnd(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(*s >> 33);
}

static size_t read_size(uint8_t policy, uint64_t *seed, size_t room, size_t left) {
  size_t most = room < left ? room : left, k;
  switch (policy & 3) {
    case 0: k = most; break;
    case 1: k = 1; break;
    case 2: k = 1 + rnd(seed) % most; break;
    default: k = (rnd(seed) & 3) ? 1 + rnd(seed) % 24 : most; break;
  }
  return k < most ? k : most;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static ctx c;
  static frame_rec want[MAX_FRAMES];
  if (size < 2) return 0;
  uint8_t policy = data[0];
  uint64_t seed = data[1] * 0x9e3779b97f4a7c15ull + size;
  const uint8_t *s = data + 2;
  size_t n = size - 2;

  memset(&c, 0, sizeof c);
  c.policy = policy;
  pst_reader r;
  CHECK(pst_reader_init(&r, &cbs, &c, max_payload(policy)) == 0, "pst_reader_init");
  const uint8_t *region = NULL;
  pst_reader_set_ring(&r, fuzz_ring(policy, &region));

  size_t pos = 0;
  int rc = 0, failed = 0;
  while (!failed) {
    /* A paused reader is resumed before anything more is read, as ps_server_kick does. */
    while (rc == PST_READER_PAUSE) {
      CHECK(r.paused, "PAUSE returned but the reader is not paused");
      rc = pst_reader_resume(&r);
    }
    if (rc < 0) {
      failed = 1;
      break;
    }
    if (pos == n) break;
    char *base;
    size_t len;
    pst_reader_buffer(&r, &base, &len);
    CHECK(base != NULL && len > 0, "an empty read buffer (libuv would fail with ENOBUFS)");
    size_t k = read_size(policy, &seed, len, n - pos);
    memcpy(base, s + pos, k);
    pos += k;
    rc = pst_reader_feed(&r, k);
  }

  int n_want = 0;
  int must_fail = reference(s, n, policy, want, &n_want, region);
  CHECK(failed == must_fail, "reader %s, reference %s (%d frames read)",
        failed ? "failed" : "did not fail", must_fail ? "fails" : "does not", c.n_got);
  CHECK(c.n_got == n_want, "reader delivered %d frames, reference %d", c.n_got, n_want);
  for (int i = 0; i < n_want; i++) {
    const frame_rec *a = &c.got[i], *b = &want[i];
    CHECK(a->type == b->type && a->version == b->version && a->offset == b->offset &&
              a->count == b->count && a->last == b->last && a->payload_len == b->payload_len &&
              a->payload_hash == b->payload_hash,
          "frame %d differs (type %d vs %d)", i, a->type, b->type);
  }
  if (failed) {
    /* The reason is one line for the ps's log, and the sample printable. */
    CHECK(r.err[0] != '\0' && memchr(r.err, '\0', sizeof r.err) != NULL, "no reason");
    CHECK(strchr(r.err, '\n') == NULL, "multi-line reason");
    for (const char *p = r.sample; *p; p++) CHECK(*p >= 0x20 && *p < 0x7f, "unprintable sample");
  }
  free(c.payload);
  c.payload = NULL;
  pst_reader_free(&r);
  return 0;
}
