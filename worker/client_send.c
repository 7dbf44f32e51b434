/* The connection to the ps, sending: control frames, and the push of a gradient in chunks
 * (their layout, the job's encodings, the frames and their writes), and freeing what the
 * client holds for them. Connecting, reading and closing are in client.c, which calls
 * nothing here. */
#include "worker/client.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/timeline.h"
#include "proto/send.h"

/* ---- sending ---- */

int wk_client_send(wk_client *c, const Pstrain__Header *h) {
  if (c->state != WK_CONN_OPEN) return -ENOTCONN;
  c->last_tx = pst_now();
  Pstrain__Header pull;
  if (h->type == PSTRAIN__MSG_TYPE__PULL && c->ring_on) {
    /* The reply's payloads may come through the ps's region: this end has it mapped. */
    pull = *h;
    pull.ring_mapped = 1;
    h = &pull;
  }
  int n = pst_send_header(&c->io, h);
  return n < 0 ? n : 0;
}

int wk_client_send_now(wk_client *c, const Pstrain__Header *h) {
  if (c->state != WK_CONN_OPEN) return -ENOTCONN;
  uint8_t buf[1024];
  if (protobuf_c_message_get_packed_size(&h->base) + PST_WIRE_PREFIX_LEN > sizeof buf)
    return -EMSGSIZE;
  int n = pst_wire_encode(h, 0, buf, sizeof buf);
  if (n < 0) return n;
  uv_buf_t b = uv_buf_init((char *)buf, (unsigned)n);
  int rc = pst_tls_stream_try_write(&c->io, &b, 1);
  return rc == n ? 0 : rc < 0 ? rc : -EAGAIN;
}

/* What each value of [lo, lo + n) is to top-k by tensor (pst_topk_encode_tensors): a
 * layer's weights are sparse, but batch norm's gamma, which is a vector as every bias is;
 * batch norm's moving statistics are state. Without a model, all sparse. */
static void tensor_kinds(const pst_model *m, size_t lo, size_t n, uint8_t *kind) {
  memset(kind, PST_TOPK_SPARSE, n);
  if (!m || getenv("PSTRAIN_TOPK_BY_CHUNK")) return;
  for (int l = 0; l < m->n_layers; l++) {
    const pst_layer *L = &m->layers[l];
    size_t off[3] = {L->w_offset, L->b_offset, L->s_offset};
    size_t cnt[3] = {L->w_count, L->b_count, L->s_count};
    uint8_t k[3] = {L->kind == PST_LAYER_BATCHNORM ? PST_TOPK_DENSE : PST_TOPK_SPARSE,
                    PST_TOPK_DENSE, PST_TOPK_STATE};
    for (int r = 0; r < 3; r++) {
      size_t a = off[r] > lo ? off[r] : lo, b = off[r] + cnt[r] < lo + n ? off[r] + cnt[r] : lo + n;
      if (cnt[r] && a < b) memset(kind + (a - lo), k[r], b - a);
    }
  }
}

int wk_client_prepare_push(wk_client *c, const pst_model *m, size_t lo, size_t n,
                           uint32_t chunk_floats, int layer_chunks) {
  if (chunk_floats == 0 || n == 0 || (layer_chunks && !m)) return -EINVAL;
  size_t count = layer_chunks ? pst_model_chunks(m, lo, n, chunk_floats, NULL)
                              : (n + chunk_floats - 1) / chunk_floats;
  if (count == 0 || count > UINT32_MAX - 1) return -EINVAL;
  free(c->wreq);
  free(c->whead);
  free(c->starts);
  free(c->push_kind);
  free(c->tl_queued);
  free(c->tl_count);
  c->tl_queued = NULL;
  c->tl_count = NULL;
  if (pst_tl_opened()) {
    c->tl_queued = calloc(count, sizeof *c->tl_queued);
    c->tl_count = calloc(count, sizeof *c->tl_count);
    if (!c->tl_queued || !c->tl_count) return -ENOMEM;
  }
  c->push_kind = malloc(n);
  if (!c->push_kind) return -ENOMEM;
  tensor_kinds(m, lo, n, c->push_kind);
  c->n_floats = n;
  c->n_chunks = (uint32_t)count;
  c->wreq = calloc(count, sizeof *c->wreq);
  c->whead = malloc(count * PST_WIRE_CHUNK_HEAD);
  c->starts = malloc((count + 1) * sizeof *c->starts);
  if (!c->wreq || !c->whead || !c->starts) return -ENOMEM;
  if (layer_chunks) {
    pst_model_chunks(m, lo, n, chunk_floats, c->starts);
  } else {
    for (size_t i = 0; i < count; i++) c->starts[i] = i * chunk_floats;
    c->starts[count] = n;
  }
  /* Float32 until the WELCOME's encodings are set (wk_client_set_encodings). */
  return wk_client_set_encodings(c, PST_ENC_NONE, PST_ENC_NONE, 0, 0, 0);
}

