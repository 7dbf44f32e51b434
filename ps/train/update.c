#include "ps/train/update.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/timeline.h"
#include "ps/train/share_check.h"

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
  u->store = store;
  u->opt = opt;
  u->owner = -1;
  u->needed = workers;
  u->members = workers;
  u->slot_of = malloc((size_t)workers * sizeof *u->slot_of);
  u->push_sq = calloc((size_t)workers, sizeof *u->push_sq);
  u->member = malloc((size_t)workers);
  u->in_step = calloc((size_t)workers, 1);
  u->join_at = calloc((size_t)workers, sizeof *u->join_at);
  u->push_checked = calloc((size_t)workers, sizeof *u->push_checked);
  u->push_bound = calloc((size_t)workers, sizeof *u->push_bound);
  if (!u->slot_of || !u->member || !u->in_step || !u->push_sq || !u->join_at ||
      !u->push_checked || !u->push_bound)
    return -ENOMEM;
  /* Chunks of chunk_floats each (the last shorter), until pst_update_set_chunks says
   * otherwise. */
  size_t n = (store->n + chunk_floats - 1) / chunk_floats;
  size_t *starts = malloc((n + 1) * sizeof *starts);
  if (!starts) return -ENOMEM;
  for (size_t c = 0; c < n; c++) starts[c] = c * chunk_floats;
  starts[n] = store->n;
  int rc = pst_update_set_chunks(u, starts, n);
  free(starts);
  if (rc < 0) return rc;
  for (int i = 0; i < workers; i++) u->slot_of[i] = -1;
  memset(u->member, 1, (size_t)workers);
  return pst_update_set_limits(u, PST_GRAD_LIMIT_DEFAULT, 0);
}

void pst_update_set_par(pst_update *u, ps_par *par) { u->par = par; }

int pst_update_set_chunks(pst_update *u, const size_t *starts, size_t n) {
  if (u->step_open || u->owner != -1 || n == 0 || n > UINT32_MAX - 1 || starts[0] != 0 ||
      starts[n] != u->store->n)
    return -EINVAL;
  for (size_t c = 0; c < n; c++)
    if (starts[c + 1] <= starts[c] || starts[c + 1] - starts[c] > u->chunk_floats) return -EINVAL;
  size_t *off = malloc((n + 1) * sizeof *off);
  uint32_t *next_slot = calloc(n, sizeof *next_slot), *shares = calloc(n, sizeof *shares);
  uint8_t *done = calloc(n, 1), *got = calloc(n, 1);
  uint64_t *csamples = calloc(n, sizeof *csamples);
  if (!off || !next_slot || !shares || !done || !got || !csamples) {
    free(off), free(next_slot), free(shares), free(done), free(got), free(csamples);
    return -ENOMEM;
  }
  free(u->chunk_samples);
  u->chunk_samples = csamples;
  memcpy(off, starts, (n + 1) * sizeof *off);
  free(u->chunk_off), free(u->next_slot), free(u->shares), free(u->chunk_done);
  free(u->owner_got);
  u->owner_got = got;
  u->chunk_off = off;
  u->next_slot = next_slot;
  u->shares = shares;
  u->chunk_done = done;
  u->n_chunks = (uint32_t)n;
  return 0;
}

int pst_update_set_staleness_lr(pst_update *u, int on) {
  if (on && u->mode == PST_MODE_SYNC) return -EINVAL;
  u->staleness_lr = on != 0;
  return 0;
}

int pst_update_set_backup(pst_update *u, int backup) {
  if (backup < 0 || backup >= u->workers || (backup > 0 && u->mode != PST_MODE_SYNC))
    return -EINVAL;
  u->backup = backup;
  u->needed = u->workers - backup;
  return 0;
}

int pst_update_by_samples(pst_update *u, uint32_t scale_samples) {
  if (u->mode != PST_MODE_SYNC || u->backup > 0 || scale_samples == 0) return -EINVAL;
  for (int k = 0; k < 2; k++) {
    if (!u->samples[k]) u->samples[k] = calloc((size_t)u->workers, sizeof *u->samples[k]);
    if (!u->samples[k]) return -ENOMEM;
  }
  u->by_samples = 1;
  u->scale_samples = scale_samples;
  return 0;
}

