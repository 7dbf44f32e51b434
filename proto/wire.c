#include "proto/wire.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

static void put_u16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}

static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static uint32_t get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

void pst_wire_prefix_encode(uint8_t out[PST_WIRE_PREFIX_LEN], uint32_t header_len,
                            uint32_t payload_len) {
  put_u32(out, PST_WIRE_MAGIC);
  put_u16(out + 4, PST_WIRE_VERSION);
  put_u16(out + 6, 0);
  put_u32(out + 8, header_len);
  put_u32(out + 12, payload_len);
}

int pst_wire_prefix_decode(const uint8_t in[PST_WIRE_PREFIX_LEN], uint32_t max_payload,
                           pst_prefix *p, char *err, size_t errlen) {
  p->magic = get_u32(in);
  p->version = get_u16(in + 4);
  p->flags = get_u16(in + 6);
  p->header_len = get_u32(in + 8);
  p->payload_len = get_u32(in + 12);
  if (p->magic != PST_WIRE_MAGIC) {
    /* A TLS record starts with its type (22, a handshake) and version major 3: a peer with
     * TLS on meeting an end without it, which is worth saying in so many words. */
    int tls = in[0] == 0x16 && in[1] == 0x03;
    snprintf(err, errlen, "bad magic 0x%08" PRIx32 " (%s)", p->magic,
             tls ? "a TLS handshake: the peer uses TLS, this end does not" : "not a pstrain peer?");
    return -EPROTO;
  }
  if (p->version != PST_WIRE_VERSION) {
    snprintf(err, errlen, "protocol version %u, this build speaks %u", p->version,
             PST_WIRE_VERSION);
    return -EPROTO;
  }
  if ((p->flags & ~PST_WIRE_FLAG_RING) != 0) {
    snprintf(err, errlen, "unknown frame flags 0x%04x", p->flags);
    return -EPROTO;
  }
  if (p->header_len == 0 || p->header_len > PST_WIRE_MAX_HEADER) {
    snprintf(err, errlen, "header length %" PRIu32 " outside 1..%u", p->header_len,
             PST_WIRE_MAX_HEADER);
    return -EPROTO;
  }
  if (p->payload_len > max_payload) {
    snprintf(err, errlen, "payload length %" PRIu32 " over the cap of %" PRIu32, p->payload_len,
             max_payload);
    return -EPROTO;
  }
  return 0;
}

int pst_wire_encode(const Pstrain__Header *h, uint32_t payload_len, uint8_t *buf, size_t buflen) {
  size_t n = protobuf_c_message_get_packed_size(&h->base);
  if (n > PST_WIRE_MAX_HEADER || n + PST_WIRE_PREFIX_LEN > buflen) return -EMSGSIZE;
  /* An all-default header packs to zero bytes; the type is never MSG_INVALID, so n > 0. */
  protobuf_c_message_pack(&h->base, buf + PST_WIRE_PREFIX_LEN);
  pst_wire_prefix_encode(buf, (uint32_t)n, payload_len);
  return (int)(n + PST_WIRE_PREFIX_LEN);
}

/* Header.ring_pos's tag (field 24, varint): two bytes. */
#define RING_POS_TAG0 0xC0u
#define RING_POS_TAG1 0x01u

int pst_wire_ring_frame(pst_ring *ring, uint8_t *head, int head_len, size_t head_cap,
                        const void *payload, size_t len) {
  /* Room for the field: its tag and a position of up to 10 bytes. A protobuf message may
   * be followed by more of its fields (they merge), so the field is appended as it is. */
  if (!ring || !pst_ring_ready(ring) || len < PST_WIRE_RING_MIN || head_len < PST_WIRE_PREFIX_LEN ||
      (size_t)head_len + 12 > head_cap || get_u16(head + 6) != 0)
    return 0;
  uint64_t pos;
  if (pst_ring_put(ring, payload, len, &pos) < 0) return 0;
  uint8_t *p = head + head_len;
  *p++ = RING_POS_TAG0;
  *p++ = RING_POS_TAG1;
  do {
    uint8_t b = (uint8_t)(pos & 0x7f);
    pos >>= 7;
    *p++ = pos ? (uint8_t)(b | 0x80) : b;
  } while (pos);
  uint32_t n = (uint32_t)(p - head);
  put_u16(head + 6, PST_WIRE_FLAG_RING);
  put_u32(head + 8, get_u32(head + 8) + (n - (uint32_t)head_len));
  return (int)n;
}

