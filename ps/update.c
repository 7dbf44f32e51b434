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
  /* Every worker connection holds one chunk-sized receive buffer: cap the chunk so that the
   * N of them stay within PST_RECV_BUDGET, whatever N is (the ps's memory bound). */
  uint32_t cap = PST_RECV_BUDGET / sizeof(float) / (uint32_t)workers;
  cap = cap < PST_CHUNK_MIN_FLOATS ? PST_CHUNK_MIN_FLOATS : cap / 1024 * 1024;
  if (chunk_floats > cap) chunk_floats = cap;
  u->mode = mode;
  u->workers = workers;
  u->chunk_floats = chunk_floats;
  u->n_chunks = (uint32_t)((store->n + chunk_floats - 1) / chunk_floats);
  u->store = store;
  u->opt = opt;
  u->owner = -1;
  u->needed = workers;
  u->next_worker = calloc(u->n_chunks, sizeof *u->next_worker);
  u->slot_of = malloc((size_t)workers * sizeof *u->slot_of);
  if (!u->next_worker || !u->slot_of) return -ENOMEM;
  for (int i = 0; i < workers; i++) u->slot_of[i] = -1;
  return 0;
}

int pst_update_set_backup(pst_update *u, int backup) {
  if (backup < 0 || backup >= u->workers || (backup > 0 && u->mode != PST_MODE_SYNC))
    return -EINVAL;
  u->backup = backup;
  u->needed = u->workers - backup;
  return 0;
}

