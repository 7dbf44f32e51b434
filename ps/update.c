#include "ps/update.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char *pst_mode_name(pst_mode m) {
  switch (m) {
    case PST_MODE_SYNC: return "sync";
    case PST_MODE_ASYNC: return "async";
    case PST_MODE_SSP: return "ssp";
  }
  return "?";
}

int pst_mode_parse(const char *s, pst_mode *m) {
  if (!strcmp(s, "sync")) *m = PST_MODE_SYNC;
  else if (!strcmp(s, "async")) *m = PST_MODE_ASYNC;
  else if (!strcmp(s, "ssp")) *m = PST_MODE_SSP;
  else return -EINVAL;
  return 0;
}

int pst_update_init(pst_update *u, pst_mode mode, int workers, uint32_t chunk_floats,
                    pst_store *store, pst_optimizer *opt) {
  memset(u, 0, sizeof *u);
  if (workers < 1 || chunk_floats == 0) return -EINVAL;
  u->mode = mode;
  u->workers = workers;
  u->chunk_floats = chunk_floats;
  u->n_chunks = (uint32_t)((store->n + chunk_floats - 1) / chunk_floats);
  u->store = store;
  u->opt = opt;
  u->owner = -1;
  u->next_worker = calloc(u->n_chunks, sizeof *u->next_worker);
  return u->next_worker ? 0 : -ENOMEM;
}

void pst_update_free(pst_update *u) {
  free(u->next_worker);
  u->next_worker = NULL;
}

uint32_t pst_update_chunk_len(const pst_update *u, uint32_t c) {
  size_t off = (size_t)c * u->chunk_floats;
  size_t left = u->store->n - off;
  return left < u->chunk_floats ? (uint32_t)left : u->chunk_floats;
}

/* dst[i] += src[i]: a plain loop the compiler vectorises (AVX2 with -march=x86-64-v3). */
static void add_into(float *restrict dst, const float *restrict src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

static void finish_step(pst_update *u, int *published) {
  pst_store_publish(u->store);
  u->steps++;
  *published = 1;
}

static int offer_sync(pst_update *u, int w, uint64_t version, uint32_t c, const float *data,
                      int *published) {
  pst_store *s = u->store;
  if (version != s->version) return -ESTALE;
  if (u->next_worker[c] != (uint32_t)w) return PST_OFFER_LATER;
  if (!u->step_open) {
    /* The first chunk of a step claims the back buffer, once no pull reads it. */
    if (pst_store_back_busy(s)) return PST_OFFER_LATER;
    u->step_open = 1;
    pst_opt_begin_step(u->opt);
  }
  size_t off = (size_t)c * u->chunk_floats;
  uint32_t len = pst_update_chunk_len(u, c);
  float *sum = pst_store_back(s) + off;
  if (w == 0)
    memcpy(sum, data, len * sizeof(float));
  else
    add_into(sum, data, len);
  if (++u->next_worker[c] < (uint32_t)u->workers) return PST_OFFER_TAKEN;
  /* Chunk c has every worker's share: apply the optimizer to it in place. */
  pst_opt_apply(u->opt, pst_store_front(s), pst_store_back(s), sum, 1.0f, off, len);
  if (++u->chunks_done == u->n_chunks) {
    memset(u->next_worker, 0, u->n_chunks * sizeof *u->next_worker);
    u->chunks_done = 0;
    u->step_open = 0;
    finish_step(u, published);
  }
  return PST_OFFER_TAKEN;
}

static int offer_async(pst_update *u, int w, uint64_t version, uint32_t c, const float *data,
                       int *published) {
  pst_store *s = u->store;
  if (u->owner != -1 && u->owner != w) return PST_OFFER_LATER;
  if (u->owner == -1) {
    if (c != 0) return -EPROTO;
    if (pst_store_back_busy(s)) return PST_OFFER_LATER;
    u->owner = w;
    u->owner_chunks = 0;
    uint64_t st = pst_update_staleness(u, version);
    u->staleness_sum += st;
    if (st > u->staleness_max) u->staleness_max = st;
    pst_opt_begin_step(u->opt);
  }
  if (c != u->owner_chunks) return -EPROTO;
  size_t off = (size_t)c * u->chunk_floats;
  pst_opt_apply(u->opt, pst_store_front(s), pst_store_back(s), data, (float)u->workers, off,
                pst_update_chunk_len(u, c));
  if (++u->owner_chunks == u->n_chunks) {
    u->owner = -1;
    finish_step(u, published);
  }
  return PST_OFFER_TAKEN;
}

int pst_update_offer(pst_update *u, int w, uint64_t version, uint32_t c, const float *data,
                     int *published) {
  *published = 0;
  if (c >= u->n_chunks || w < 0 || w >= u->workers) return -EPROTO;
  int rc = u->mode == PST_MODE_SYNC ? offer_sync(u, w, version, c, data, published)
                                    : offer_async(u, w, version, c, data, published);
  if (rc == PST_OFFER_TAKEN && c + 1 == u->n_chunks) u->pushes++;
  return rc;
}