void pst_wire_ring_offer(const pst_ring *ring, Pstrain__RingOffer *out) {
  Pstrain__RingOffer o = PSTRAIN__RING_OFFER__INIT;
  o.pid = (int32_t)getpid();
  o.fd = ring->fd;
  o.token.data = (uint8_t *)ring->token;
  o.token.len = sizeof ring->token;
  o.size = ring->mine_size;
  *out = o;
}

int pst_wire_ring_attach(pst_ring *ring, const Pstrain__RingOffer *offer, char *err, size_t errlen) {
  if (!offer) {
    snprintf(err, errlen, "no region offered");
    return -EINVAL;
  }
  return pst_ring_attach(ring, offer->pid, offer->fd, offer->token.data, offer->token.len,
                         offer->size, err, errlen);
}

int pst_wire_encode_chunk(Pstrain__MsgType type, uint64_t version, uint64_t offset,
                          uint32_t count, int last, uint8_t *buf, size_t buflen) {
  return pst_wire_encode_chunk_enc(type, version, offset, count, last, 4, buf, buflen);
}

/* The fields every tensor chunk's header has. */
static void chunk_header(Pstrain__Header *h, Pstrain__MsgType type, uint64_t version,
                         uint64_t offset, uint32_t count, int last) {
  h->type = type;
  h->version = version;
  h->offset = offset;
  h->count = count;
  h->last = last != 0;
}

int pst_wire_encode_chunk_enc(Pstrain__MsgType type, uint64_t version, uint64_t offset,
                              uint32_t count, int last, unsigned value_bytes, uint8_t *buf,
                              size_t buflen) {
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  chunk_header(&h, type, version, offset, count, last);
  return pst_wire_encode(&h, count * value_bytes, buf, buflen);
}

int pst_wire_encode_delta_chunk(uint64_t version, uint64_t offset, uint32_t count, int last,
                                int pairs, uint8_t *buf, size_t buflen) {
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  chunk_header(&h, PSTRAIN__MSG_TYPE__WEIGHTS, version, offset, count, last);
  h.delta = 1;
  h.sparse = pairs >= 0;
  return pst_wire_encode(&h, pairs >= 0 ? 8u * (uint32_t)pairs : count + 4, buf, buflen);
}

/* Whether m or a message inside it holds a field numbered 0. No such field exists in
 * protobuf, and protobuf-c refuses it in a one-byte tag but accepts it in a longer
 * (non-minimal) one, keeping it as an unknown field that then packs into a one-byte tag it
 * cannot read back (found by fuzz_wire_reader's round trip). A frame with one is malformed. */
static int has_field_zero(const ProtobufCMessage *m) {
  for (unsigned i = 0; i < m->n_unknown_fields; i++)
    if (m->unknown_fields[i].tag == 0) return 1;
  const ProtobufCMessageDescriptor *d = m->descriptor;
  for (unsigned f = 0; f < d->n_fields; f++) {
    const ProtobufCFieldDescriptor *fd = &d->fields[f];
    if (fd->type != PROTOBUF_C_TYPE_MESSAGE) continue;
    const char *base = (const char *)m;
    if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
      size_t n = *(const size_t *)(base + fd->quantifier_offset);
      ProtobufCMessage *const *v = *(ProtobufCMessage *const *const *)(base + fd->offset);
      for (size_t j = 0; j < n; j++)
        if (v[j] != NULL && has_field_zero(v[j])) return 1;
    } else {
      const ProtobufCMessage *sub = *(const ProtobufCMessage *const *)(base + fd->offset);
      if (sub != NULL && has_field_zero(sub)) return 1;
    }
  }
  return 0;
}

