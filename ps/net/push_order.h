/* The order of a push's chunks on one connection (issue 41).
 *
 * A push sends every chunk of the ps's part once. It covers the chunks from the top down in
 * runs, each run ascending: the first run is [a1, n), the next [a2, a1), and so on down to
 * chunk 0. An ascending push (chunk 0 first) is one run; a descending push (a worker that
 * pushes each layer as its backward pass produces it, last layer first) is n runs of one
 * chunk; a worker that sends each layer's chunks ascending, layers last first, makes one
 * run per layer, so that the first layer's chunks arrive in the order the reply sends them
 * and the ps can answer chunk 0 while chunk 1 is still coming. The runs partition the chunks,
 * so a push of n frames that passes the check has brought every chunk exactly once.
 *
 * The state is the connection's (ps/net/conn.h); this module is the only one that moves it. */
#ifndef PSTRAIN_PS_NET_PUSH_ORDER_H
#define PSTRAIN_PS_NET_PUSH_ORDER_H

#include <stddef.h>
#include <stdint.h>

#include "proto/pstrain.pb-c.h"
#include "ps/train/update.h"

typedef struct {
  uint32_t hi;   /* the lowest chunk of the runs so far: a new run starts below it */
  uint32_t end;  /* the current run ends before this chunk */
  uint32_t next; /* the current run's next chunk (== end: the run is complete) */
} ps_push_order;

/* The push's chunk count is n; its first frame resets the state. */
void ps_push_order_begin(ps_push_order *o, uint32_t n);
/* Whether chunk c may be the push's next frame, and if so takes it (the state moves on).
 * Returns 0, or -1 with the chunk that was expected in *want (UINT32_MAX: any chunk below
 * o->hi, to begin a run). */
int ps_push_order_take(ps_push_order *o, uint32_t c, uint32_t *want);
/* The chunk of a sorted table off[0..n] (chunk c is [off[c], off[c + 1])) that begins at
 * `offset`, or -1 when no chunk does. */
int64_t ps_push_order_chunk_at(const size_t *off, uint32_t n, uint64_t offset);

/* The whole check of a PUSH frame's header h, the push's frame `pos` (0: its first, which
 * begins the order anew; push_version: the version its first frame named): the chunk it
 * carries in *chunk, and 0; or -1 with the reason in why, the state unmoved. */
int ps_push_order_check(ps_push_order *o, const pst_update *u, uint32_t pos,
                        uint64_t push_version, const Pstrain__Header *h, uint32_t *chunk,
                        char *why, size_t len);

#endif
