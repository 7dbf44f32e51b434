/* How gradients become steps: the update modes.
 *
 * A pushed gradient arrives as chunks of at most chunk_floats floats, each read into its
 * connection's receive buffer (a sync chunk's first share straight into its place in the
 * sum instead: pst_update_direct) and offered here. A chunk is either consumed at once (summed
 * or applied) or refused for now; a refused chunk stays in its receive buffer and that
 * connection stops reading, so TCP's own backpressure holds the sender until it is retried.
 *
 * sync:  the step for version v is the optimizer applied once to the sum of exactly one
 *        gradient from each of the N workers, all computed on v. Chunk c is summed in worker
 *        order (worker 0, then 1, ...) into the store's back buffer, so the result is
 *        bit-identical whatever order the chunks arrive in, and the ps holds one sum, never
 *        N gradients. As soon as all N have been summed into chunk c, the optimizer is
 *        applied to that chunk, overlapping the rest of the step's transfer (the last share
 *        is summed and applied block by block, one pass over the chunk).
 * async: each push is applied as it arrives (one push at a time, chunk by chunk into the
 *        back buffer) and published as a new version; its staleness is recorded. With the
 *        staleness-aware learning rate (pst_update_set_staleness_lr; Zhang et al., 2016) a
 *        push of staleness s is applied with the learning rate divided by 1 + s, so that a
 *        gradient computed on weights many versions old moves them less.
 * ssp:   as async, and pulls are held back so that no worker runs more than `staleness`
 *        versions ahead of the slowest (see ps/server.c).
 *
 * lost workers (sync): a step's shares are the workers that were members when it opened; a
 *        worker that leaves mid-step (lost) is taken out of it, and each chunk is then the
 *        mean of the shares it got: a chunk summed from m of the N shares is scaled by N/m
 *        (each share is loss / (b * N), so the scaled sum is the mean over the m * b samples
 *        that did arrive; with all N shares the scale is exactly 1 and nothing changes). A
 *        push for an older version than the step in progress is dropped and counted, one for
 *        a newer one is an error; a share of a chunk that already holds that slot's share
 *        (the replacement of a lost worker resending the step, --on-worker-loss wait) is
 *        read and not summed again.
 *
 * by samples (sync, the data handout of issue 28; pst_update_by_samples): each worker's share
 *        covers the samples of the range the ps gave it for the step (possibly fewer than a
 *        batch, or none: a zero share), its loss still divided by b x N. A chunk summed from
 *        shares of S samples in all is scaled by b x N / S: the mean over the samples actually
 *        summed, whoever was there (with N full batches, exactly 1, as above). A chunk of no
 *        samples keeps its values. A worker may join at a later step (pst_update_join_at),
 *        so that the step in progress never waits for a newcomer.
 *
 * backup workers (sync, K > 0): the step for v is applied once N-K gradients for v are in.
 *        The first N-K workers to start pushing for v get slots 0..N-K-1 and are summed in
 *        slot order; a later push for v, or any push for an older version, is read and
 *        dropped (PST_OFFER_DROPPED at its first chunk; the caller discards the rest). With
 *        K = 0 the slot is the worker index, so sums are in worker order as above.
 *
 * Gradient scale: each worker sends d(loss)/dw with loss = sum over its batch / (b * N), so
 * the sync sum is the mean over the global batch (TF's compute_average_loss). An async push
 * is scaled by N, making it the mean over that worker's own batch.
 *
 * Model state (batchnorm's moving statistics): the workers push the change they want divided
 * by N in the same way (kernels/net.h), and the optimizer adds it instead of training
 * (ps/train/optim.h). The same sums and scales thus give, in sync, the mean of the step's workers'
 * changes (of the m that arrived when workers are lost: N/m) and, in async, one worker's
 * change. Validation is unchanged: a non-finite value anywhere in a chunk rejects it.
 *
 * What a share may be (pst_update_set_limits; issue 23): every value finite and of magnitude
 * at most the gradient limit, and, with a clip norm, the push's norm so far (over the trained
 * parameters, not the model state) within it. A share that is not is rejected like a NaN one.
 * The limit keeps every sum, and so the optimizer's state, finite: N shares of at most L,
 * scaled by at most N, square to (N^2 L)^2, which for N <= 4096 and the default L = 1e6 is
 * about 3e26, far below float's 3.4e38. Should a step's result be non-finite all the same
 * (weights that grew over many steps), the chunk keeps the values of the step before, which
 * the double buffers still hold (pst_opt_carry), and the chunk is counted as unsafe.
 *
 * The norm that follows the job (pst_update_set_norm_factor; issue 43): values within the
 * limit can still be poison (a worker pushing 10 everywhere wrecks Adam's state in a few
 * steps), and --clip-norm, which would stop it, changes honest training and is off by
 * default. So, by default, a push's norm (over the trained parameters of this ps's part of
 * the vector, as for the clip norm) may be at most F times the running median of the norms
 * of the last PST_NORM_WINDOW pushes this ps accepted. Every push is a share of the same
 * scale (1/N of a worker's batch-mean gradient, whatever the mode: async applies it times N),
 * so shares compare with each other as they are, and each shard compares its own parts. The
 * median is a minority's to move only a little, and the bound follows the job as its
 * gradients shrink or grow. Until PST_NORM_WARMUP pushes have been accepted there is no
 * median to trust: the bound is then an absolute ceiling on the worker's gradient, a root
 * mean square of PST_NORM_WARMUP_RMS per trained parameter (far over an honest gradient's,
 * see the README's measurements, and far under a poisoner's of 10 everywhere). A share of no
 * norm (no samples, by samples) is not put in the history: it says nothing of the scale. */