int pst_wire_validate(const Pstrain__Header *h, uint32_t payload_len, char *err, size_t errlen) {
  return pst_wire_validate_values(h, payload_len, 4, err, errlen);
}

int pst_wire_validate_values(const Pstrain__Header *h, uint32_t payload_len, unsigned value_bytes,
                             char *err, size_t errlen) {
  if (value_bytes != 2 && value_bytes != 4 && value_bytes != PST_WIRE_SPARSE &&
      value_bytes != PST_WIRE_INT8 && value_bytes != PST_WIRE_SPARSE_SET)
    value_bytes = 4;
  if (has_field_zero(&h->base)) {
    snprintf(err, errlen, "a field numbered 0 (not a protobuf field)");
    return -EPROTO;
  }
  switch (h->type) {
    case PSTRAIN__MSG_TYPE__WEIGHTS:
    case PSTRAIN__MSG_TYPE__PUSH:
      /* The count is capped as for float32 whatever the encoding: the receiver decodes the
       * values in place into count floats. */
      /* Sparse (top-k) chunks: a positive number of 8-byte pairs, at most max(1, count / 2),
       * so that they fit in the count floats they decode into (common/codec.h). */
      if (value_bytes == PST_WIRE_SPARSE && h->count > 0 && h->count <= PST_WIRE_MAX_PAYLOAD / 4 &&
          payload_len > 0 && payload_len % 8 == 0 &&
          payload_len / 8 <= (h->count / 2 > 1 ? h->count / 2 : 1)) {
        if (h->offset > UINT64_MAX / 8) {
          snprintf(err, errlen, "tensor chunk offset %" PRIu64 " out of range", h->offset);
          return -EPROTO;
        }
        return 0;
      }
      /* A delta pull's sparse chunks: up to count / 8 pairs, none included. */
      if (value_bytes == PST_WIRE_SPARSE_SET && h->count >= 8 &&
          h->count <= PST_WIRE_MAX_PAYLOAD / 4 && payload_len % 8 == 0 &&
          payload_len / 8 <= h->count / 8) {
        if (h->offset > UINT64_MAX / 8) {
          snprintf(err, errlen, "tensor chunk offset %" PRIu64 " out of range", h->offset);
          return -EPROTO;
        }
        return 0;
      }
      /* int8 chunks: a 4-byte scale, then a byte per value. */
      if (value_bytes == PST_WIRE_INT8 && h->count > 0 && h->count <= PST_WIRE_MAX_PAYLOAD / 4 &&
          payload_len == h->count + 4) {
        if (h->offset > UINT64_MAX / 8) {
          snprintf(err, errlen, "tensor chunk offset %" PRIu64 " out of range", h->offset);
          return -EPROTO;
        }
        return 0;
      }
      if (h->count == 0 || h->count > PST_WIRE_MAX_PAYLOAD / 4 || value_bytes == PST_WIRE_SPARSE ||
          value_bytes == PST_WIRE_INT8 || value_bytes == PST_WIRE_SPARSE_SET ||
          h->count * value_bytes != payload_len) {
        snprintf(err, errlen,
                 "tensor chunk of %" PRIu64 " values of %u bytes with a %" PRIu32 "-byte payload",
                 h->count, value_bytes, payload_len);
        return -EPROTO;
      }
      if (h->offset > UINT64_MAX / 8) {
        snprintf(err, errlen, "tensor chunk offset %" PRIu64 " out of range", h->offset);
        return -EPROTO;
      }
      return 0;
    case PSTRAIN__MSG_TYPE__HELLO:
    case PSTRAIN__MSG_TYPE__WELCOME:
    case PSTRAIN__MSG_TYPE__PULL:
    case PSTRAIN__MSG_TYPE__ACK:
    case PSTRAIN__MSG_TYPE__ERROR:
    case PSTRAIN__MSG_TYPE__STATUS_REQ:
    case PSTRAIN__MSG_TYPE__STATUS:
    case PSTRAIN__MSG_TYPE__SHUTDOWN:
    case PSTRAIN__MSG_TYPE__REPORT:
    case PSTRAIN__MSG_TYPE__BYE:
    case PSTRAIN__MSG_TYPE__HEARTBEAT:
    case PSTRAIN__MSG_TYPE__ROLLBACK:
    case PSTRAIN__MSG_TYPE__EVAL:
    case PSTRAIN__MSG_TYPE__DATA:
      if (payload_len != 0) {
        snprintf(err, errlen, "message type %d carries an unexpected %" PRIu32 "-byte payload",
                 (int)h->type, payload_len);
        return -EPROTO;
      }
      if (h->type == PSTRAIN__MSG_TYPE__HELLO && h->hello == NULL) {
        snprintf(err, errlen, "HELLO without its hello field");
        return -EPROTO;
      }
      if (h->type == PSTRAIN__MSG_TYPE__WELCOME && h->welcome == NULL) {
        snprintf(err, errlen, "WELCOME without its welcome field");
        return -EPROTO;
      }
      if (h->type == PSTRAIN__MSG_TYPE__REPORT && h->report == NULL) {
        snprintf(err, errlen, "REPORT without its report field");
        return -EPROTO;
      }
      if (h->status && h->status->n_workers > PST_WIRE_MAX_WORKERS) {
        snprintf(err, errlen, "status lists %zu workers", h->status->n_workers);
        return -EPROTO;
      }
      return 0;
    default:
      snprintf(err, errlen, "unknown message type %d", (int)h->type);
      return -EPROTO;
  }
}

