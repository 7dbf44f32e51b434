/* How the flat parameter vector is spread over K ps shards.
 *
 * Shard i of K holds the floats [lo, lo + count) of the vector: K contiguous ranges of
 * (nearly) equal size, so every shard stores, sums, optimizes and sends the same number of
 * bytes. A range may cut a tensor in two (a large dense kernel is split across shards) and
 * may hold several small tensors whole (biases are packed with their neighbours); the
 * optimizer is element-wise, so where a cut falls never changes a result. Cuts are rounded
 * down to PST_PARTITION_ALIGN floats, so each shard's slice starts on a 64-byte boundary
 * of the vector and the vectorised loops see the same alignment on every shard.
 *
 * The assignment is a pure function of the vector's length and K: the ps shards and every
 * worker compute it alone and check that they agree (the WELCOME carries the shard's range). */
#ifndef PSTRAIN_KERNELS_PARTITION_H
#define PSTRAIN_KERNELS_PARTITION_H

#include <stddef.h>

#include "model/model.h"

#define PST_PARTITION_ALIGN 16 /* floats */
#define PST_MAX_SHARDS 64

/* Shard i's range of an n-float vector split K ways: 0, or -EINVAL when i or K is out of
 * range or the vector is too short to give every shard at least PST_PARTITION_ALIGN floats. */
int pst_partition_range(size_t n, int k, int i, size_t *lo, size_t *count);

/* Parses "I/K" (0 <= I < K <= PST_MAX_SHARDS): 0, or -EINVAL. */
int pst_partition_parse(const char *text, int *i, int *k);

/* One line naming the tensors (whole or in part) of m inside [lo, lo + count), e.g.
 * "dense/kernel[0:100352) of 200704, dense/bias, dense_1/kernel[0:5000) of 16384". */
void pst_partition_describe(const pst_model *m, size_t lo, size_t count, char *buf, size_t len);

#endif