#ifndef PSTRAIN_PS_UPDATE_H
#define PSTRAIN_PS_UPDATE_H

#include <stdint.h>

#include "ps/train/optim.h"
#include "ps/train/par.h"
#include "ps/state/store.h"

typedef enum { PST_MODE_SYNC = 0, PST_MODE_ASYNC = 1, PST_MODE_SSP = 2 } pst_mode;

const char *pst_mode_name(pst_mode m);
int pst_mode_parse(const char *s, pst_mode *m);

/* Accepted pushes whose norms make the running median (pst_update_set_norm_factor). */
#define PST_NORM_WINDOW 64

typedef struct {
  pst_mode mode;
  int workers;            /* N */
  int backup;             /* K: sync steps need N-K gradients */
  int needed;             /* shares a backup-worker step takes: N-K, fewer once members leave */
  uint32_t chunk_floats;  /* the largest chunk (every connection's receive buffer holds one) */
  uint32_t n_chunks;
  size_t *chunk_off;      /* [n_chunks + 1]: chunk c is [chunk_off[c], chunk_off[c + 1]) */
  pst_store *store;
  pst_optimizer *opt;
  ps_par *par;            /* helper threads for the element-wise loops, or NULL (ps/train/par.h) */
  uint8_t *member;        /* [N]: worker w takes part in sync steps (pst_update_set_member) */
  int members;
  /* sync: the step in progress */
  uint8_t *in_step;       /* [N]: slot s is one of the step's shares (fixed when it opens;
                           * a slot leaves when its worker is lost) */
  uint32_t *next_slot;    /* [n_chunks]: the slot whose share of chunk c is summed next; N
                           * when no slot of the step is left for it */
  uint32_t *shares;       /* [n_chunks]: shares summed into chunk c */
  uint8_t *chunk_done;    /* [n_chunks]: chunk c holds its final values */
  int *slot_of;           /* [N]: worker -> slot for the step in progress, -1 for none */
  int slots_taken;
  uint64_t step_shares;   /* shares summed into any chunk of the step */
  uint32_t chunks_done;   /* chunks with all their shares summed and the optimizer applied */
  uint32_t ready;         /* chunks 0..ready-1 of the back buffer are final (see below) */
  int step_open;          /* the back buffer is claimed by the step in progress */
  /* async / ssp */
  int owner;              /* worker whose push is being applied, -1 for none */
  uint32_t owner_chunks;  /* of it, chunks applied */
  uint8_t *owner_got;     /* [n_chunks]: chunk c of it has been applied (a push may come in
                           * any order: ps/net/push_order.h) */
  int staleness_lr;       /* async/ssp: a push's learning rate / (1 + its staleness) */
  /* statistics */
  uint64_t steps;
  uint64_t staleness_sum, staleness_max, pushes;
  uint64_t dropped;       /* gradients dropped: backup workers' late ones, stale ones, and
                           * those of workers no longer in the step */
  uint64_t partial_steps; /* sync steps applied with fewer shares than N-K (workers lost) */
  /* What a share may be (pst_update_set_limits). */
  uint32_t limit_bits;    /* the bits of the gradient limit: |x|'s bits above it reject */
  float grad_limit;
  float clip_norm;        /* the worker's gradient norm bound (0: none); a share is 1/N of it */
  double clip_sq;         /* the bound on a share's squared norm, with rounding's slack */
  double *push_sq;        /* [N]: the squared norm of worker w's push so far */
  uint64_t unsafe_chunks; /* chunks whose update would have been non-finite: kept as they were */
  /* The norm that follows the job (pst_update_set_norm_factor). */
  double norm_factor;     /* F: a push over F x the running median is rejected (0: off) */
  double norm_hist[PST_NORM_WINDOW]; /* the norms of the last PST_NORM_WINDOW accepted pushes (a ring) */
  uint32_t norm_count;    /* accepted pushes put in the history, ever */
  double norm_median;     /* their running median (0 during the warm-up) */
  double *push_bound;     /* [N]: the bound on worker w's push's squared norm, fixed when the
                           * push began */
  uint32_t *push_checked; /* [N]: chunks of worker w's push so far that passed share_ok */
  double norm_ratio_max;  /* the largest norm / median of an accepted push after the warm-up */
  double warm_rms_max;    /* the largest worker gradient RMS accepted during the warm-up */
  uint64_t norm_rejected; /* pushes rejected by that rule */
  /* Seconds of the caller's thread spent summing shares (sum_seconds) and in optimizer passes
   * (opt_seconds, which include the sum of a chunk's last share, made in the same pass), for
   * the round trip's parts (ps/obs/metrics.h). */
  double sum_seconds, opt_seconds;
  int last_unsafe;        /* the last offer kept a chunk back that way */
  /* By samples (pst_update_by_samples; sync, the data handout). */
  int by_samples;
  uint32_t scale_samples; /* b x N: what each share's loss was divided by */
  uint32_t *samples[2];   /* [2][N]: slot w's samples in the step on version v, at [v & 1] */
  uint64_t *chunk_samples; /* [n_chunks]: samples summed into chunk c in the step */
  uint64_t *join_at;      /* [N]: member w takes part from the step on this version on */
  int opened_with;        /* slots in the step when it opened */
  uint32_t lr_base;       /* by samples, --lr-scaling linear: a step's learning rate is scaled
                           * by the samples planned for it / this (b x MIN); 0: off */
  uint64_t lr_decay_versions; /* --lr-schedule cosine: the versions the job plans; 0: off */
  char reject_why[128];   /* why the last PST_OFFER_REJECTED was */
} pst_update;