/* The encodings' buffers: the push's encoded bytes, its error-feedback residual, top-k's
 * selection scratch and velocity, and where a delta pull's chunks land. */
static void free_encodings(wk_client *c) {
  free(c->push_enc_buf);
  free(c->push_resid);
  free(c->topk_scratch);
  free(c->push_mom);
  free(c->pull_delta_in);
  c->push_enc_buf = NULL;
  c->push_resid = NULL;
  c->topk_scratch = NULL;
  c->push_mom = NULL;
  c->pull_delta_in = NULL;
}

int wk_client_set_encodings(wk_client *c, pst_enc push, pst_enc pull, double topk_fraction,
                            uint64_t topk_warmup, float topk_momentum) {
  if ((unsigned)push >= PST_ENC_COUNT || push == PST_ENC_DELTA ||
      (pull != PST_ENC_NONE && pull != PST_ENC_FP16 && pull != PST_ENC_BF16 &&
       pull != PST_ENC_DELTA) ||
      (push == PST_ENC_TOPK && !(topk_fraction > 0 && topk_fraction <= PST_TOPK_MAX_FRACTION)) ||
      !(topk_momentum >= 0 && topk_momentum < 1))
    return -EINVAL;
  free_encodings(c);
  c->push_enc = push;
  c->pull_enc = pull;
  c->topk_fraction = topk_fraction;
  c->topk_warmup = topk_warmup;
  c->topk_momentum = push == PST_ENC_TOPK ? topk_momentum : 0;
  size_t n = c->n_floats ? c->n_floats : 1;
  /* Delta pulls: float32 chunks, and int8 ones marked delta, which land here first. */
  pst_reader_set_value_bytes(&c->rd, pull == PST_ENC_DELTA ? 4 : pst_enc_bytes(pull));
  pst_reader_take_delta(&c->rd, pull == PST_ENC_DELTA);
  if (pull == PST_ENC_DELTA && !(c->pull_delta_in = malloc(n + 4))) return -ENOMEM;
  if (push == PST_ENC_NONE) return 0;
  c->push_enc_buf = malloc(push == PST_ENC_TOPK   ? n * 4 + 8 * (size_t)c->n_chunks
                           : push == PST_ENC_INT8 ? n + 4 * (size_t)c->n_chunks
                                                  : n * 2);
  c->push_resid = calloc(n, sizeof *c->push_resid);
  if (push == PST_ENC_TOPK) c->topk_scratch = malloc(n * sizeof *c->topk_scratch);
  if (c->topk_momentum > 0) c->push_mom = calloc(n, sizeof *c->push_mom);
  return c->push_enc_buf && c->push_resid && (push != PST_ENC_TOPK || c->topk_scratch) &&
                 (c->topk_momentum == 0 || c->push_mom)
             ? 0 : -ENOMEM;
}

/* Whether the push's writes go highest chunk first (to a ps without runs), or ascending. */
static int goes_down(const wk_client *c) {
  return c->push_desc && !c->push_runs;
}

/* The timeline: k chunks from chunk i in the push's direction went from queued (t0) to
 * handed to the kernel (t1), one span each on the wire. */
static void tl_chunks(wk_client *c, uint32_t i, uint32_t k, double t0, double t1) {
  for (uint32_t j = 0; j < k; j++) {
    uint32_t x = goes_down(c) ? i - j : i + j;
    pst_tl_async("push", "push chunk", ((uint64_t)c->tl_shard << 32) | x, t0, t1,
                 PST_TL_CHUNK(c->tl_step, x, c->starts[x], c->starts[x + 1] - c->starts[x],
                              c->push_version));
  }
}

static void on_push_write(uv_write_t *req, int status) {
  wk_client *c = req->data;
  (void)status;
  uint32_t first = (uint32_t)(req - c->wreq);
  if (c->tl_count && c->tl_count[first]) {
    tl_chunks(c, first, c->tl_count[first], c->tl_queued[first], pst_now());
    c->tl_count[first] = 0;
  }
  if (--c->writes_left == 0 && c->push_queued == c->n_chunks && c->state == WK_CONN_OPEN) {
    if (c->reply_early) {
      /* Its reply came first: an exposed wait of none, measured (wk_client.h). */
      c->reply_early = 0;
      c->push_timed = 1;
      c->push_done_at = 0;
      c->reply_at = c->pushed_at = pst_now();
      c->wait_us = 1; /* measured: 0 means none */
      pst_quant_observe(&c->waits, 0);
    }
    if (!c->push_timed) c->push_done_at = pst_now();
    c->push_timed = 1;
    c->cbs->on_push_sent(c);
  }
}

