/* Shared-memory payloads between a worker and a ps on the same host (issue 41).
 *
 * Over loopback TCP a step's payload costs the kernel's stack on both sides besides the two
 * copies (docs/benchmarks.md, "The kernel's copies, priced": 0.84-1.07 ms of CPU for 940 KB
 * each way against 0.17 ms through a shared mapping). So each end of a connection may own a
 * region: a sealed memfd it writes its payloads into, which the other end, on the same host
 * and under the same user, opens through /proc/PID/fd/FD (the offer in HELLO and WELCOME)
 * and maps read-only. The frame still goes on the stream, without its payload and with the
 * payload's position in the region (proto/wire.h, PST_WIRE_FLAG_RING), so the stream keeps
 * the order and the wake-ups, and the bytes skip the kernel.
 *
 * Each end writes only its own region: its payloads, and in its header how far it has read
 * the other's (`consumed`). A writer reuses bytes only once the reader's header says they are
 * read, so an honest pair never races. A peer that lies (rewrites bytes being read, names
 * positions it never wrote, claims to have read what it did not) can only garble its own
 * numbers, as one that sends garbage over TCP can: every position is checked against the
 * region's bounds before a byte is copied, and the region is sealed against shrinking (a
 * truncated mapping would fault the reader).
 *
 * A region is a ring of positions that only grow: the payload at position p lies at byte
 * p mod size of the data, whole (a payload that would wrap starts at the next lap instead),
 * and the writer starts a new lap whenever the reader has read everything, so the pages
 * touched stay about the most bytes in flight. A payload that finds no room goes on the
 * stream as before: nothing ever waits for the ring.
 *
 * This module owns the regions and their header; it knows nothing of frames. */
#ifndef PSTRAIN_PROTO_RING_H
#define PSTRAIN_PROTO_RING_H

#include <stddef.h>
#include <stdint.h>

#define PST_RING_TOKEN 16               /* bytes of a region's token */
#define PST_RING_HEAD 4096u             /* the header page before the data */
#define PST_RING_MIN_SIZE (64u * 1024u) /* data bytes a region offers at least */
#define PST_RING_MAX_SIZE (1024u * 1024u * 1024u) /* ... and at most */

typedef struct pst_ring {
  /* This end's region: written here, read by the peer. fd stays open until the peer has
   * mapped it (it opens /proc/PID/fd/FD), then pst_ring_mapped_by_peer closes it. */
  int fd;
  uint8_t *mine;           /* [PST_RING_HEAD + mine_size], read-write; NULL: none */
  uint64_t mine_size;
  uint64_t head;           /* position of the next byte to put */
  uint64_t gap_from, gap_to; /* the positions skipped before the newest lap (never read) */
  uint8_t token[PST_RING_TOKEN];
  /* The peer's region, read-only; NULL until attached. */
  const uint8_t *theirs;   /* [PST_RING_HEAD + theirs_size] */
  uint64_t theirs_size;
  uint64_t tail;           /* position up to which it has been read */
  /* Figures: payload bytes put and read, and puts that found no room (went on the stream). */
  uint64_t put_bytes, got_bytes, no_room;
} pst_ring;

/* An empty ring (no region of either side): fd -1. A zeroed ring is empty too. */
void pst_ring_init(pst_ring *r);
/* Creates this end's region of `size` data bytes (rounded up to a page, within
 * PST_RING_MIN_SIZE..PST_RING_MAX_SIZE): 0, or a negative code with a reason in err. Its pages
 * are allocated as they are first written. */
int pst_ring_create(pst_ring *r, uint64_t size, char *err, size_t errlen);
/* Maps the peer's region from its offer: the process pid's descriptor fd, which must be a
 * pstrain region (a sealed memfd) of `size` data bytes whose header carries `token`. 0, or a
 * negative code with a reason in err (another host's pid, another user's process, anything
 * else at that descriptor): the pair then keeps to the stream. */
int pst_ring_attach(pst_ring *r, int pid, int fd, const uint8_t *token, size_t token_len,
                    uint64_t size, char *err, size_t errlen);
/* The peer mapped this end's region: the descriptor is no longer needed. */
void pst_ring_mapped_by_peer(pst_ring *r);
/* Both regions are mapped: payloads may be put (the peer's header says what it has read). */
int pst_ring_ready(const pst_ring *r);
/* Copies len bytes into this end's region: 0 with *pos set, or -ENOBUFS when there is no
 * room now (or len is 0 or over the region), -ENOTCONN when the ring is not ready. */
int pst_ring_put(pst_ring *r, const void *src, size_t len, uint64_t *pos);
/* Copies the len bytes the peer put at pos out of its region into dst, and tells the peer
 * they are read: 0, or -EPROTO with a reason in err (no region mapped, a position behind one
 * already read, or bytes outside the region). */
int pst_ring_get(pst_ring *r, uint64_t pos, void *dst, size_t len, char *err, size_t errlen);
/* Unmaps both regions and closes the descriptor; the ring is empty again. */
void pst_ring_free(pst_ring *r);

#endif