void pst_update_free(pst_update *u) {
  free(u->next_worker);
  free(u->slot_of);
  u->next_worker = NULL;
  u->slot_of = NULL;
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

/* The last share of a chunk is summed in and the optimizer applied block by block, so that
 * each block of the sum is read back from L1 instead of memory: one pass over the chunk. */
#define FUSE_BLOCK 4096 /* floats (16 KiB) */

static void add_and_apply(pst_update *u, float *sum, const float *data, size_t off, uint32_t len,
                          float scale) {
  pst_store *s = u->store;
  for (uint32_t b = 0; b < len; b += FUSE_BLOCK) {
    uint32_t m = len - b < FUSE_BLOCK ? len - b : FUSE_BLOCK;
    add_into(sum + b, data + b, m);
    pst_opt_apply(u->opt, pst_store_front(s), pst_store_back(s), sum + b, scale, off + b, m);
  }
}

/* The first chunk of a step claims the back buffer, once no pull reads it. */
static int open_step(pst_update *u) {
  if (u->step_open) return 1;
  if (pst_store_back_busy(u->store)) return 0;
  u->step_open = 1;
  pst_opt_begin_step(u->opt);
  return 1;
}

float *pst_update_direct(pst_update *u, int w, uint64_t version, uint32_t c) {
  pst_store *s = u->store;
  if (u->mode != PST_MODE_SYNC || u->workers < 2 || u->backup != 0 || w != 0 || c >= u->n_chunks ||
      version != s->version || u->next_worker[c] != 0 || !open_step(u))
    return NULL;
  return pst_store_back(s) + (size_t)c * u->chunk_floats;
}

static void finish_step(pst_update *u, int *published) {
  pst_store_publish(u->store);
  u->steps++;
  *published = 1;
}

static void close_sync_step(pst_update *u, int *published) {
  memset(u->next_worker, 0, u->n_chunks * sizeof *u->next_worker);
  for (int i = 0; i < u->workers; i++) u->slot_of[i] = -1;
  u->slots_taken = 0;
  u->chunks_done = 0;
  u->ready = 0;
  u->step_open = 0;
  finish_step(u, published);
}

static int offer_sync(pst_update *u, int w, uint64_t version, uint32_t c, const float *data,
                      int *published) {
  pst_store *s = u->store;
  int needed = u->needed;
  if (version != s->version) {
    if (u->backup > 0 && version < s->version && c == 0) {
      u->dropped++;
      return PST_OFFER_DROPPED;
    }
    return -ESTALE;
  }
  int slot = u->backup == 0 ? w : u->slot_of[w];
  if (slot < 0) {
    /* A backup-worker step: the first N-K pushers get the slots, the rest are dropped. */
    if (c != 0) return -EPROTO;
    if (u->slots_taken >= needed) { /* also after the quorum shrank (set_active) */
      u->dropped++;
      return PST_OFFER_DROPPED;
    }
    slot = u->slot_of[w] = u->slots_taken++;
  }
  if (slot >= needed) {
    /* The quorum shrank under this push (workers finished): its remaining chunks go. */
    u->dropped++;
    return PST_OFFER_DROPPED;
  }
  if (u->next_worker[c] != (uint32_t)slot) return PST_OFFER_LATER;
  if (!open_step(u)) return PST_OFFER_LATER;
  size_t off = (size_t)c * u->chunk_floats;
  uint32_t len = pst_update_chunk_len(u, c);
  float *sum = pst_store_back(s) + off;
  /* Each share is scaled by 1/(b*N); with backup workers the sum of N-K shares is rescaled
   * to a mean. */
  float scale = u->backup ? (float)u->workers / (float)needed : 1.0f;
  int last_share = u->next_worker[c] + 1 == (uint32_t)needed;
  if (slot == 0 && last_share) {
    /* A single share is the sum itself: apply the optimizer straight from it. */
    pst_opt_apply(u->opt, pst_store_front(s), pst_store_back(s), data, scale, off, len);
  } else if (slot == 0) {
    /* Worker 0's chunk may already be in place (read straight into the sum). */
    if (data != sum) memcpy(sum, data, len * sizeof(float));
  } else if (last_share) {
    /* Chunk c is complete with this share: sum it in and apply the optimizer in one pass. */
    add_and_apply(u, sum, data, off, len, scale);
  } else {
    add_into(sum, data, len);
  }
  if (++u->next_worker[c] < (uint32_t)needed) return PST_OFFER_TAKEN;
  if (++u->chunks_done == u->n_chunks) close_sync_step(u, published);
  return PST_OFFER_TAKEN;
}

void pst_update_set_active(pst_update *u, int active, int *published) {
  *published = 0;
  int needed = active < u->workers - u->backup ? active : u->workers - u->backup;
  if (u->mode != PST_MODE_SYNC || u->backup == 0 || needed < 1 || needed >= u->needed) return;
  int old = u->needed;
  u->needed = needed;
  if (!u->step_open) return;
  /* Chunks that hold enough shares under the new quorum but not the old one are complete
   * now: apply them. */
  float scale = (float)u->workers / (float)needed;
  for (uint32_t c = 0; c < u->n_chunks; c++) {
    if (u->next_worker[c] < (uint32_t)needed || u->next_worker[c] >= (uint32_t)old) continue;
    size_t off = (size_t)c * u->chunk_floats;
    pst_opt_apply(u->opt, pst_store_front(u->store), pst_store_back(u->store),
                  pst_store_back(u->store) + off, scale, off, pst_update_chunk_len(u, c));
    u->next_worker[c] = (uint32_t)old; /* marks the chunk as applied */
    u->chunks_done++;
  }
  if (u->chunks_done == u->n_chunks) close_sync_step(u, published);
}

uint32_t pst_update_ready_chunks(pst_update *u) {
  if (u->mode != PST_MODE_SYNC || !u->step_open) return 0;
  /* A chunk is final once its share count reached the quorum (offer_sync applies the
   * optimizer with the last share; pst_update_set_active marks the chunks it applies with
   * the old, larger count). Every worker pushes its chunks in order, so chunks complete in
   * order and the prefix only grows during a step. */
  while (u->ready < u->n_chunks && u->next_worker[u->ready] >= (uint32_t)u->needed) u->ready++;
  return u->ready;
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
