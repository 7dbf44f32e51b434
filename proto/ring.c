#include "proto/ring.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

/* The header page: what the region is, and the one field its owner changes as it runs. */
#define RING_MAGIC 0x47525350u /* "PSRG" read as a little-endian u32 */
#define RING_LAYOUT 1u
#define OFF_MAGIC 0
#define OFF_LAYOUT 4
#define OFF_SIZE 8
#define OFF_TOKEN 16
/* How far this region's owner has read the peer's region: a position of the peer's. On a
 * cache line of its own, away from the fields written once. */
#define OFF_CONSUMED 64

/* The name every region's memfd has: an attaching end checks the descriptor's link says so
 * before it opens anything (/proc/PID/fd/FD of a process that is not a pstrain peer could be
 * a device, whose opening may do something). */
#define RING_NAME "pstrain-ring"

static uint32_t rd32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

static uint64_t rd64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

static _Atomic uint64_t *consumed_of(const uint8_t *region) {
  return (_Atomic uint64_t *)(uintptr_t)(region + OFF_CONSUMED);
}

void pst_ring_init(pst_ring *r) {
  memset(r, 0, sizeof *r);
  r->fd = -1;
}

static int fail(char *err, size_t errlen, int code, const char *what) {
  snprintf(err, errlen, "%s: %s", what, strerror(-code));
  return code;
}

int pst_ring_create(pst_ring *r, uint64_t size, char *err, size_t errlen) {
  if (r->mine) return -EALREADY;
  if (size < PST_RING_MIN_SIZE) size = PST_RING_MIN_SIZE;
  if (size > PST_RING_MAX_SIZE) size = PST_RING_MAX_SIZE;
  size = (size + PST_RING_HEAD - 1) / PST_RING_HEAD * PST_RING_HEAD;
  uint8_t token[PST_RING_TOKEN];
  if (getrandom(token, sizeof token, 0) != (ssize_t)sizeof token)
    return fail(err, errlen, -EIO, "no random bytes for the region's token");
  int fd = memfd_create(RING_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return fail(err, errlen, -errno, "memfd_create");
  size_t total = PST_RING_HEAD + (size_t)size;
  if (ftruncate(fd, (off_t)total) < 0) {
    int e = -errno;
    close(fd);
    return fail(err, errlen, e, "sizing the region");
  }
  /* Sealed before the peer can see it: it can never shrink (which would fault the peer's
   * reads), grow, or lose its seals. */
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
    int e = -errno;
    close(fd);
    return fail(err, errlen, e, "sealing the region");
  }
  void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = -errno;
    close(fd);
    return fail(err, errlen, e, "mapping the region");
  }
  uint8_t *h = p;
  uint32_t magic = RING_MAGIC, layout = RING_LAYOUT;
  memcpy(h + OFF_MAGIC, &magic, 4);
  memcpy(h + OFF_LAYOUT, &layout, 4);
  memcpy(h + OFF_SIZE, &size, 8);
  memcpy(h + OFF_TOKEN, token, sizeof token);
  atomic_store_explicit(consumed_of(h), 0, memory_order_relaxed);
  r->fd = fd;
  r->mine = h;
  r->mine_size = size;
  r->head = 0;
  memcpy(r->token, token, sizeof token);
  return 0;
}

int pst_ring_attach(pst_ring *r, int pid, int fd, const uint8_t *token, size_t token_len,
                    uint64_t size, char *err, size_t errlen) {
  if (r->theirs) return -EALREADY;
  if (pid <= 0 || fd < 0 || token_len != PST_RING_TOKEN || size < PST_RING_MIN_SIZE ||
      size > PST_RING_MAX_SIZE || size % PST_RING_HEAD != 0) {
    snprintf(err, errlen, "an offer out of range (pid %d, descriptor %d, %zu-byte token, %" PRIu64
             " bytes)", pid, fd, token_len, size);
    return -EINVAL;
  }
  char path[64], link[128];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, fd);
  ssize_t n = readlink(path, link, sizeof link - 1);
  if (n < 0) return fail(err, errlen, -errno, "the peer's region is not here (another host?)");
  link[n] = '\0';
  if (strncmp(link, "/memfd:" RING_NAME, strlen("/memfd:" RING_NAME)) != 0) {
    snprintf(err, errlen, "%s is not a pstrain region", path);
    return -EINVAL;
  }
  int rfd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (rfd < 0) return fail(err, errlen, -errno, "opening the peer's region");
  struct stat st;
  size_t total = PST_RING_HEAD + (size_t)size;
  int seals = fcntl(rfd, F_GET_SEALS);
  int bad = fstat(rfd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != total;
  if (bad || seals < 0 || !(seals & F_SEAL_SHRINK)) {
    close(rfd);
    snprintf(err, errlen, "%s", bad ? "the peer's region is not of the size offered"
                                    : "the peer's region is not sealed against shrinking");
    return -EINVAL;
  }
  void *p = mmap(NULL, total, PROT_READ, MAP_SHARED, rfd, 0);
  int e = -errno;
  close(rfd);
  if (p == MAP_FAILED) return fail(err, errlen, e, "mapping the peer's region");
  const uint8_t *h = p;
  if (rd32(h + OFF_MAGIC) != RING_MAGIC || rd32(h + OFF_LAYOUT) != RING_LAYOUT ||
      rd64(h + OFF_SIZE) != size || memcmp(h + OFF_TOKEN, token, PST_RING_TOKEN) != 0) {
    munmap(p, total);
    snprintf(err, errlen, "the region at %s is not the one offered", path);
    return -EINVAL;
  }
  r->theirs = h;
  r->theirs_size = size;
  r->tail = 0;
  return 0;
}

