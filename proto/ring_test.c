/* The shared regions (proto/ring.h) and their frames (proto/wire.h), both ends in one
 * process: payloads round-trip through the regions and the reader; a full region sends on the
 * stream; a new lap starts at the region's first byte; an end refuses positions outside what
 * it may read, lies about what was read, and every offer that is not a sealed pstrain region
 * of the size and token offered. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/check.h"
#include "proto/ring.h"
#include "proto/wire.h"

#define SIZE (64u * 1024u)

/* Two ends a and b, each mapping the other's region, as a worker and a ps would. */
static void pair(pst_ring *a, pst_ring *b, uint64_t size) {
  char err[200];
  pst_ring_init(a);
  pst_ring_init(b);
  CHECKF(pst_ring_create(a, size, err, sizeof err) == 0, "%s", err);
  CHECKF(pst_ring_create(b, size, err, sizeof err) == 0, "%s", err);
  CHECKF(pst_ring_attach(b, getpid(), a->fd, a->token, sizeof a->token, a->mine_size, err,
                         sizeof err) == 0, "%s", err);
  CHECKF(pst_ring_attach(a, getpid(), b->fd, b->token, sizeof b->token, b->mine_size, err,
                         sizeof err) == 0, "%s", err);
  pst_ring_mapped_by_peer(a);
  pst_ring_mapped_by_peer(b);
  CHECK(pst_ring_ready(a) && pst_ring_ready(b));
}

static void fill(uint8_t *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(seed * 131 + i * 7 + (i >> 9));
}

static void test_round_trip(void) {
  pst_ring a, b;
  pair(&a, &b, SIZE);
  char err[200];
  static uint8_t src[SIZE], dst[SIZE];
  uint64_t pos[3];
  /* Three payloads in flight: the third does not fit until the first is read. */
  fill(src, SIZE, 1);
  CHECK(pst_ring_put(&a, src, 20000, &pos[0]) == 0 && pos[0] == 0);
  CHECK(pst_ring_put(&a, src + 20000, 30000, &pos[1]) == 0 && pos[1] == 20000);
  CHECK(pst_ring_put(&a, src, 20000, &pos[2]) == -ENOBUFS && a.no_room == 1);
  CHECK(pst_ring_get(&b, pos[0], dst, 20000, err, sizeof err) == 0);
  CHECK(memcmp(dst, src, 20000) == 0);
  /* 50000 + 20000 would wrap: the payload starts the next lap, at the region's first byte,
   * which the first payload no longer holds. */
  CHECK(pst_ring_put(&a, src + 5, 20000, &pos[2]) == 0 && pos[2] == SIZE);
  CHECK(pst_ring_get(&b, pos[1], dst, 30000, err, sizeof err) == 0);
  CHECK(memcmp(dst, src + 20000, 30000) == 0);
  CHECK(pst_ring_get(&b, pos[2], dst, 20000, err, sizeof err) == 0);
  CHECK(memcmp(dst, src + 5, 20000) == 0);
  /* All read: a new lap, at the region's first byte again. */
  CHECK(pst_ring_put(&a, src + 7, 20000, &pos[2]) == 0 && pos[2] == 2 * (uint64_t)SIZE);
  CHECK(pst_ring_get(&b, pos[2], dst, 20000, err, sizeof err) == 0);
  CHECK(memcmp(dst, src + 7, 20000) == 0);
  /* The whole region at once, and more than it. */
  CHECK(pst_ring_put(&a, src, SIZE, &pos[0]) == 0 && pos[0] == 3 * (uint64_t)SIZE);
  CHECK(pst_ring_put(&a, src, 1, &pos[1]) == -ENOBUFS);
  CHECK(pst_ring_get(&b, pos[0], dst, SIZE, err, sizeof err) == 0 && memcmp(dst, src, SIZE) == 0);
  CHECK(pst_ring_put(&a, src, SIZE + 1, &pos[1]) == -ENOBUFS);
  /* The other direction is independent. */
  CHECK(pst_ring_put(&b, src + 3, 1000, &pos[0]) == 0 && pos[0] == 0);
  CHECK(pst_ring_get(&a, 0, dst, 1000, err, sizeof err) == 0 && memcmp(dst, src + 3, 1000) == 0);
  CHECK(a.put_bytes == 20000 + 30000 + 20000 + 20000 + SIZE && b.got_bytes == a.put_bytes);
  pst_ring_free(&a);
  pst_ring_free(&b);
  CHECK(a.mine == NULL && a.theirs == NULL && a.fd == -1);
}

