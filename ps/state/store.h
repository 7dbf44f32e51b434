/* The canonical weights, double-buffered by version.
 *
 * The front buffer holds the current version and is what pulls are answered from, straight
 * from memory (no copy). A step writes the next version into the back buffer, which holds
 * the previous version, and then publishes it by swapping. The back buffer may be written
 * only while no pull is still being sent from it (refs == 0): that is how a pull reply never
 * mixes two versions. Memory: 2 x weights, allocated once at start; the back buffer is
 * faulted in by the first step (every step writes all of it before publishing). */
#ifndef PSTRAIN_PS_STORE_H
#define PSTRAIN_PS_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "common/fnv.h"

typedef struct {
  size_t n;          /* floats per buffer */
  float *buf[2];     /* [n] each */
  int front;         /* index of the buffer holding `version` */
  uint64_t version;  /* number of steps applied */
  int refs[2];       /* pull replies still being written from each buffer */
  int early_refs;    /* replies streaming the back buffer's final chunks before it is
                      * published (sync); publishing makes them refs on it */
} pst_store;

/* Allocates both buffers and copies `init` (n floats) into the front one; the back one's
 * contents are undefined until a step writes it. */
int pst_store_init(pst_store *s, size_t n, const float *init);
void pst_store_free(pst_store *s);

static inline float *pst_store_front(pst_store *s) { return s->buf[s->front]; }
static inline float *pst_store_back(pst_store *s) { return s->buf[s->front ^ 1]; }
static inline int pst_store_back_busy(const pst_store *s) { return s->refs[s->front ^ 1] > 0; }

/* A pull reply's hold on the buffer it is sent from: no step writes that buffer until the
 * hold is released, so every byte of the reply belongs to `version`. The store is the only
 * owner of the counts (refs, early_refs); replies take and give back holds. */
typedef struct {
  int buf;           /* the buffer the reply is sent from */
  uint64_t version;  /* the version the reply carries */
} pst_store_hold;

/* A hold for a reply of the current version (the front buffer), or with `next` of the
 * version being built (the back buffer, whose chunks a sync reply streams as they become
 * final). A hold on the version being built does not stop the step it waits for from
 * writing its chunks (early_refs); publishing makes it a hold like any other. */
pst_store_hold pst_store_take(pst_store *s, int next);
/* Whether the version h carries has been published (else its reply is still streaming the
 * step being built). */
static inline int pst_store_hold_published(const pst_store *s, const pst_store_hold *h) {
  return h->version <= s->version;
}
/* The reply ended (or was cut short): its buffer may be written again once no other reply
 * holds it. */
void pst_store_release(pst_store *s, const pst_store_hold *h);

/* The back buffer now holds version + 1: make it the front. Replies that were streaming
 * it (early_refs) now hold it like any other reply, so no later step writes it under them. */
void pst_store_publish(pst_store *s);
/* FNV-1a 64 over the front buffer's bytes (reproducibility checks). */
uint64_t pst_store_checksum(const pst_store *s);

#endif