/* ---- arena allocator: protobuf-c unpacks into the reader's fixed arena ---- */

static void *arena_alloc(void *data, size_t size) {
  pst_reader *r = data;
  size_t need = (size + 15) & ~(size_t)15;
  if (need < size || r->arena_used + need > r->arena_size) return NULL;
  void *p = r->arena + r->arena_used;
  r->arena_used += need;
  return p;
}

static void arena_free(void *data, void *ptr) {
  (void)data;
  (void)ptr; /* The whole arena is reset once per frame. */
}

int pst_reader_init(pst_reader *r, const pst_reader_cbs *cbs, void *data, uint32_t max_payload) {
  memset(r, 0, sizeof *r);
  r->cbs = cbs;
  r->data = data;
  return pst_reader_grow(r, max_payload ? max_payload : PST_WIRE_MAX_PAYLOAD,
                         PST_WIRE_MAX_HEADER, PST_WIRE_ARENA, PST_WIRE_STAGE);
}

int pst_reader_init_small(pst_reader *r, const pst_reader_cbs *cbs, void *data) {
  memset(r, 0, sizeof *r);
  r->cbs = cbs;
  r->data = data;
  return pst_reader_grow(r, 0, PST_WIRE_SMALL_HEADER, PST_WIRE_SMALL_ARENA, PST_WIRE_SMALL_STAGE);
}

int pst_reader_grow(pst_reader *r, uint32_t max_payload, uint32_t max_header, size_t arena,
                    size_t stage) {
  if (r->state != PST_RD_PREFIX || r->got != 0 || stage < r->stage_len) return -EBUSY;
  uint8_t *h = realloc(r->header_buf, max_header);
  if (h) r->header_buf = h;
  uint8_t *st = h ? realloc(r->stage, stage) : NULL;
  if (st) r->stage = st;
  uint8_t *a = st ? realloc(r->arena, arena) : NULL;
  if (a) r->arena = a;
  if (!a) {
    pst_reader_free(r);
    return -ENOMEM;
  }
  r->max_payload = max_payload;
  r->max_header = max_header;
  r->arena_size = arena;
  r->stage_size = stage;
  return 0;
}

void pst_reader_set_value_bytes(pst_reader *r, unsigned value_bytes) {
  r->value_bytes = value_bytes == 2 || value_bytes == PST_WIRE_SPARSE ||
                           value_bytes == PST_WIRE_INT8
                       ? value_bytes
                       : 4;
}

void pst_reader_take_delta(pst_reader *r, int on) { r->takes_delta = on != 0; }

void pst_reader_set_ring(pst_reader *r, pst_ring *ring) { r->ring = ring; }

