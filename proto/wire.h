/* Framing: the 16-byte prefix, the protobuf header, and an incremental frame reader.
 *
 * The reader is fed by libuv: pst_reader_buffer() says where the next read should land
 * (a small staging buffer while a prefix or header is expected; the payload's final
 * destination when a large payload is expected, so tensor bytes are read once, straight
 * into place), and pst_reader_feed() consumes what arrived. Every limit is checked before
 * anything is allocated, and a header is unpacked into a per-reader arena, so reading a
 * frame allocates nothing. */
#ifndef PSTRAIN_PROTO_WIRE_H
#define PSTRAIN_PROTO_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "proto/pstrain.pb-c.h"
#include "proto/ring.h"

#define PST_WIRE_MAGIC 0x52545350u /* "PSTR" read as a little-endian u32 */
#define PST_WIRE_VERSION 1
#define PST_WIRE_PREFIX_LEN 16
#define PST_WIRE_MAX_HEADER (64u * 1024u)        /* bytes of protobuf header */
#define PST_WIRE_MAX_PAYLOAD (256u * 1024u * 1024u) /* bytes of tensor payload in one frame */
#define PST_WIRE_MAX_WORKERS 4096                /* repeated WorkerStatus in a Status */
#define PST_WIRE_ARENA (512u * 1024u)            /* unpack arena per reader */
#define PST_WIRE_STAGE (64u * 1024u)             /* staging buffer per reader */
/* A connection that has not registered yet may send only small control frames (HELLO,
 * STATUS_REQ): its reader gets about 10 KiB instead of 640 KiB (pst_reader_init_small). */
#define PST_WIRE_SMALL_HEADER 1024u
#define PST_WIRE_SMALL_ARENA (8u * 1024u)
#define PST_WIRE_SMALL_STAGE 1024u

/* The prefix's flags. RING: the frame's payload_len bytes are not on the stream but in the
 * sender's shared region, at the position Header.ring_pos (proto/ring.h); only on a
 * connection whose ends mapped each other's region. */
#define PST_WIRE_FLAG_RING 0x0001u

/* Bytes that must fit in a caller's buffer for prefix + any header we encode. */
#define PST_WIRE_MAX_FRAME_HEAD (PST_WIRE_PREFIX_LEN + PST_WIRE_MAX_HEADER)
/* Prefix + header of a tensor chunk (WEIGHTS/PUSH) always fit in this many bytes. */
#define PST_WIRE_CHUNK_HEAD 64

typedef struct {
  uint32_t magic;
  uint16_t version;
  uint16_t flags;
  uint32_t header_len;
  uint32_t payload_len;
} pst_prefix;

void pst_wire_prefix_encode(uint8_t out[PST_WIRE_PREFIX_LEN], uint32_t header_len,
                            uint32_t payload_len);
/* Decodes and checks magic, version and caps. Returns 0 or -EPROTO with a reason in err. */
int pst_wire_prefix_decode(const uint8_t in[PST_WIRE_PREFIX_LEN], uint32_t max_payload,
                           pst_prefix *p, char *err, size_t errlen);

/* Writes prefix + packed header into buf. Returns the byte count or a negative code
 * (-EMSGSIZE when the header would exceed the cap or buflen). */
int pst_wire_encode(const Pstrain__Header *h, uint32_t payload_len, uint8_t *buf, size_t buflen);
/* Shorthand for a tensor chunk header (WEIGHTS or PUSH): buf holds PST_WIRE_CHUNK_HEAD. */
int pst_wire_encode_chunk(Pstrain__MsgType type, uint64_t version, uint64_t offset,
                          uint32_t count, int last, uint8_t *buf, size_t buflen);

/* The same with value_bytes bytes per value (2: an fp16 or bf16 encoded chunk, common/codec.h;
 * anything but 2 means 4). The payload of count values then holds count x value_bytes bytes. */
