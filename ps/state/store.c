#include "ps/state/store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int pst_store_init(pst_store *s, size_t n, const float *init) {
  memset(s, 0, sizeof *s);
  s->n = n;
  size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
  for (int i = 0; i < 2; i++) {
    s->buf[i] = aligned_alloc(64, bytes);
    if (!s->buf[i]) {
      pst_store_free(s);
      return -ENOMEM;
    }
  }
  /* Only the front buffer is written now. The back buffer's pages are faulted in by the
   * first step, which writes all of it: touching it here, while the caller still holds
   * `init`, would make the ps's peak resident memory 3 x weights instead of 2 x. */
  memcpy(s->buf[0], init, n * sizeof(float));
  return 0;
}

void pst_store_free(pst_store *s) {
  free(s->buf[0]);
  free(s->buf[1]);
  s->buf[0] = s->buf[1] = NULL;
}

pst_store_hold pst_store_take(pst_store *s, int next) {
  pst_store_hold h;
  if (next) {
    h.buf = s->front ^ 1;
    h.version = s->version + 1;
    s->early_refs++;
  } else {
    h.buf = s->front;
    h.version = s->version;
    s->refs[s->front]++;
  }
  return h;
}

void pst_store_release(pst_store *s, const pst_store_hold *h) {
  if (pst_store_hold_published(s, h))
    s->refs[h->buf]--;
  else
    s->early_refs--; /* a streamed reply cut short before its step was published */
}

void pst_store_publish(pst_store *s) {
  s->refs[s->front ^ 1] += s->early_refs;
  s->early_refs = 0;
  s->front ^= 1;
  s->version++;
}


uint64_t pst_store_checksum(const pst_store *s) {
  return pst_fnv1a64(s->buf[s->front], s->n * sizeof(float));
}