/* The descriptor is this end's only while its region is mapped: a zeroed ring (fd 0) holds
 * none, and closes none. */
void pst_ring_mapped_by_peer(pst_ring *r) {
  if (r->mine && r->fd >= 0) close(r->fd);
  r->fd = -1;
}

int pst_ring_ready(const pst_ring *r) { return r->mine != NULL && r->theirs != NULL; }

int pst_ring_put(pst_ring *r, const void *src, size_t len, uint64_t *pos) {
  if (!pst_ring_ready(r)) return -ENOTCONN;
  uint64_t size = r->mine_size;
  if (len == 0 || len > size) return -ENOBUFS;
  /* What the peer has read of this region, from its own header. A claim beyond what was put
   * is a lie: no room then, and the bytes go on the stream. */
  uint64_t read = atomic_load_explicit(consumed_of(r->theirs), memory_order_acquire);
  if (read > r->head) {
    r->no_room++;
    return -ENOBUFS;
  }
  uint64_t p = r->head;
  /* Everything read: a new lap from the region's first byte, so the pages in use stay those
   * of the most bytes ever in flight. A payload that would wrap starts the next lap. */
  if ((read == p && p % size != 0) || p % size + len > size) p = (p / size + 1) * size;
  /* The oldest unread byte: where the peer stands, or, when it stands at the start of the
   * bytes skipped before a lap (it has read everything before them), the lap's first. */
  uint64_t live = read >= r->gap_from && read < r->gap_to ? r->gap_to : read;
  /* With everything read any place is free; else the bytes from the oldest unread one to
   * this payload's end must fit in the region. */
  if (p < r->head || (read != r->head && p + len - live > size)) {
    r->no_room++;
    return -ENOBUFS;
  }
  if (p != r->head) {
    r->gap_from = r->head;
    r->gap_to = p;
  }
  memcpy(r->mine + PST_RING_HEAD + p % size, src, len);
  /* The bytes are in place before the frame that names them can be sent (the system call
   * that sends it is a barrier too; this says it in C's terms). */
  atomic_thread_fence(memory_order_release);
  r->head = p + len;
  r->put_bytes += len;
  *pos = p;
  return 0;
}

int pst_ring_get(pst_ring *r, uint64_t pos, void *dst, size_t len, char *err, size_t errlen) {
  if (!r->theirs || !r->mine) {
    snprintf(err, errlen, "a payload in shared memory, and no region mapped");
    return -EPROTO;
  }
  uint64_t size = r->theirs_size;
  if (pos < r->tail || len == 0 || len > size || pos % size + len > size) {
    snprintf(err, errlen,
             "a payload of %zu bytes at position %" PRIu64 " of a %" PRIu64
             "-byte region read up to %" PRIu64,
             len, pos, size, r->tail);
    return -EPROTO;
  }
  atomic_thread_fence(memory_order_acquire);
  memcpy(dst, r->theirs + PST_RING_HEAD + pos % size, len);
  r->tail = pos + len;
  r->got_bytes += len;
  /* Read: the peer may put other bytes there. */
  atomic_store_explicit(consumed_of(r->mine), r->tail, memory_order_release);
  return 0;
}

void pst_ring_free(pst_ring *r) {
  if (r->mine) munmap(r->mine, PST_RING_HEAD + (size_t)r->mine_size);
  if (r->theirs) munmap((void *)(uintptr_t)r->theirs, PST_RING_HEAD + (size_t)r->theirs_size);
  if (r->mine && r->fd >= 0) close(r->fd);
  pst_ring_init(r);
}