int pst_update_set_lr_scaling(pst_update *u, uint32_t base_samples) {
  if (base_samples > 0 && !u->by_samples) return -EINVAL;
  u->lr_base = base_samples;
  return 0;
}

static const char *const lr_schedule_names[] = {"constant", "cosine"};

int pst_lr_schedule_parse(const char *name, pst_lr_schedule *out) {
  for (int k = 0; k < 2; k++)
    if (!strcmp(name, lr_schedule_names[k])) {
      *out = (pst_lr_schedule)k;
      return 0;
    }
  return -EINVAL;
}

const char *pst_lr_schedule_name(pst_lr_schedule k) {
  return (unsigned)k < 2 ? lr_schedule_names[k] : "?";
}

void pst_update_set_lr_decay(pst_update *u, uint64_t versions) { u->lr_decay_versions = versions; }

float pst_update_lr_decay_at(const pst_update *u, uint64_t v) {
  uint64_t n = u->lr_decay_versions;
  if (n == 0) return 1.0f;
  if (v >= n) v = n - 1;
  return (float)(0.5 * (1.0 + cos(3.14159265358979323846 * (double)v / (double)n)));
}

void pst_update_set_samples(pst_update *u, int w, uint64_t version, uint32_t samples) {
  if (u->by_samples && w >= 0 && w < u->workers) u->samples[version & 1][w] = samples;
}

void pst_update_join_at(pst_update *u, int w, uint64_t version) {
  if (w >= 0 && w < u->workers) u->join_at[w] = version;
}

void pst_update_free(pst_update *u) {
  free(u->samples[0]);
  free(u->samples[1]);
  free(u->join_at);
  free(u->chunk_samples);
  u->samples[0] = u->samples[1] = NULL;
  u->join_at = NULL;
  u->chunk_samples = NULL;
  free(u->chunk_off);
  u->chunk_off = NULL;
  free(u->next_slot);
  free(u->shares);
  free(u->chunk_done);
  free(u->owner_got);
  free(u->slot_of);
  free(u->member);
  free(u->in_step);
  free(u->push_sq);
  free(u->push_checked);
  free(u->push_bound);
  u->push_bound = NULL;
  u->push_sq = NULL;
  u->push_checked = NULL;
  u->next_slot = NULL;
  u->shares = NULL;
  u->chunk_done = NULL;
  u->owner_got = NULL;
  u->slot_of = NULL;
  u->member = NULL;
  u->in_step = NULL;
}