int pst_wire_encode_chunk_enc(Pstrain__MsgType type, uint64_t version, uint64_t offset,
                              uint32_t count, int last, unsigned value_bytes, uint8_t *buf,
                              size_t buflen);
/* A WEIGHTS chunk of a delta pull (Header.delta): count values as an int8 chunk, a 4-byte
 * scale and count bytes (common/codec.h); or, with pairs >= 0, as that many sparse pairs of
 * the values that changed (Header.sparse, 8 bytes each). */
int pst_wire_encode_delta_chunk(uint64_t version, uint64_t offset, uint32_t count, int last,
                                int pairs, uint8_t *buf, size_t buflen);

/* Moves a frame's payload into the ring when the ring is ready, the payload is large enough
 * to be worth it (PST_WIRE_RING_MIN bytes) and there is room: the frame in head (prefix and
 * header, head_len bytes, in a buffer of head_cap) is marked (the ring flag, Header.ring_pos)
 * and its new length returned; the payload then no longer follows on the stream. 0: the
 * frame goes as it is, payload and all. */
#define PST_WIRE_RING_MIN 4096u
/* The offer of this end's region for a HELLO or WELCOME (its pid, descriptor, token and size;
 * the token's bytes stay the ring's), and the mapping of the peer's from its offer
 * (pst_ring_attach's returns; NULL: "no region offered", -EINVAL). */
void pst_wire_ring_offer(const pst_ring *ring, Pstrain__RingOffer *out);
int pst_wire_ring_attach(pst_ring *ring, const Pstrain__RingOffer *offer, char *err, size_t errlen);
int pst_wire_ring_frame(pst_ring *ring, uint8_t *head, int head_len, size_t head_cap,
                        const void *payload, size_t len);

/* Checks a decoded header against its prefix: a known type, the payload length matching
 * 4 * count for tensor chunks and 0 otherwise, sane counts. Returns 0 or -EPROTO. */
int pst_wire_validate(const Pstrain__Header *h, uint32_t payload_len, char *err, size_t errlen);
/* value_bytes for sparse chunks (top-k pushes, common/codec.h): the payload is k pairs of 8
 * bytes, 1 <= k <= max(1, count / 2). */
#define PST_WIRE_SPARSE 8u
/* value_bytes for int8 chunks (int8 pushes): a float32 scale, then count signed bytes. */
#define PST_WIRE_INT8 1u
/* value_bytes for a delta pull's sparse chunks (Header.sparse): 0 <= pairs <= count / 8, of 8
 * bytes each, in a chunk of at least 8 values (common/codec.h pst_sparse_delta). */
#define PST_WIRE_SPARSE_SET 9u
/* The same for tensor chunks of value_bytes bytes per value (2 or 4, or PST_WIRE_SPARSE; the
 * count's cap stays that of float32, as the values are decoded in place into count floats). */
int pst_wire_validate_values(const Pstrain__Header *h, uint32_t payload_len, unsigned value_bytes,
                             char *err, size_t errlen);

/* ---- incremental reader ---- */

#define PST_READER_PAUSE 1

typedef struct pst_reader pst_reader;

typedef struct {
  /* A validated header whose frame has a payload: set *dst to h->count floats of space
   * for it. Return 0, or a negative code to reject the frame (the reader fails). */
  int (*on_payload)(pst_reader *r, const Pstrain__Header *h, float **dst);
  /* A whole frame arrived (payload in place). Return 0 to go on, PST_READER_PAUSE to
   * stop consuming until pst_reader_resume(), or a negative code to fail. The header is
   * valid only during the call. */
  int (*on_frame)(pst_reader *r, const Pstrain__Header *h);
} pst_reader_cbs;

typedef enum { PST_RD_PREFIX = 0, PST_RD_HEADER, PST_RD_PAYLOAD } pst_reader_state;