/* Chunks one push write holds at most. */
#define PUSH_BATCH 32

/* Encodes the frame of chunk i, the push's next, into its header slot; bufs gets the frame's
 * two buffers. Returns 1 when it is the push's last frame, or a negative code. */
static int chunk_frame(wk_client *c, uint32_t i, uv_buf_t bufs[2]) {
  size_t off = c->starts[i];
  uint32_t len = (uint32_t)(c->starts[i + 1] - off);
  uint8_t *head = c->whead + (size_t)i * PST_WIRE_CHUNK_HEAD;
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  h.type = PSTRAIN__MSG_TYPE__PUSH;
  h.version = c->push_version;
  h.offset = off;
  h.count = len;
  /* The last frame of the push says so, whichever chunk it carries; the first carries the
   * exposed wait of the step before. */
  h.last = c->push_queued + 1 == c->n_chunks;
  if (c->push_queued == 0) {
    h.wait_us = c->wait_us;
    c->wait_us = 0;
    c->push_done_at = 0;
  }
  /* Encoded now, with what earlier pushes of these values lost to rounding, or did not
   * send, added (error feedback). */
  uint8_t *enc = NULL;
  size_t bytes = (size_t)len * 4u;
  if (c->push_enc == PST_ENC_TOPK) {
    enc = c->push_enc_buf + 4 * off + 8 * (size_t)i;
    double f = pst_topk_fraction_at(c->topk_fraction, c->topk_warmup, c->push_version);
    bytes = pst_topk_encode_tensors(c->push_grad + off, c->push_mom ? c->push_mom + off : NULL,
                                    c->push_resid + off, c->push_kind + off, len, f,
                                    c->topk_momentum, c->topk_scratch, enc);
  } else if (c->push_enc == PST_ENC_INT8) {
    enc = c->push_enc_buf + off + 4 * (size_t)i;
    bytes = pst_int8_encode(c->push_grad + off, c->push_resid + off, len, enc);
  } else if (c->push_enc != PST_ENC_NONE) {
    enc = c->push_enc_buf + 2 * off;
    pst_enc_encode(c->push_enc, c->push_grad + off, c->push_resid + off, enc, len);
    bytes = (size_t)len * 2u;
  }
  int hn = pst_wire_encode(&h, (uint32_t)bytes, head, PST_WIRE_CHUNK_HEAD);
  if (hn < 0) return hn;
  bufs[0] = uv_buf_init((char *)head, (unsigned)hn);
  bufs[1] = uv_buf_init(enc ? (char *)enc : (char *)(c->push_grad + off), (unsigned)bytes);
  c->push_queued++;
  return h.last;
}

/* Queues the push's next `k` chunks, from chunk i on in the push's direction, as one write:
 * one system call for them all. */
static int queue_chunks(wk_client *c, uint32_t i, uint32_t k) {
  uv_buf_t bufs[2 * PUSH_BATCH];
  int last = 0;
  double tl_at = c->tl_count && pst_tl_on() ? pst_now() : 0;
  for (uint32_t j = 0; j < k; j++) {
    last = chunk_frame(c, goes_down(c) ? i - j : i + j, bufs + 2 * j);
    if (last < 0) return last;
    /* A ps on this host reads the payload from this end's region (proto/ring.h): only the
     * frame's head goes on the stream. */
    if (c->ring_on) pst_send_ring_chunk(&c->ring, bufs + 2 * j);
  }
  c->wreq[i].data = c;
  c->writes_left++;
  int rc = pst_tls_stream_write(&c->io, &c->wreq[i], bufs, pst_send_compact(bufs, 2 * k),
                                on_push_write);
  if (rc < 0) {
    c->writes_left--;
    return rc;
  }
  /* The push's last bytes went into the kernel at once (plain TCP with room in the socket's
   * buffer): that is when they left, not the write callback's turn of the loop. */
  int written = !pst_tls_stream_is_tls(&c->io) &&
                uv_stream_get_write_queue_size((uv_stream_t *)&c->io.tcp) == 0;
  if (last && written) {
    c->push_done_at = pst_now();
    c->push_timed = 1;
  }
  if (c->tl_count) {
    /* On the timeline: written at once, or when the write's callback says so. */
    c->tl_count[i] = tl_at > 0 && !written ? k : 0;
    c->tl_queued[i] = tl_at;
    if (tl_at > 0 && written) tl_chunks(c, i, k, tl_at, pst_now());
  }
  return rc;
}

