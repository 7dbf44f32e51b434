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

/* The back buffer now holds version + 1: make it the front. Replies that were streaming
 * it (early_refs) now hold it like any other reply, so no later step writes it under them. */
void pst_store_publish(pst_store *s);
/* FNV-1a 64 over the front buffer's bytes (reproducibility checks). */
uint64_t pst_store_checksum(const pst_store *s);
/* FNV-1a 64 over any bytes. */
uint64_t pst_fnv1a64(const void *data, size_t len);

#endif