struct pst_reader {
  pst_reader_state state;
  const pst_reader_cbs *cbs;
  void *data;                 /* the owner's */
  uint32_t max_payload;
  unsigned value_bytes;       /* bytes per value of tensor payloads: 4 (0 reads as 4), or 2 */
  int takes_delta;            /* WEIGHTS chunks with Header.delta (int8) may come */
  pst_ring *ring;             /* frames may carry their payload in the peer's region */
  int paused;
  pst_prefix prefix;
  uint8_t prefix_buf[PST_WIRE_PREFIX_LEN];
  uint32_t got;               /* bytes of the current section received */
  uint32_t max_header;        /* header bytes a frame may have */
  size_t arena_size, stage_size;
  uint8_t *header_buf;        /* [max_header] */
  Pstrain__Header *hdr;       /* unpacked into the arena */
  uint8_t *payload;           /* destination of the current payload */
  uint8_t *stage;             /* [PST_WIRE_STAGE] */
  size_t stage_pos, stage_len;
  int direct;                 /* the last buffer handed out was the payload itself */
  int big;                    /* the last payload was read in place (a tensor stream) */
  uint8_t *arena;             /* [PST_WIRE_ARENA] */
  size_t arena_used;
  uint64_t frames;            /* frames read, for logs */
  char err[160];              /* why the reader failed */
  char sample[80];            /* sanitized first bytes of a bad frame */
};

/* Allocates the reader's buffers once. Returns 0 or -ENOMEM. */
int pst_reader_init(pst_reader *r, const pst_reader_cbs *cbs, void *data, uint32_t max_payload);
/* A reader for frames without payload and with small headers (a connection not registered
 * yet): about 10 KiB. */
int pst_reader_init_small(pst_reader *r, const pst_reader_cbs *cbs, void *data);
/* Gives a reader new limits and buffer sizes (a connection that registered), keeping the
 * bytes it has staged. Only between frames (-EBUSY otherwise, e.g. pause the reader in the
 * frame's callback and grow it after pst_reader_feed returns); -ENOMEM frees the reader. */
int pst_reader_grow(pst_reader *r, uint32_t max_payload, uint32_t max_header, size_t arena,
                    size_t stage);
void pst_reader_free(pst_reader *r);
/* The bytes per value of the tensor chunks this reader accepts from now on (the job's encoding,
 * common/codec.h): 2, or 4 for anything else. on_payload's destination still has room for
 * count floats, and the encoded bytes land at its start for the owner to decode in place. */
void pst_reader_set_value_bytes(pst_reader *r, unsigned value_bytes);
/* Whether WEIGHTS chunks marked delta (Header.delta: an int8 chunk, 4 + count bytes) may come
 * besides the value size above (--pull-compress delta). A tensor chunk marked delta on a
 * reader that does not take them, or a PUSH marked delta, is malformed. */
void pst_reader_take_delta(pst_reader *r, int on);
/* Frames flagged PST_WIRE_FLAG_RING may come from now on, their payloads read from ring's
 * peer region (NULL: no more; such a frame is malformed). The ring is the owner's. */
void pst_reader_set_ring(pst_reader *r, pst_ring *ring);
/* Where the next read should land: use as libuv's alloc_cb result. */
void pst_reader_buffer(pst_reader *r, char **base, size_t *len);
/* The rest of the current payload as one buffer, for an owner that reads it some other way
 * (the ps's I/O threads): 1 with base and len set (then feed what arrived, all or part), or
 * 0 when no payload is being read or bytes of it are staged (read as usual then). */
int pst_reader_payload_rest(pst_reader *r, char **base, size_t *len);
/* Consumes n bytes read into the last buffer. Returns 0, PST_READER_PAUSE (the owner
 * should stop reading), or a negative code with r->err set (close the connection). */
int pst_reader_feed(pst_reader *r, size_t n);
/* Continues after a pause with the bytes already staged. Same returns as feed. */
int pst_reader_resume(pst_reader *r);

#endif