/* Offer results: */
#define PST_OFFER_TAKEN 1
#define PST_OFFER_LATER 0
#define PST_OFFER_DROPPED 2
#define PST_OFFER_REJECTED 3 /* the chunk is not a share the ps takes (reject_why says why:
                              * a NaN or infinity, a value over the limit, a norm over the
                              * clip norm, or, async, an update that would not be finite):
                              * nothing of it was summed */

/* The receive buffers of all N worker connections (one chunk each) take at most this much:
 * pst_update_init lowers chunk_floats to PST_RECV_BUDGET / N (not below
 * PST_CHUNK_MIN_FLOATS), so the ps stays within weights x (2 + optimizer slots) + 32 MiB.
 * The chunk actually used is u->chunk_floats (what WELCOME tells the workers). */
#define PST_RECV_BUDGET (16u << 20)
#define PST_CHUNK_MIN_FLOATS (16u * 1024u)

int pst_update_init(pst_update *u, pst_mode mode, int workers, uint32_t chunk_floats,
                    pst_store *store, pst_optimizer *opt);
/* The gradient limit (> 0: any value of larger magnitude rejects its chunk) and the clip norm
 * (0: none) that workers hold their gradients to (the ps checks each push's norm against it
 * over the trained parameters: the optimizer's model-state ranges are left out). Defaults:
 * PST_GRAD_LIMIT_DEFAULT and none. 0, or -EINVAL for a limit out of (0, 1e30] or a negative
 * or non-finite norm. */
