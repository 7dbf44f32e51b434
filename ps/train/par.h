/* The ps's helper threads: a fork-join pool that runs one element-wise loop (summing a share
 * into a chunk, the optimizer over a chunk) on several cores, each thread over its own
 * contiguous range of the chunk.
 *
 * Only the loop thread (the libuv loop: every message, every rule of sync order and pull
 * versions) calls ps_par_for, and it returns once every range is done, so nothing outside
 * the loop's own call ever sees a half-done chunk and the ps needs no lock on its state. The
 * ranges are disjoint and each element is computed by the same float operations whatever
 * range it falls in, so a run with any number of threads ends with the same bits. */
#ifndef PSTRAIN_PS_PAR_H
#define PSTRAIN_PS_PAR_H

#include <stddef.h>

/* Ranges below this many elements run on the calling thread alone: waking a helper costs
 * microseconds, about what 64K floats of an optimizer pass take. */
#define PS_PAR_MIN (64u * 1024u)

typedef struct ps_par ps_par;
typedef void (*ps_par_fn)(void *ctx, size_t begin, size_t end);

/* A pool for `threads` threads in all: the caller and threads - 1 helpers (none for 1).
 * Helpers flush denormals (common/fpenv.h) and block every signal (the loop thread takes
 * them). Returns 0 or a negative code with *out NULL. */
int ps_par_create(int threads, ps_par **out);
/* Stops and joins the helpers. NULL is allowed. */
void ps_par_free(ps_par *p);
/* Threads in all (1 for NULL). */
int ps_par_threads(const ps_par *p);
/* Runs fn over [0, n) cut into contiguous pieces (boundaries on multiples of 16 elements, a
 * 64-byte line of floats) that the caller and the helpers claim one at a time; returns when
 * all are done. A loop takes one thread per PS_PAR_MIN elements, at most every thread: only
 * the helpers it takes are woken, so an idle helper costs nothing, and a small loop no more
 * than on one thread. With p NULL, one thread, or n < 2 x PS_PAR_MIN: fn(ctx, 0, n) on the
 * caller. */
void ps_par_for(ps_par *p, size_t n, ps_par_fn fn, void *ctx);

#endif