void pst_reader_free(pst_reader *r) {
  free(r->header_buf);
  free(r->stage);
  free(r->arena);
  r->header_buf = r->stage = r->arena = NULL;
}

/* A large payload still to come is read straight into its destination. */
#define DIRECT_MIN (16u * 1024u)

void pst_reader_buffer(pst_reader *r, char **base, size_t *len) {
  if (r->stage_pos == r->stage_len) r->stage_pos = r->stage_len = 0;
  if (r->state == PST_RD_PAYLOAD && r->stage_len == 0 &&
      r->prefix.payload_len - r->got >= DIRECT_MIN) {
    r->direct = 1;
    *base = (char *)r->payload + r->got;
    *len = r->prefix.payload_len - r->got;
    return;
  }
  r->direct = 0;
  *base = (char *)r->stage + r->stage_len;
  *len = r->stage_size - r->stage_len;
  /* In a stream of large tensor chunks, read just the next frame's prefix and header (they
   * fit in PST_WIRE_CHUNK_HEAD bytes): a full staging read would also take up to 64 KiB of
   * its payload, which then has to be copied into place. libuv reads again at once when a
   * read fills its buffer, so this costs no extra wakeup. */
  if (r->big && r->state == PST_RD_PREFIX && r->stage_len == 0) *len = PST_WIRE_CHUNK_HEAD;
}

int pst_reader_payload_rest(pst_reader *r, char **base, size_t *len) {
  if (r->stage_pos == r->stage_len) r->stage_pos = r->stage_len = 0;
  if (r->state != PST_RD_PAYLOAD || r->stage_len != 0 || r->prefix.payload_len <= r->got)
    return 0;
  r->direct = 1;
  *base = (char *)r->payload + r->got;
  *len = r->prefix.payload_len - r->got;
  return 1;
}

static int fail(pst_reader *r, const uint8_t *bytes, size_t n) {
  pst_log_sanitize(bytes, n, 24, r->sample, sizeof r->sample);
  return -EPROTO;
}

/* The frame is complete: hand it over, then get ready for the next prefix. */
static int finish_frame(pst_reader *r) {
  /* A payload that came through the ring leaves only small frames on the stream. */
  if (r->prefix.payload_len > 0)
    r->big = !(r->prefix.flags & PST_WIRE_FLAG_RING) && r->prefix.payload_len >= DIRECT_MIN;
  int rc = r->cbs->on_frame(r, r->hdr);
  r->frames++;
  r->state = PST_RD_PREFIX;
  r->got = 0;
  r->hdr = NULL;
  r->payload = NULL;
  if (rc == PST_READER_PAUSE) {
    r->paused = 1;
    return PST_READER_PAUSE;
  }
  if (rc < 0 && r->err[0] == '\0') snprintf(r->err, sizeof r->err, "frame rejected (%d)", rc);
  return rc < 0 ? rc : 0;
}