#define PST_GRAD_LIMIT_DEFAULT 1e6
/* The same as text, for option tables. */
#define PST_GRAD_LIMIT_STR_(x) #x
#define PST_GRAD_LIMIT_STR(x) PST_GRAD_LIMIT_STR_(x)
#define PST_GRAD_LIMIT_DEFAULT_TEXT PST_GRAD_LIMIT_STR(PST_GRAD_LIMIT_DEFAULT)
int pst_update_set_limits(pst_update *u, double grad_limit, double clip_norm);
/* The flags as given: --grad-limit in (0, 1e30] and --clip-norm in [0, 1e30]. 0, or -EINVAL
 * with the reason (the ps's and an all-reduce rank's flags). */
int pst_update_check_limits(double grad_limit, double clip_norm, char *err, size_t errlen);
/* The norm that follows the job (update.h's "What a share may be"): F > 0 rejects a push
 * whose norm is over F times the running median of accepted pushes' (after a warm-up of
 * PST_NORM_WARMUP pushes bounded by PST_NORM_WARMUP_RMS per parameter instead); 0 turns it
 * off. Off after pst_update_init, as for a zeroed ps_options (the ps's tests feed gradients of
 * any size); pstrain-ps's default, which every job gets, is PST_NORM_FACTOR_DEFAULT. 0, or
 * -EINVAL for a negative or non-finite F or one in (0, 1]. */
#define PST_NORM_FACTOR_DEFAULT 10
#define PST_NORM_FACTOR_DEFAULT_TEXT PST_GRAD_LIMIT_STR(PST_NORM_FACTOR_DEFAULT)
#define PST_NORM_WARMUP 8
#define PST_NORM_WARMUP_RMS 1.0
int pst_update_set_norm_factor(pst_update *u, double factor);
/* The chunks' boundaries (pst_model_chunks: along the layers): starts[n_chunks + 1],
 * starts[0] = 0, ascending, starts[n_chunks] = the store's n, no chunk over chunk_floats.
 * Until it is called, chunk c is [c x chunk_floats, (c + 1) x chunk_floats). Only before
 * any gradient (-EINVAL otherwise, and for boundaries that break the rules); -ENOMEM. */
int pst_update_set_chunks(pst_update *u, const size_t *starts, size_t n_chunks);
/* Sums and optimizer passes over a chunk run on par's threads (NULL: the caller's alone);
 * the results are the same bits either way. */
void pst_update_set_par(pst_update *u, ps_par *par);
/* Async and ssp: each push's learning rate divided by 1 + its staleness (on), or not (off,
 * the default). -EINVAL in sync mode, whose gradients are never stale. */
int pst_update_set_staleness_lr(pst_update *u, int on);
/* Sync only: apply each step after N-K gradients (0 <= K < N). */
int pst_update_set_backup(pst_update *u, int backup);
/* Worker w joins (on = 1) or leaves (on = 0) the sync steps. A worker that joins takes part
 * from the next step that opens. One that leaves (lost, or finished) is taken out of the step
 * in progress at once: chunks that were waiting only for its share are applied now with the
 * shares they have (*published = 1 when that completes the step), and a step that had no
 * share at all when its last worker left is taken back. In async/ssp, a push being applied
 * when its worker leaves is finished with the chunks it sent (the rest carried over
 * unchanged). Membership also sets the backup-worker quorum: min(N-K, members). */
void pst_update_set_member(pst_update *u, int w, int on, int *published);
/* Sync: scale each step by the samples summed (update.h's "by samples"), each share's loss
 * having been divided by scale_samples (b x N). 0, or -EINVAL (another mode, backup workers,
 * 0), -ENOMEM. */
int pst_update_by_samples(pst_update *u, uint32_t scale_samples);
/* By samples, the linear-scaling rule (Goyal et al., 2017): each step's learning rate is
 * scaled by the samples its workers were given / base_samples (0: off). 0 or -EINVAL. */
