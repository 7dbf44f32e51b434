/* The update tests' fixture (ps/train/update_test.c, ps/train/update_limits_test.c): a store of N
 * floats (not a multiple of the chunk) with SGD at lr 1, W workers' gradients, and offering a
 * worker's chunks in a row. */
#ifndef PSTRAIN_PS_TEST_UPDATE_H
#define PSTRAIN_PS_TEST_UPDATE_H

#include "common/check.h"
#include "ps/train/update.h"

#define N 10007   /* not a multiple of the chunk */
#define CHUNK 1000
#define W 3

static float grads[W][N];

/* w0[i] = (i % 17) x 0.1; SGD, lr 1. */
static inline void setup(pst_store *s, pst_optimizer *o, pst_update *u, pst_mode mode) {
  static float init[N];
  for (int i = 0; i < N; i++) init[i] = (float)(i % 17) * 0.1f;
  pst_opt_config cfg;
  pst_opt_defaults(&cfg);
  cfg.kind = PST_OPT_SGD;
  cfg.lr = 1.0f;
  CHECK(pst_store_init(s, N, init) == 0);
  CHECK(pst_opt_init(o, &cfg, N) == 0);
  CHECK(pst_update_init(u, mode, W, CHUNK, s, o) == 0);
}

static inline void teardown(pst_store *s, pst_optimizer *o, pst_update *u) {
  pst_update_free(u);
  pst_opt_free(o);
  pst_store_free(s);
}

/* Offers chunks [from, to) of worker w's gradient for `version`, expecting `want`. */
static inline int offer_range(pst_update *u, int w, uint64_t version, uint32_t from, uint32_t to,
                              int want, int *published) {
  int ok = 1;
  for (uint32_t c = from; c < to; c++) {
    int pub = 0;
    ok = ok && pst_update_offer(u, w, version, c, pst_update_chunk_flags(u, c),
                                grads[w] + (size_t)c * CHUNK, &pub) == want;
    *published |= pub;
  }
  return ok;
}

#endif
