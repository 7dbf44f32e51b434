/* The order rules of a push's chunks (push_order.h). */
#include "ps/net/push_order.h"

#include <inttypes.h>
#include <stdio.h>

void ps_push_order_begin(ps_push_order *o, uint32_t n) {
  o->hi = o->end = o->next = n;
}

int ps_push_order_take(ps_push_order *o, uint32_t c, uint32_t *want) {
  if (o->next < o->end) {
    /* In the middle of a run: only its next chunk. */
    if (c != o->next) {
      *want = o->next;
      return -1;
    }
  } else {
    /* A run is complete: the next one begins anywhere below the runs so far and goes up
     * to the lowest of them. */
    if (c >= o->hi) {
      *want = UINT32_MAX;
      return -1;
    }
    o->end = o->hi;
    o->hi = c;
  }
  o->next = c + 1;
  return 0;
}

int64_t ps_push_order_chunk_at(const size_t *off, uint32_t n, uint64_t offset) {
  uint32_t lo = 0, hi = n;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (off[mid] < offset)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < n && off[lo] == offset ? (int64_t)lo : -1;
}

int ps_push_order_check(ps_push_order *o, const pst_update *u, uint32_t pos,
                        uint64_t push_version, const Pstrain__Header *h, uint32_t *chunk,
                        char *why, size_t len) {
  uint32_t n = u->n_chunks, want = 0;
  int first = pos == 0;
  if (first) ps_push_order_begin(o, n);
  int64_t at = ps_push_order_chunk_at(u->chunk_off, n, h->offset);
  *chunk = at < 0 ? 0 : (uint32_t)at;
  if (at < 0 || h->count != pst_update_chunk_len(u, *chunk)) {
    snprintf(why, len, "gradient chunk at offset %" PRIu64 " of %" PRIu64 " floats is no chunk of %u",
             h->offset, h->count, n);
    return -1;
  }
  if ((h->last != 0) != (pos + 1 == n) || (!first && h->version != push_version)) {
    snprintf(why, len, "gradient chunk %u of %u: frame %u of the push on version %" PRIu64
             " says last %d, version %" PRIu64, *chunk, n, pos, push_version, (int)h->last,
             h->version);
    return -1;
  }
  if (ps_push_order_take(o, *chunk, &want) < 0) {
    if (want == UINT32_MAX)
      snprintf(why, len, "gradient chunk %u of %u out of order: a run of chunks must begin below %u",
               *chunk, n, o->hi);
    else
      snprintf(why, len, "gradient chunk %u of %u out of order: expected chunk %u", *chunk, n,
               want);
    return -1;
  }
  return 0;
}