int pst_update_set_lr_scaling(pst_update *u, uint32_t base_samples);
/* --lr-schedule's kinds; their names are parsed and written only here. */
typedef enum { PST_LR_CONSTANT = 0, PST_LR_COSINE } pst_lr_schedule;
/* "constant" or "cosine" into out: 0, or -EINVAL. */
int pst_lr_schedule_parse(const char *name, pst_lr_schedule *out);
const char *pst_lr_schedule_name(pst_lr_schedule k);
/* --lr-schedule cosine over `versions` (the job's planned steps; 0: a constant rate): the
 * step that makes version v + 1 runs at (1 + cos(pi v / versions)) / 2 of its rate, from the
 * whole of it at the first step to nearly nothing at the last; steps past the plan keep the
 * last step's share. It multiplies the other scalings (--lr-scaling, --staleness-lr). */
void pst_update_set_lr_decay(pst_update *u, uint64_t versions);
/* That share for the step that makes version v + 1: exactly 1 without a schedule. */
float pst_update_lr_decay_at(const pst_update *u, uint64_t v);
/* By samples: worker w's share of the step on `version` covers `samples` samples. Set before
 * any of its chunks is offered (the ps gives the step's ranges when it answers the pull). */
void pst_update_set_samples(pst_update *u, int w, uint64_t version, uint32_t samples);
/* Worker w, once a member, takes part from the step on `version` on (0: at once). */
void pst_update_join_at(pst_update *u, int w, uint64_t version);
void pst_update_free(pst_update *u);
/* Where chunk c starts in the vector, and its floats. */
static inline size_t pst_update_chunk_off(const pst_update *u, uint32_t c) {
  return u->chunk_off[c];
}
static inline uint32_t pst_update_chunk_len(const pst_update *u, uint32_t c) {
  return (uint32_t)(u->chunk_off[c + 1] - u->chunk_off[c]);
}
/* sync: where worker w's chunk c, computed on `version`, may be read straight into: its
 * place in the back buffer when that share is the chunk's first of the step (it would be
 * copied there), else NULL. Claims the back buffer for the step like an offer does; the
 * chunk must then be offered with data pointing there. */
float *pst_update_direct(pst_update *u, int w, uint64_t version, uint32_t c);
/* Where a chunk sits in its push (the flags of an offer). A push sends every chunk once, in
 * an order the connection checks (ps/net/push_order.h: ascending, descending, or each
 * layer's chunks ascending with the layers last first), and tells the first and the last
 * chunk of each push. */
#define PST_CHUNK_FIRST 1
#define PST_CHUNK_LAST 2
/* The flags of the k-th chunk sent of a push, whichever chunk it is. */
static inline int pst_update_chunk_flags(const pst_update *u, uint32_t k) {
  return (k == 0 ? PST_CHUNK_FIRST : 0) | (k + 1 == u->n_chunks ? PST_CHUNK_LAST : 0);
}

/* Offers chunk c (data: pst_update_chunk_len(c) floats) of worker w's gradient computed on
 * `version`, `flags` its place in the push. Returns PST_OFFER_TAKEN, PST_OFFER_LATER, PST_OFFER_DROPPED (late),
 * PST_OFFER_REJECTED (non-finite values: checked when the chunk is about to be summed or
 * applied, so a held-back chunk costs nothing extra; a rejected chunk changes no state), or
 * -ESTALE when a sync gradient claims a version newer than the ps's. *published is set to 1 when this
 * chunk completed a step (a new version is out). */
int pst_update_offer(pst_update *u, int w, uint64_t version, uint32_t c, int flags,
                     const float *data, int *published);
/* sync: how many leading chunks of the back buffer already hold their final values for the
 * step in progress (version + 1): every share summed and the optimizer applied. Such a
 * chunk is never written again, so a pull of version + 1 may send it before the step is
 * complete (ps/server.c streams it). 0 in the other modes and between steps. */
uint32_t pst_update_ready_chunks(pst_update *u);
/* The staleness a push computed on `version` would have now. */
static inline uint64_t pst_update_staleness(const pst_update *u, uint64_t version) {
  return u->store->version >= version ? u->store->version - version : 0;
}

#endif
