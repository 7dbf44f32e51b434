/* Where the worker stands in the data: the slot's position that the ps gives at each
 * session (the shuffles replayed from the seed), each fixed-shard epoch's order, and the
 * ps's data ranges (the data handout). Called by the step machine (step.c) and trainer.c
 * (a DATA frame); calls neither. */
#include "worker/position.h"

#include <errno.h>
#include <inttypes.h>

#include "common/log.h"

/* A fixed shard's next epoch: its samples in the order the seeded generator shuffles. */
void wk_new_epoch_order(wk_trainer *t) {
  int n = t->shard_end - t->shard_begin;
  for (int i = 0; i < n; i++) t->order[i] = t->shard_begin + i;
  pst_rng_shuffle(&t->rng, t->order, n);
}

/* Puts this worker where the ps says its slot stands: `start_step` steps of the shard done
 * and the evaluations of epochs 1..evals_done done. The shuffles are replayed from the seed,
 * so a worker that rejoins, or any worker of a resumed ps, takes exactly the batches an
 * uninterrupted run would. */
void wk_take_position(wk_trainer *t, uint64_t start_step, uint32_t evals_done) {
  if (t->data_ranges) {
    /* The ps says what to train before every step (wk_take_range); the epochs are its. */
    t->epoch = t->step_in_epoch = 0;
    t->steps = start_step;
    t->eval_due = 0;
    t->rg_count = 0;
    t->rg_done = t->bye_sent = 0;
    evals_done = 0;
  }
  uint64_t spe = (uint64_t)t->steps_per_epoch;
  uint64_t epoch = start_step / spe;
  if (epoch > (uint64_t)t->epochs) epoch = (uint64_t)t->epochs;
  if (t->data_ranges) epoch = 0;
  t->epoch = (int)epoch;
  t->step_in_epoch = epoch < (uint64_t)t->epochs && !t->data_ranges ? (int)(start_step % spe) : 0;
  t->steps = start_step;
  pst_rng_seed(&t->rng, t->seed * 1000003u + (uint64_t)t->index);
  for (int e = 0; e <= t->epoch && e < t->epochs && !t->data_ranges; e++) wk_new_epoch_order(t);
  /* The newest finished epoch's evaluation share, if this slot still owes it (its worker
   * was lost around the epoch's end): evaluated on the weights it pulls now, so that the
   * epoch's figures cover the whole test set. */
  t->eval_due =
      !t->eval_on_ps && t->epoch >= 1 && evals_done < (uint32_t)t->epoch ? t->epoch : 0;
  t->subset_due = t->subset_asked = 0;
  t->have_weights = 0;
  t->weights_fresh = 0;
  t->push_in_flight = 0;
  t->r_loss = t->r_seconds = t->r_wait = 0;
  t->r_correct = t->r_samples = 0;
  t->e_loss = t->e_seconds = t->e_wait = 0;
  t->e_correct = t->e_samples = 0;
}

int wk_take_range(wk_trainer *t, const Pstrain__DataRange *d) {
  if (!d || (!d->done && d->count > 0 &&
             (d->epoch < 1 || d->epoch > (uint32_t)t->epochs || d->count > (uint32_t)t->batch ||
              d->start > (uint64_t)t->train.n || d->count > (uint64_t)t->train.n - d->start)))
    return -EPROTO;
  t->rg_done = d->done;
  t->rg_count = d->done ? 0 : d->count;
  t->rg_version = d->version;
  if (d->done) {
    t->epoch = t->epochs; /* the next weights are the last: BYE, then the final ones */
    return 0;
  }
  if (t->rg_count == 0) return 0; /* a zero share this step: the last ranges are out */
  t->rg_start = d->start;
  if (t->rg_epoch != d->epoch) {
    /* A new epoch: its figures so far are said, as after a fixed shard's last step. */
    if (t->rg_epoch > 0 && t->e_samples > 0)
      LOG_INFO("epoch %u/%d: train loss %.4f accuracy %.4f over the %" PRIu64 " samples this "
               "worker trained", t->rg_epoch, t->epochs, t->e_loss / (double)t->e_samples,
               (double)t->e_correct / (double)t->e_samples, t->e_samples);
    t->e_loss = t->e_seconds = t->e_wait = 0;
    t->e_correct = t->e_samples = 0;
    t->rg_epoch = d->epoch;
  }
  t->epoch = (int)d->epoch - 1;
  if (t->order_epoch != d->epoch) {
    pst_epoch_order(t->seed, d->epoch, t->order, t->train.n);
    t->order_epoch = d->epoch;
  }
  for (int i = 0; i < t->batch; i++)
    t->rg_idx[i] = t->order[d->start + ((uint32_t)i < d->count ? (uint32_t)i : 0)];
  /* Prepared while the weights arrive. */
  wk_prefetch_ask(&t->prefetch, t->steps, t->rg_idx);
  return 0;
}