/* A new lap skips the region's last bytes, which the reader never reads: they are not in
 * use, so the next payloads fit beside the lap's first until the region holds a lap's worth
 * of unread bytes (a reply's later chunks, put before the worker has read its first). */
static void test_lap_then_more(void) {
  pst_ring a, b;
  pair(&a, &b, SIZE);
  char err[200];
  static uint8_t src[SIZE], dst[SIZE];
  fill(src, SIZE, 9);
  uint64_t p0, p1, p2, p3;
  CHECK(pst_ring_put(&a, src, 40000, &p0) == 0 && p0 == 0);
  CHECK(pst_ring_get(&b, p0, dst, 40000, err, sizeof err) == 0);
  CHECK(pst_ring_put(&a, src + 1, 30000, &p1) == 0 && p1 == SIZE); /* all read: a new lap */
  CHECK(pst_ring_put(&a, src + 2, 20000, &p2) == 0 && p2 == SIZE + 30000);
  /* The next would wrap, onto the lap's first payload, unread: no room. */
  CHECK(pst_ring_put(&a, src + 3, 20000, &p3) == -ENOBUFS);
  CHECK(pst_ring_get(&b, p1, dst, 30000, err, sizeof err) == 0 && memcmp(dst, src + 1, 30000) == 0);
  CHECK(pst_ring_get(&b, p2, dst, 20000, err, sizeof err) == 0 && memcmp(dst, src + 2, 20000) == 0);
  CHECK(pst_ring_put(&a, src + 3, 20000, &p3) == 0 && p3 == 2 * (uint64_t)SIZE);
  CHECK(pst_ring_get(&b, p3, dst, 20000, err, sizeof err) == 0 && memcmp(dst, src + 3, 20000) == 0);
  CHECK(a.no_room == 1);
  pst_ring_free(&a);
  pst_ring_free(&b);
}

/* A reader takes only what the writer could have put: ahead of what it read, inside the
 * region, whole. */
static void test_bad_positions(void) {
  pst_ring a, b;
  pair(&a, &b, SIZE);
  char err[200];
  static uint8_t buf[SIZE + 16];
  uint64_t pos;
  CHECK(pst_ring_put(&a, buf, 5000, &pos) == 0);
  CHECK(pst_ring_get(&b, pos, buf, 5000, err, sizeof err) == 0);
  CHECK(pst_ring_get(&b, 0, buf, 100, err, sizeof err) == -EPROTO);       /* behind */
  CHECK(pst_ring_get(&b, SIZE - 10, buf, 100, err, sizeof err) == -EPROTO); /* wraps */
  CHECK(pst_ring_get(&b, 5000, buf, SIZE + 1, err, sizeof err) == -EPROTO); /* too long */
  CHECK(pst_ring_get(&b, UINT64_MAX - 5, buf, 10, err, sizeof err) == -EPROTO);
  CHECK(pst_ring_get(&b, 5000, buf, 0, err, sizeof err) == -EPROTO);
  CHECK(strstr(err, "position") != NULL);
  /* A position far ahead but inside the region is the writer's business: read, no harm. */
  CHECK(pst_ring_get(&b, 7 * (uint64_t)SIZE + 100, buf, 100, err, sizeof err) == 0);
  /* An end without the peer's region takes no ring frame. */
  pst_ring lone;
  pst_ring_init(&lone);
  CHECK(pst_ring_get(&lone, 0, buf, 100, err, sizeof err) == -EPROTO);
  CHECK(pst_ring_put(&lone, buf, 100, &pos) == -ENOTCONN);
  pst_ring_free(&a);
  pst_ring_free(&b);
}

/* A peer whose header claims it read more than was put gets no ring: its payloads, and
 * this end's, go on the stream. */
static void test_lying_reader(void) {
  pst_ring a, b;
  pair(&a, &b, SIZE);
  uint8_t buf[8192] = {0};
  uint64_t pos;
  uint64_t lie = 1u << 30;
  memcpy(b.mine + 64, &lie, sizeof lie); /* b's header: "read a's region up to 1 GiB" */
  CHECK(pst_ring_put(&a, buf, sizeof buf, &pos) == -ENOBUFS);
  lie = 0;
  memcpy(b.mine + 64, &lie, sizeof lie);
  CHECK(pst_ring_put(&a, buf, sizeof buf, &pos) == 0);
  pst_ring_free(&a);
  pst_ring_free(&b);
}

