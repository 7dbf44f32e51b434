#include "proto/send.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* One control frame: the write request and the bytes it sends, freed by its callback. */
typedef struct {
  uv_write_t req;
  uint8_t bytes[];
} send_block;

static void on_sent(uv_write_t *req, int status) {
  (void)status;
  free(req->data);
}

static int send_block_of(pst_tls_stream *s, send_block *m, size_t n) {
  m->req.data = m;
  uv_buf_t b = uv_buf_init((char *)m->bytes, (unsigned)n);
  int rc = pst_tls_stream_write(s, &m->req, &b, 1, on_sent);
  if (rc < 0) free(m);
  return rc;
}

int pst_send_header(pst_tls_stream *s, const Pstrain__Header *h) {
  size_t need = protobuf_c_message_get_packed_size(&h->base) + PST_WIRE_PREFIX_LEN;
  send_block *m = malloc(sizeof *m + need);
  if (!m) return -ENOMEM;
  int n = pst_wire_encode(h, 0, m->bytes, need);
  if (n < 0) {
    free(m);
    return n;
  }
  int rc = send_block_of(s, m, (size_t)n);
  return rc < 0 ? rc : n;
}

size_t pst_send_ring_chunk(pst_ring *ring, uv_buf_t frame[2]) {
  int n = pst_wire_ring_frame(ring, (uint8_t *)frame[0].base, (int)frame[0].len,
                              PST_WIRE_CHUNK_HEAD, frame[1].base, frame[1].len);
  if (n <= 0) return 0;
  size_t moved = frame[1].len;
  frame[0].len = (unsigned)n;
  frame[1].len = 0;
  return moved;
}

unsigned pst_send_compact(uv_buf_t *bufs, unsigned n) {
  unsigned k = 0;
  for (unsigned i = 0; i < n; i++)
    if (bufs[i].len > 0) bufs[k++] = bufs[i];
  return k;
}

int pst_send_copy(pst_tls_stream *s, const void *bytes, size_t n) {
  send_block *m = malloc(sizeof *m + n);
  if (!m) return -ENOMEM;
  memcpy(m->bytes, bytes, n);
  return send_block_of(s, m, n);
}
