/* The data handout (issue 28): the ps gives each worker the next range of an epoch's sample
 * order when it asks, so that every sample is trained exactly once per epoch however workers
 * come and go. The order itself is a pure function of the job seed and the epoch
 * (data/data.h, pst_epoch_order): the ps hands out positions in it, [start, start + count),
 * and never needs the permutation.
 *
 * Ranges are of `range` samples (the batch), the epoch's last one shorter when the batch
 * does not divide the epoch. A range handed out is either trained (its gradient was taken
 * whole) or returned (its worker left, was lost, or its gradient was dropped); a returned
 * range is handed out again before any fresh one, in the order it came back, and in the
 * epoch it belongs to. Fresh ranges run through epoch 1, then epoch 2, ...: a step may hold
 * the last ranges of one epoch and the first of the next. An epoch is complete when all of
 * its samples are trained; the handout is finished when the last one is.
 *
 * One owner, no I/O: ps/train/dataplan.c decides who gets what and when; this module keeps the
 * books (handout_test.c checks exactly-once under any sequence of returns). */
#ifndef PSTRAIN_PS_HANDOUT_H
#define PSTRAIN_PS_HANDOUT_H

#include <stddef.h>
#include <stdint.h>

/* Positions [start, start + count) of epoch `epoch`'s order (1-based); count 0: none. */
typedef struct {
  uint32_t epoch;
  uint64_t start;
  uint32_t count;
} pst_range;

typedef struct {
  uint64_t samples;      /* per epoch */
  uint32_t range;        /* samples per range (the last of an epoch may have fewer) */
  uint32_t epochs;
  uint32_t epoch;        /* fresh ranges come from this epoch (1-based; epochs + 1: none left) */
  uint64_t next;         /* the next fresh position in it */
  pst_range *back;       /* returned ranges, handed out again first, oldest first */
  size_t n_back, cap_back;
  uint64_t *trained;     /* [epochs + 2]: samples of epoch e trained */
  uint32_t complete;     /* epochs 1..complete have every sample trained */
  uint64_t out;          /* ranges handed out, neither trained nor returned yet */
  uint64_t handed, returned; /* counts over the run, for the summary */
} pst_handout;

/* 0, or -EINVAL (no samples, a range of 0, no epochs) or -ENOMEM. */
int pst_handout_init(pst_handout *h, uint64_t samples, uint32_t range, uint32_t epochs);
void pst_handout_free(pst_handout *h);
/* The next range to train: 1 with *r, 0 when none is left to hand out now (*r has count 0):
 * either every range is out and some may still come back, or the handout is finished. */
int pst_handout_next(pst_handout *h, pst_range *r);
/* A range handed out was trained, or comes back to be handed out again. Ranges of count 0
 * change nothing. -EINVAL for a range this handout could not have given. */
int pst_handout_trained(pst_handout *h, const pst_range *r);
int pst_handout_return(pst_handout *h, const pst_range *r);
/* A checkpoint's data position (ps/state/checkpointing.c): fresh ranges from `epoch` at `next`,
 * trained[e] samples of epoch e trained (trained[1..epochs]), and the ranges to hand out
 * again first (those that were out when the checkpoint was taken come back with them). The
 * books must add up: every position handed out of an epoch is either trained or in `back`,
 * exactly once in count. 0, or -EINVAL with the reason, or -ENOMEM; h is initialised by
 * pst_handout_init with the run's samples, range and epochs, and left as it was on error. */
int pst_handout_restore(pst_handout *h, uint32_t epoch, uint64_t next, const uint64_t *trained,
                        const pst_range *back, size_t n_back, char *why, size_t whylen);
/* A range can be handed out now (one came back, or fresh ones are left). */
static inline int pst_handout_available(const pst_handout *h) {
  return h->n_back > 0 || h->epoch <= h->epochs;
}
/* Every sample of every epoch trained. */
static inline int pst_handout_finished(const pst_handout *h) { return h->complete >= h->epochs; }

#endif