static int push_begin(wk_client *c, uint64_t version, const float *grad, int desc) {
  if (c->state != WK_CONN_OPEN) return -ENOTCONN;
  c->push_version = version;
  c->push_grad = grad;
  c->push_desc = desc;
  c->push_queued = 0;
  c->run_hi = c->run_next = c->run_end = c->run_limit = c->n_chunks;
  c->writes_left = 0;
  c->push_timed = 0;
  c->reply_early = 0;
  c->tl_step = pst_tl_current_step();
  return 0;
}

int wk_client_push_begin(wk_client *c, uint64_t version, const float *grad) {
  return push_begin(c, version, grad, 1);
}

/* Queues the chunks final now (wholly at or above float `from`), in the push's order; with
 * `head`, in runs, no further than chunk 0 of the last run. Returns 1 when it stopped there. */
static int push_some(wk_client *c, size_t from, int head) {
  if (c->state != WK_CONN_OPEN) return -ENOTCONN;
  while (c->push_queued < c->n_chunks) {
    uint32_t i, k = 0;
    if (goes_down(c)) {
      /* The chunks not yet queued that are final, highest first, up to a batch. */
      i = c->n_chunks - 1 - c->push_queued;
      while (k < PUSH_BATCH && c->push_queued + k < c->n_chunks && c->starts[i - k] >= from) k++;
      if (k == 0) break;
    } else {
      if (c->run_next == c->run_end) {
        /* The run before is queued: the next is every chunk final now below it. An
         * ascending push (from 0) is one run. */
        uint32_t lo = c->run_hi;
        while (lo > 0 && c->starts[lo - 1] >= from) lo--;
        if (lo == c->run_hi) break;
        c->run_end = c->run_limit = c->run_hi;
        c->run_next = c->run_hi = lo;
      } else if (from <= c->starts[c->run_hi]) {
        c->run_limit = c->run_end; /* a rising run (push_rising) is final whole now */
      }
      i = c->run_next;
      if (i >= c->run_limit) break; /* a rising run's next chunk is not made yet */
      k = c->run_limit - i < PUSH_BATCH ? c->run_limit - i : PUSH_BATCH;
      if (head && c->run_hi == 0 && c->run_end > 1) {
        if (i > 0) return 1;
        k = 1;
      }
      c->run_next += k;
    }
    c->last_tx = pst_now();
    int rc = queue_chunks(c, i, k);
    if (rc < 0) return rc;
  }
  return 0;
}

int wk_client_push_upto(wk_client *c, size_t from) {
  int rc = push_some(c, from, 0);
  return rc < 0 ? rc : 0;
}

int wk_client_push_rising(wk_client *c, size_t lo, size_t hi) {
  if (c->state != WK_CONN_OPEN) return -ENOTCONN;
  if (goes_down(c) || !c->push_desc || hi <= lo) return 0;
  if (c->run_next == c->run_end) {
    /* The runs above are queued: this layer's run begins, at its first chunk, which must be
     * its own (a chunk that also holds floats below lo is not final before they are: the
     * layer then goes as a whole run once it is, as without pieces). */
    uint32_t first = c->run_hi;
    while (first > 0 && c->starts[first - 1] >= lo) first--;
    if (first == c->run_hi || c->starts[first] != lo) return 0;
    c->run_end = c->run_hi;
    c->run_next = c->run_hi = c->run_limit = first;
  } else if (c->starts[c->run_hi] != lo) {
    return 0; /* the run under way is another's (a whole one still being queued) */
  }
  /* Chunks wholly below hi are final. */
  uint32_t lim = c->run_limit;
  while (lim < c->run_end && c->starts[lim + 1] <= hi) lim++;
  c->run_limit = lim;
  int rc = push_some(c, SIZE_MAX, 0); /* no new run: only this one's final chunks */
  return rc < 0 ? rc : 0;
}

int wk_client_head_out(const wk_client *c) {
  return c->state == WK_CONN_OPEN && c->push_runs && !c->push_timed && c->push_queued > 0 &&
         c->run_hi == 0 && c->run_next > 0;
}

int wk_client_push_head(wk_client *c) {
  if (!c->push_runs) return wk_client_push_upto(c, 0);
  return push_some(c, 0, 1);
}

int wk_client_push(wk_client *c, uint64_t version, const float *grad) {
  int rc = push_begin(c, version, grad, 0);
  return rc < 0 ? rc : wk_client_push_upto(c, 0);
}

void wk_client_free(wk_client *c) {
  pst_reader_free(&c->rd);
  pst_ring_free(&c->ring);
  c->ring_on = 0;
  free(c->wreq);
  free(c->whead);
  free(c->starts);
  free(c->push_kind);
  free(c->tl_queued);
  free(c->tl_count);
  c->tl_queued = NULL;
  c->tl_count = NULL;
  free_encodings(c);
  c->wreq = NULL;
  c->whead = NULL;
  c->starts = NULL;
  c->push_kind = NULL;
}