static int header_done(pst_reader *r) {
  ProtobufCAllocator alloc = {arena_alloc, arena_free, r};
  r->arena_used = 0;
  Pstrain__Header *h = pstrain__header__unpack(&alloc, r->prefix.header_len, r->header_buf);
  if (h == NULL) {
    snprintf(r->err, sizeof r->err, "header of %" PRIu32 " bytes does not unpack",
             r->prefix.header_len);
    return fail(r, r->header_buf, r->prefix.header_len);
  }
  unsigned vb = r->value_bytes ? r->value_bytes : 4;
  if (h->delta && (h->type == PSTRAIN__MSG_TYPE__WEIGHTS || h->type == PSTRAIN__MSG_TYPE__PUSH)) {
    if (!r->takes_delta || h->type != PSTRAIN__MSG_TYPE__WEIGHTS) {
      snprintf(r->err, sizeof r->err, "a delta chunk where none may come");
      return fail(r, r->header_buf, r->prefix.header_len);
    }
    vb = h->sparse ? PST_WIRE_SPARSE_SET : PST_WIRE_INT8;
  } else if (h->sparse) {
    snprintf(r->err, sizeof r->err, "a sparse chunk that is no delta");
    return fail(r, r->header_buf, r->prefix.header_len);
  }
  if (pst_wire_validate_values(h, r->prefix.payload_len, vb, r->err, sizeof r->err) < 0)
    return fail(r, r->header_buf, r->prefix.header_len);
  r->hdr = h;
  r->got = 0;
  if (r->prefix.payload_len == 0) return finish_frame(r);
  float *dst = NULL;
  int rc = r->cbs->on_payload(r, h, &dst);
  if (rc < 0 || dst == NULL) {
    if (r->err[0] == '\0') snprintf(r->err, sizeof r->err, "unexpected tensor chunk");
    return rc < 0 ? rc : -EPROTO;
  }
  if (r->prefix.flags & PST_WIRE_FLAG_RING) {
    /* Copied out of the peer's region, then the frame is whole. */
    if (pst_ring_get(r->ring, h->ring_pos, dst, r->prefix.payload_len, r->err, sizeof r->err) < 0)
      return fail(r, r->header_buf, r->prefix.header_len);
    return finish_frame(r);
  }
  r->payload = (uint8_t *)dst;
  r->state = PST_RD_PAYLOAD;
  return 0;
}

/* Consumes staged bytes until they run out, the reader pauses, or an error. */
static int drain_stage(pst_reader *r) {
  while (r->stage_pos < r->stage_len) {
    const uint8_t *in = r->stage + r->stage_pos;
    size_t avail = r->stage_len - r->stage_pos, take;
    int rc = 0;
    switch (r->state) {
      case PST_RD_PREFIX:
        take = PST_WIRE_PREFIX_LEN - r->got;
        if (take > avail) take = avail;
        memcpy(r->prefix_buf + r->got, in, take);
        r->got += (uint32_t)take;
        r->stage_pos += take;
        if (r->got == PST_WIRE_PREFIX_LEN) {
          if (pst_wire_prefix_decode(r->prefix_buf, r->max_payload, &r->prefix, r->err,
                                     sizeof r->err) < 0)
            return fail(r, r->prefix_buf, PST_WIRE_PREFIX_LEN);
          if ((r->prefix.flags & PST_WIRE_FLAG_RING) && (!r->ring || r->prefix.payload_len == 0)) {
            snprintf(r->err, sizeof r->err, "%s",
                     r->ring ? "a frame in shared memory without a payload"
                             : "a frame in shared memory where no region is mapped");
            return fail(r, r->prefix_buf, PST_WIRE_PREFIX_LEN);
          }
          if (r->prefix.header_len > r->max_header) {
            snprintf(r->err, sizeof r->err,
                     "header of %" PRIu32 " bytes before registration (at most %" PRIu32 ")",
                     r->prefix.header_len, r->max_header);
            return fail(r, r->prefix_buf, PST_WIRE_PREFIX_LEN);
          }
          r->state = PST_RD_HEADER;
          r->got = 0;
        }
        break;
      case PST_RD_HEADER:
        take = r->prefix.header_len - r->got;
        if (take > avail) take = avail;
        memcpy(r->header_buf + r->got, in, take);
        r->got += (uint32_t)take;
        r->stage_pos += take;
        if (r->got == r->prefix.header_len) rc = header_done(r);
        break;
      case PST_RD_PAYLOAD:
        take = r->prefix.payload_len - r->got;
        if (take > avail) take = avail;
        memcpy(r->payload + r->got, in, take);
        r->got += (uint32_t)take;
        r->stage_pos += take;
        if (r->got == r->prefix.payload_len) rc = finish_frame(r);
        break;
    }
    if (rc != 0) return rc;
  }
  return 0;
}

int pst_reader_feed(pst_reader *r, size_t n) {
  if (r->direct) {
    r->direct = 0;
    r->got += (uint32_t)n;
    if (r->got == r->prefix.payload_len) return finish_frame(r);
    return 0;
  }
  r->stage_len += n;
  return drain_stage(r);
}

int pst_reader_resume(pst_reader *r) {
  r->paused = 0;
  return drain_stage(r);
}
