/* Control frames over a connection (common/tls.h's stream, with or without TLS): each is
 * encoded into a block of its own, which is freed once written. For the rare, small
 * messages (HELLO, WELCOME, PULL, REPORT, ERROR, ...); tensors go out zero-copy with
 * pst_tls_stream_write instead. */
#ifndef PSTRAIN_PROTO_SEND_H
#define PSTRAIN_PROTO_SEND_H

#include <stddef.h>

#include "common/tls.h"
#include "proto/wire.h"

/* Queues the frame of h (prefix and header, no payload). The bytes queued (> 0), or a
 * negative code (-ENOMEM, an encoding error, or the stream's). */
int pst_send_header(pst_tls_stream *s, const Pstrain__Header *h);
/* Queues a copy of bytes[n]. 0 or a negative code. */
int pst_send_copy(pst_tls_stream *s, const void *bytes, size_t n);
/* A tensor chunk's frame about to be written as frame[0] (its head, in a buffer of
 * PST_WIRE_CHUNK_HEAD bytes) and frame[1] (its payload): moved into the ring when it may go
 * there (pst_wire_ring_frame), frame[0] then the marked head and frame[1] empty. Returns the
 * payload bytes moved (0: the frame goes as it was). */
size_t pst_send_ring_chunk(pst_ring *ring, uv_buf_t frame[2]);
/* Drops the empty buffers of bufs[n] (a frame whose payload went into the ring, a sparse
 * delta chunk of no pairs), keeping the others' order; returns how many are left. libuv takes
 * a write whose last buffer is empty for unfinished once the rest is written (its
 * uv__write_req_update stops at it), and finishes it only after waiting for the socket to be
 * writable: a turn of the loop later, with the writes queued behind it waiting too. */
unsigned pst_send_compact(uv_buf_t *bufs, unsigned n);

#endif
