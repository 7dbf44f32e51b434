/* How a data set is split among N workers: the one rule the workers (which shard they train
 * and evaluate) and the ps (which evaluation counts it accepts) both follow. */
#ifndef PSTRAIN_COMMON_SHARD_H
#define PSTRAIN_COMMON_SHARD_H

#include <stdint.h>

/* Contiguous shard `index` of `count` over `total` samples: the shards are disjoint, cover
 * [0, total) and differ in size by at most one (the first total % count get one more). */
static inline void pst_data_shard_range(int total, int index, int count, int *begin, int *end) {
  if (total <= 0 || count <= 0 || index < 0 || index >= count) {
    *begin = *end = 0;
    return;
  }
  /* 64-bit, so total * count-sized intermediates cannot overflow. */
  int64_t base = total / count, extra = total % count;
  int64_t b = index * base + (index < extra ? index : extra);
  *begin = (int)b;
  *end = (int)(b + base + (index < extra ? 1 : 0));
}

/* Steps per epoch: every worker takes the smallest shard's full batches, so sync steps line
 * up; 0 when a shard holds no full batch. */
static inline int pst_steps_per_epoch(int train_total, int workers, int batch) {
  return workers > 0 && batch > 0 ? (train_total / workers) / batch : 0;
}

#endif