/* dst[i] += src[i]: a plain loop the compiler vectorises (AVX2 with -march=x86-64-v3). */
static void add_into(float *restrict dst, const float *restrict src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

/* The element-wise work on one chunk, [off, off + len) of the parameters, which the ps's
 * helper threads share range by range (ps/train/par.h): summing a share in (sum, data), applying
 * the optimizer from a gradient (grad, scale), or both in one pass. Ranges are disjoint and
 * each element gets the same operations whatever its range, so the bits do not depend on
 * the number of threads. */
typedef struct {
  pst_update *u;
  float *sum;        /* [len]: the chunk's running sum, or NULL */
  const float *data; /* [len]: the share to add into sum */
  const float *grad; /* [len]: what the optimizer applies, or NULL */
  float scale;
  size_t off;
  atomic_int unsafe; /* a block's update came out non-finite */
} chunk_job;

/* The last share of a chunk is summed in and the optimizer applied block by block, so that
 * each block of the sum is read back from L1 instead of memory: one pass over the chunk. */
#define FUSE_BLOCK 4096 /* floats (16 KiB) */

static void chunk_range(void *ctx, size_t begin, size_t end) {
  chunk_job *j = ctx;
  pst_store *s = j->u->store;
  for (size_t b = begin; b < end; b += FUSE_BLOCK) {
    size_t m = end - b < FUSE_BLOCK ? end - b : FUSE_BLOCK;
    if (j->sum) add_into(j->sum + b, j->data + b, m);
    if (j->grad) {
      pst_opt_apply(j->u->opt, pst_store_front(s), pst_store_back(s), j->grad + b, j->scale,
                    j->off + b, m);
      /* Checked while the block is still in L1. */
      if (!pst_opt_step_finite(j->u->opt, pst_store_back(s), j->off + b, m))
        atomic_store_explicit(&j->unsafe, 1, memory_order_relaxed);
    }
  }
}

/* Returns 0, or -ERANGE when the optimizer's results over the chunk were not all finite: the
 * chunk then keeps the values (weights and slots) of the step before, and is counted. */
static int run_chunk(pst_update *u, float *sum, const float *data, const float *grad,
                     float scale, size_t off, uint32_t len) {
  chunk_job j = {u, sum, data, grad, scale, off, 0};
  double t0 = pst_now();
  ps_par_for(u->par, len, chunk_range, &j);
  double t1 = pst_now();
  *(grad ? &u->opt_seconds : &u->sum_seconds) += t1 - t0;
  if (pst_tl_on()) /* the timeline (common/timeline.h): the ps's step is the version built */
    pst_tl_span("ps", !grad ? "sum" : sum ? "sum + optimizer" : "optimizer", t0, t1,
                PST_TL_CHUNK(u->store->version, -1, off, len, u->store->version));
  if (!atomic_load_explicit(&j.unsafe, memory_order_relaxed)) return 0;
  pst_opt_carry(u->opt, pst_store_front(u->store), pst_store_back(u->store), off, len);
  u->unsafe_chunks++;
  u->last_unsafe = 1;
  snprintf(u->reject_why, sizeof u->reject_why,
           "a gradient whose update would make the weights or the optimizer's state non-finite");
  return -ERANGE;
}

/* Optimizer over [off, off + len) from grad ([len]), scaled. */
static int apply(pst_update *u, const float *grad, float scale, size_t off, uint32_t len) {
  return run_chunk(u, NULL, NULL, grad, scale, off, len);
}

/* Worker w takes part in the step on the store's version. */
static int takes_part(const pst_update *u, int w) {
  return u->member[w] && u->join_at[w] <= u->store->version;
}

/* The samples slot w's share of the step in progress covers (by samples). */
static uint32_t slot_samples(const pst_update *u, int w) {
  return u->samples[u->store->version & 1][w];
}

/* The first slot of the step at or after s, or N. */
static uint32_t slot_from(const pst_update *u, uint32_t s) {
  while (s < (uint32_t)u->workers && !u->in_step[s]) s++;
  return s;
}

/* The first chunk of a step claims the back buffer, once no pull reads it, and fixes the
 * step's shares: the member workers (slot = worker), or with backup workers the first
 * min(N-K, members) to push. */
static int open_step(pst_update *u) {
  if (u->step_open) return 1;
  if (pst_store_back_busy(u->store)) return 0;
  u->step_open = 1;
  uint64_t planned = 0;
  if (u->mode == PST_MODE_SYNC) {
    u->opened_with = 0;
    for (int i = 0; i < u->workers; i++) {
      u->in_step[i] = u->backup == 0 ? takes_part(u, i) : i < u->needed;
      u->opened_with += u->in_step[i];
      if (u->in_step[i] && u->by_samples) planned += slot_samples(u, i);
    }
    uint32_t first = slot_from(u, 0);
    for (uint32_t c = 0; c < u->n_chunks; c++) u->next_slot[c] = first;
  }
  /* The learning rate is fixed for the whole step (every chunk the same), from the samples
   * the step was planned with, not from those that arrive: a share cut off by a lost worker
   * changes the step's mean, not its rate. A step planned with no samples keeps the rate. */
  float decay = pst_update_lr_decay_at(u, u->store->version);
  if (u->lr_base > 0 && planned > 0)
    pst_opt_begin_step_lr(u->opt, (float)planned / (float)u->lr_base * decay);
  else
    pst_opt_begin_step_lr(u->opt, decay);
  return 1;
}

float *pst_update_direct(pst_update *u, int w, uint64_t version, uint32_t c) {
  pst_store *s = u->store;
  if (u->mode != PST_MODE_SYNC || u->workers < 2 || u->backup != 0 || c >= u->n_chunks ||
      w < 0 || w >= u->workers || !takes_part(u, w) || version != s->version || !open_step(u))
    return NULL;
  /* Only the chunk's first share, and only when another share will follow it. */
  if (!u->in_step[w] || u->next_slot[c] != (uint32_t)w || u->shares[c] != 0 ||
      slot_from(u, (uint32_t)w + 1) >= (uint32_t)u->workers)
    return NULL;
  return pst_store_back(s) + u->chunk_off[c];
}

static void finish_step(pst_update *u, int *published) {
  pst_store_publish(u->store);
  u->steps++;
  *published = 1;
}

static void reset_sync_step(pst_update *u) {
  memset(u->shares, 0, u->n_chunks * sizeof *u->shares);
  memset(u->chunk_samples, 0, u->n_chunks * sizeof *u->chunk_samples);
  memset(u->chunk_done, 0, u->n_chunks);
  memset(u->in_step, 0, (size_t)u->workers);
  for (int i = 0; i < u->workers; i++) u->slot_of[i] = -1;
  u->slots_taken = 0;
  u->step_shares = 0;
  u->chunks_done = 0;
  u->ready = 0;
  u->step_open = 0;
}

static void close_sync_step(pst_update *u, int *published) {
  uint32_t full = (uint32_t)(u->by_samples ? u->opened_with : u->workers - u->backup);
  for (uint32_t c = 0; c < u->n_chunks; c++)
    if (u->shares[c] < full) {
      u->partial_steps++;
      break;
    }
  reset_sync_step(u);
  finish_step(u, published);
}

/* Chunk c has every share it will get: make it final. Its sum of m shares is scaled by N/m
 * (update.h: the mean over the samples that arrived); a chunk no share reached keeps its
 * values and optimizer state. */
static void complete_chunk(pst_update *u, uint32_t c, int *published) {
  size_t off = u->chunk_off[c];
  uint32_t len = pst_update_chunk_len(u, c);
  pst_store *s = u->store;
  if (u->by_samples && u->chunk_samples[c] > 0)
    apply(u, pst_store_back(s) + off, (float)u->scale_samples / (float)u->chunk_samples[c], off,
          len);
  else if (!u->by_samples && u->shares[c] > 0)
    apply(u, pst_store_back(s) + off, (float)u->workers / (float)u->shares[c], off, len);
  else
    pst_opt_carry(u->opt, pst_store_front(s), pst_store_back(s), off, len);
  u->chunk_done[c] = 1;
  if (++u->chunks_done == u->n_chunks) close_sync_step(u, published);
}

/* Slot `slot` leaves the step in progress. */
static void leave_step(pst_update *u, int slot, int *published) {
  if (!u->step_open || slot < 0 || !u->in_step[slot]) return;
  u->in_step[slot] = 0;
  if (u->step_shares == 0 && slot_from(u, 0) >= (uint32_t)u->workers) {
    /* Nobody is left and nothing arrived: the step never happened. */
    pst_opt_cancel_step(u->opt);
    reset_sync_step(u);
    return;
  }
  for (uint32_t c = 0; c < u->n_chunks && u->step_open; c++) {
    if (u->chunk_done[c] || u->next_slot[c] != (uint32_t)slot) continue;
    u->next_slot[c] = slot_from(u, (uint32_t)slot + 1);
    if (u->next_slot[c] >= (uint32_t)u->workers) complete_chunk(u, c, published);
  }
}

static int offer_sync(pst_update *u, int w, uint64_t version, uint32_t c, int flags,
                      const float *data, int *published) {
  pst_store *s = u->store;
  if (version != s->version) {
    if (version < s->version) { /* late: a backup worker's, or one lost and back */
      u->dropped++;
      return PST_OFFER_DROPPED;
    }
    return -ESTALE;
  }
  if (!u->step_open) {
    if (!takes_part(u, w)) {
      u->dropped++;
      return PST_OFFER_DROPPED;
    }
    /* Before the step opens every chunk's next share is the first member's: anyone else
     * waits without claiming the back buffer. */
    if (u->backup == 0) {
      int first = 0;
      while (first < u->workers && !takes_part(u, first)) first++;
      if (w != first) return PST_OFFER_LATER;
    }
    if (!open_step(u)) return PST_OFFER_LATER;
  }
  size_t off = u->chunk_off[c];
  uint32_t len = pst_update_chunk_len(u, c);
  /* Values are checked once a share is about to be summed (a held-back one is not scanned
   * again each time it is offered), and before a share takes a backup-worker slot, so that a
   * bad one never uses up the quorum. */
  int checked = 0;
  int slot = u->backup == 0 ? w : u->slot_of[w];
  if (slot < 0 && u->backup > 0 && (flags & PST_CHUNK_FIRST) && u->slots_taken < u->needed) {
    if (!pst_share_ok(u, w, c, data, len)) return PST_OFFER_REJECTED;
    checked = 1;
    slot = u->slot_of[w] = u->slots_taken++; /* the first N-K pushers get the slots */
  }
  if (slot < 0 || !u->in_step[slot]) {
    /* Not one of this step's shares: a backup worker's surplus, or a worker that joined (or
     * was taken out) after the step opened. */
    u->dropped++;
    return PST_OFFER_DROPPED;
  }
  if (u->chunk_done[c] || u->next_slot[c] > (uint32_t)slot) return PST_OFFER_TAKEN; /* summed */
  if (u->next_slot[c] != (uint32_t)slot) return PST_OFFER_LATER;
  if (!checked && !pst_share_ok(u, w, c, data, len)) {
    /* The rest of this share will not come: the step goes on without it, like without a
     * lost worker (its chunks already summed stay, each the mean of what it got). */
    leave_step(u, slot, published);
    return PST_OFFER_REJECTED;
  }
  float *sum = pst_store_back(s) + off;
  uint32_t after = slot_from(u, (uint32_t)slot + 1);
  int last_share = after >= (uint32_t)u->workers;
  /* Each share is scaled by 1/(b*N); a sum of m shares is rescaled to their mean (N/m: 1
   * when all N are in). */
  float scale = (float)u->workers / (float)(u->shares[c] + 1);
  uint64_t samples = 0;
  if (u->by_samples) {
    samples = u->chunk_samples[c] + slot_samples(u, slot);
    scale = samples > 0 ? (float)u->scale_samples / (float)samples : 0.0f;
    u->chunk_samples[c] = samples;
  }
  if (u->by_samples && last_share && samples == 0) {
    /* No samples in this chunk at all (only zero shares): it keeps its values. */
    pst_opt_carry(u->opt, pst_store_front(s), pst_store_back(s), off, len);
  } else if (u->shares[c] == 0 && last_share) {
    /* A single share is the sum itself: apply the optimizer straight from it. */
    apply(u, data, scale, off, len);
  } else if (u->shares[c] == 0) {
    /* The first share may already be in place (read straight into the sum). */
    if (data != sum) {
      double t0 = pst_now();
      memcpy(sum, data, len * sizeof(float));
      u->sum_seconds += pst_now() - t0;
      if (pst_tl_on())
        pst_tl_span("ps", "sum (copy)", t0, pst_now(),
                    PST_TL_CHUNK(s->version, -1, off, len, s->version));
    }
  } else if (last_share) {
    /* Chunk c is complete with this share: sum it in and apply the optimizer in one pass. */
    run_chunk(u, sum, data, sum, scale, off, len);
  } else {
    run_chunk(u, sum, data, NULL, 0.0f, off, len);
  }
  u->shares[c]++;
  u->step_shares++;
  u->next_slot[c] = after;
  if (!last_share) return PST_OFFER_TAKEN;
  u->chunk_done[c] = 1;
  if (++u->chunks_done == u->n_chunks) close_sync_step(u, published);
  return PST_OFFER_TAKEN;
}

/* The async push being applied lost its worker: its remaining chunks carry the weights over
 * unchanged, and the version it began is published. */
static void abandon_async_push(pst_update *u, int *published) {
  pst_store *s = u->store;
  /* The chunks not applied, wherever they are: a push may come in any order. */
  for (uint32_t c = 0; c < u->n_chunks; c++)
    if (!u->owner_got[c])
      pst_opt_carry(u->opt, pst_store_front(s), pst_store_back(s), u->chunk_off[c],
                    pst_update_chunk_len(u, c));
  u->owner = -1;
  finish_step(u, published);
}

void pst_update_set_member(pst_update *u, int w, int on, int *published) {
  *published = 0;
  if (w < 0 || w >= u->workers || (u->member[w] != 0) == (on != 0)) return;
  u->member[w] = on != 0;
  u->members += on ? 1 : -1;
  if (u->mode != PST_MODE_SYNC) {
    if (!on && u->owner == w) abandon_async_push(u, published);
    return;
  }
  if (u->backup == 0) {
    if (!on) leave_step(u, w, published);
    return;
  }
  /* Backup workers: the quorum follows the members; a member that leaves gives up its slot
   * in the step, and slots past a smaller quorum leave it too. */
  int full = u->workers - u->backup;
  u->needed = u->members < full ? (u->members > 0 ? u->members : 1) : full;
  if (!u->step_open) return;
  if (!on) leave_step(u, u->slot_of[w], published);
  for (int sl = u->needed; sl < u->workers && u->step_open; sl++) leave_step(u, sl, published);
}

uint32_t pst_update_ready_chunks(pst_update *u) {
  if (u->mode != PST_MODE_SYNC || !u->step_open) return 0;
  /* A chunk is final once it has every share the step will get and the optimizer has been
   * applied to it. With ascending pushes chunks complete in order and the prefix grows as
   * the step goes; a chunk completed out of order (by a worker leaving, or by descending
   * pushes, whose chunk 0 completes last) joins the prefix when the chunks before it are
   * final. */
  while (u->ready < u->n_chunks && u->chunk_done[u->ready]) u->ready++;
  return u->ready;
}

static int offer_async(pst_update *u, int w, uint64_t version, uint32_t c, int flags,
                       const float *data, int *published) {
  pst_store *s = u->store;
  if (u->owner != -1 && u->owner != w) return PST_OFFER_LATER;
  if (!pst_share_ok(u, w, c, data, pst_update_chunk_len(u, c))) {
    /* A push already half applied ends here, the rest of the weights carried over. */
    if (u->owner == w) abandon_async_push(u, published);
    return PST_OFFER_REJECTED;
  }
  if (u->owner == -1) {
    if (!(flags & PST_CHUNK_FIRST)) return -EPROTO;
    if (pst_store_back_busy(s)) return PST_OFFER_LATER;
    u->owner = w;
    u->owner_chunks = 0;
    memset(u->owner_got, 0, u->n_chunks);
    uint64_t st = pst_update_staleness(u, version);
    u->staleness_sum += st;
    if (st > u->staleness_max) u->staleness_max = st;
    pst_opt_begin_step_lr(u->opt, (u->staleness_lr ? 1.0f / (1.0f + (float)st) : 1.0f) *
                                      pst_update_lr_decay_at(u, s->version));
  }
  /* Each chunk once per push; the connection checks the order (ps/net/push_order.h). */
  if (u->owner_got[c]) return -EPROTO;
  size_t off = u->chunk_off[c];
  if (apply(u, data, (float)u->workers, off, pst_update_chunk_len(u, c)) < 0) {
    /* Kept as it was (run_chunk): the rest of this push goes too, as for a NaN. */
    abandon_async_push(u, published);
    return PST_OFFER_REJECTED;
  }
  u->owner_got[c] = 1;
  if (++u->owner_chunks == u->n_chunks) {
    u->owner = -1;
    finish_step(u, published);
  }
  return PST_OFFER_TAKEN;
}

int pst_update_offer(pst_update *u, int w, uint64_t version, uint32_t c, int flags,
                     const float *data, int *published) {
  *published = 0;
  u->last_unsafe = 0;
  if (c >= u->n_chunks || w < 0 || w >= u->workers) return -EPROTO;
  /* A push's first chunk is offered again and again until it is taken, and nothing else of
   * that push comes meanwhile: its norm starts here. */
  if (flags & PST_CHUNK_FIRST) {
    u->push_sq[w] = 0;
    u->push_checked[w] = 0;
    if (u->norm_factor > 0) u->push_bound[w] = pst_norm_sq_bound(u);
  }
  int rc = u->mode == PST_MODE_SYNC ? offer_sync(u, w, version, c, flags, data, published)
                                    : offer_async(u, w, version, c, flags, data, published);
  if (rc == PST_OFFER_TAKEN && (flags & PST_CHUNK_LAST)) {
    u->pushes++;
    if (u->norm_factor > 0) pst_norm_note(u, w);
  }
  return rc;
}