/* Every offer that is not a sealed pstrain region of that size and token is refused. */
static void test_refused_offers(void) {
  char err[200];
  pst_ring a, b;
  pst_ring_init(&a);
  pst_ring_init(&b);
  CHECKF(pst_ring_create(&a, SIZE, err, sizeof err) == 0, "%s", err);
  uint8_t wrong[PST_RING_TOKEN];
  memcpy(wrong, a.token, sizeof wrong);
  wrong[3] ^= 1;
  CHECK(pst_ring_attach(&b, getpid(), a.fd, wrong, sizeof wrong, a.mine_size, err, sizeof err) < 0);
  CHECK(strstr(err, "not the one offered") != NULL);
  CHECK(pst_ring_attach(&b, getpid(), a.fd, a.token, 8, a.mine_size, err, sizeof err) == -EINVAL);
  CHECK(pst_ring_attach(&b, getpid(), a.fd, a.token, sizeof a.token, a.mine_size * 2, err,
                        sizeof err) == -EINVAL);
  CHECK(pst_ring_attach(&b, getpid(), a.fd, a.token, sizeof a.token, a.mine_size + 1, err,
                        sizeof err) == -EINVAL);
  CHECK(pst_ring_attach(&b, 0, a.fd, a.token, sizeof a.token, a.mine_size, err, sizeof err) < 0);
  /* No such process (pid_max is at most 4M), no such descriptor. */
  CHECK(pst_ring_attach(&b, 4194305, a.fd, a.token, sizeof a.token, a.mine_size, err,
                        sizeof err) < 0);
  CHECK(pst_ring_attach(&b, getpid(), 999999, a.token, sizeof a.token, a.mine_size, err,
                        sizeof err) < 0);
  /* A pipe, a file: not regions (nothing is opened: the link says what they are). */
  int pfd[2];
  CHECK(pipe(pfd) == 0);
  CHECK(pst_ring_attach(&b, getpid(), pfd[0], a.token, sizeof a.token, a.mine_size, err,
                        sizeof err) == -EINVAL);
  CHECK(strstr(err, "not a pstrain region") != NULL);
  close(pfd[0]);
  close(pfd[1]);
  /* A memfd of the right name, size and header but without seals: it could shrink under
   * the reader. */
  int fd = memfd_create("pstrain-ring", MFD_CLOEXEC);
  CHECK(fd >= 0 && ftruncate(fd, PST_RING_HEAD + SIZE) == 0);
  CHECK(pwrite(fd, a.mine, 64, 0) == 64);
  CHECK(pst_ring_attach(&b, getpid(), fd, a.token, sizeof a.token, SIZE, err, sizeof err) ==
        -EINVAL);
  CHECK(strstr(err, "sealed") != NULL);
  close(fd);
  CHECK(b.theirs == NULL);
  /* And the real one maps. */
  CHECKF(pst_ring_attach(&b, getpid(), a.fd, a.token, sizeof a.token, a.mine_size, err,
                         sizeof err) == 0, "%s", err);
  /* The region can neither shrink nor grow: its seals. */
  CHECK(ftruncate(a.fd, PST_RING_HEAD) < 0 && errno == EPERM);
  CHECK(ftruncate(a.fd, PST_RING_HEAD + 2 * SIZE) < 0 && errno == EPERM);
  pst_ring_free(&a);
  pst_ring_free(&b);
}

/* ---- frames through the ring ---- */

typedef struct {
  int frames;
  float payload[40000];
  uint64_t offsets[8];
} sink;

static int on_payload(pst_reader *r, const Pstrain__Header *h, float **dst) {
  sink *s = r->data;
  if (h->offset + h->count > 40000) return -EPROTO;
  *dst = s->payload + h->offset;
  return 0;
}

static int on_frame(pst_reader *r, const Pstrain__Header *h) {
  sink *s = r->data;
  if (s->frames < 8) s->offsets[s->frames] = h->offset;
  s->frames++;
  return 0;
}

static const pst_reader_cbs cbs = {on_payload, on_frame};

static int feed_all(pst_reader *r, const uint8_t *data, size_t len) {
  size_t pos = 0;
  while (pos < len) {
    char *base;
    size_t cap;
    pst_reader_buffer(r, &base, &cap);
    size_t n = len - pos < cap ? len - pos : cap;
    if (n > 7) n = 7 + (pos % 13); /* odd splits */
    if (n > len - pos) n = len - pos;
    memcpy(base, data + pos, n);
    pos += n;
    int rc = pst_reader_feed(r, n);
    if (rc < 0) return rc;
  }
  return 0;
}

static void test_frames(void) {
  pst_ring w, p;
  pair(&w, &p, SIZE);
  static float grad[40000];
  for (int i = 0; i < 40000; i++) grad[i] = (float)i * 0.25f - 7.0f;
  static uint8_t stream[4096];
  size_t n = 0;
  /* Chunk 0 (8000 floats) and 1 (2000) through the ring, chunk 2 (900 floats, under
   * PST_WIRE_RING_MIN) and 3 (the region is full by then) on the stream. */
  uint64_t offs[4] = {0, 8000, 10000, 10900};
  uint32_t cnt[4] = {8000, 2000, 900, 12000};
  static uint8_t payload_tail[64 * 1024];
  size_t tail_n = 0;
  for (int c = 0; c < 4; c++) {
    uint8_t head[PST_WIRE_CHUNK_HEAD];
    int hn = pst_wire_encode_chunk(PSTRAIN__MSG_TYPE__PUSH, 3, offs[c], cnt[c], c == 3, head,
                                   sizeof head);
    CHECK(hn > 0);
    int rn = pst_wire_ring_frame(&w, head, hn, sizeof head, grad + offs[c], cnt[c] * 4u);
    CHECKF((rn > 0) == (c < 2), "chunk %d: %d", c, rn);
    memcpy(stream + n, head, rn > 0 ? (size_t)rn : (size_t)hn);
    n += rn > 0 ? (size_t)rn : (size_t)hn;
    if (rn == 0) {
      /* An inline chunk's payload follows its header on the stream: kept aside here, and
       * put back after its header below. */
      memcpy(payload_tail + tail_n, grad + offs[c], cnt[c] * 4u);
      tail_n += cnt[c] * 4u;
    }
  }
  /* Rebuild the stream in order: frames 0, 1 (ring), 2 + payload, 3 + payload. */
  static uint8_t full[200000];
  size_t fn = 0, sp = 0, tp = 0;
  for (int c = 0; c < 4; c++) {
    pst_prefix pr;
    char err[160];
    CHECK(pst_wire_prefix_decode(stream + sp, PST_WIRE_MAX_PAYLOAD, &pr, err, sizeof err) == 0);
    size_t fl = PST_WIRE_PREFIX_LEN + pr.header_len;
    memcpy(full + fn, stream + sp, fl);
    fn += fl;
    sp += fl;
    CHECK(!!(pr.flags & PST_WIRE_FLAG_RING) == (c < 2));
    if (!(pr.flags & PST_WIRE_FLAG_RING)) {
      memcpy(full + fn, payload_tail + tp, pr.payload_len);
      fn += pr.payload_len;
      tp += pr.payload_len;
    }
  }
  CHECK(sp == n && tp == tail_n);
  sink s;
  memset(&s, 0, sizeof s);
  pst_reader rd;
  CHECK(pst_reader_init(&rd, &cbs, &s, 0) == 0);
  /* Without the ring the first ring frame is malformed. */
  CHECK(feed_all(&rd, full, fn) < 0 && strstr(rd.err, "shared memory") != NULL);
  pst_reader_free(&rd);
  memset(&s, 0, sizeof s);
  CHECK(pst_reader_init(&rd, &cbs, &s, 0) == 0);
  pst_reader_set_ring(&rd, &p);
  CHECKF(feed_all(&rd, full, fn) == 0, "%s", rd.err);
  CHECK(s.frames == 4);
  CHECK(memcmp(s.payload, grad, 22900 * 4) == 0);
  /* Read: the writer's region is free again, and the next frame starts a new lap. */
  uint8_t head[PST_WIRE_CHUNK_HEAD];
  int hn = pst_wire_encode_chunk(PSTRAIN__MSG_TYPE__PUSH, 4, 0, 8000, 0, head, sizeof head);
  CHECK(pst_wire_ring_frame(&w, head, hn, sizeof head, grad, 32000) > 0);
  /* A frame already marked, or a head with no room for the position, goes as it is. */
  int hn2 = pst_wire_encode_chunk(PSTRAIN__MSG_TYPE__PUSH, 4, 0, 8000, 0, head, sizeof head);
  CHECK(pst_wire_ring_frame(&w, head, hn2, (size_t)hn2 + 4, grad, 32000) == 0);
  pst_reader_free(&rd);
  pst_ring_free(&w);
  pst_ring_free(&p);
}

int main(void) {
  test_round_trip();
  test_lap_then_more();
  test_bad_positions();
  test_lying_reader();
  test_refused_offers();
  test_frames();
  printf("ring_test: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
