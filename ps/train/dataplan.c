/* The data handout on the ps (issue 28, --data-order ps): who trains which range of the
 * epoch's order in which step, and what happens to the ranges of workers that come and go.
 * ps/train/handout.c keeps the books; this file decides.
 *
 * sync: the ranges of the step on version v are given out together, in slot order, to every
 * worker taking part in it, when the first reply of v is about to go out (each worker hears
 * its own in a DATA frame just before its weights). The assignment is thus the same run to
 * run for a fixed set of workers, whatever order their pulls come in, and so are the sums
 * (ps/train/update.h sums in slot order). A worker that registers while step v is under way takes
 * part from step v + 1 (from v + 2 if v + 1's ranges are out already): it waits at most
 * about a step, and the others never wait for it. Each step is scaled by the samples its
 * shares covered (pst_update_by_samples).
 * async, ssp: each reply gets the next range.
 *
 * A range is trained once its worker's gradient is taken whole; it goes back to the pool
 * when its worker leaves or is lost before that, or its gradient is dropped or refused. A
 * gradient cut off half-way leaves the chunks it reached in that step (as any lost worker's
 * does, ps/train/update.h) and its range is trained again: those samples then count twice in part
 * of the model, which the records do not show. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/shard.h"
#include "ps/ps.h"

int ps_data_start(ps_server *s, char *err, size_t errlen) {
  if (!s->opt.data_handout) return 0;
  if (s->opt.data_train == 0) {
    snprintf(err, errlen, "the data handout needs the number of training samples at start "
                          "(--eval-on ps, or --data-facts)");
    return -EINVAL;
  }
  int rc = pst_handout_init(&s->plan.data, s->opt.data_train, (uint32_t)s->opt.batch_size,
                            (uint32_t)s->opt.epochs);
  if (rc == 0 && s->opt.mode == PST_MODE_SYNC)
    rc = pst_update_by_samples(&s->core.upd, (uint32_t)s->opt.batch_size * (uint32_t)s->opt.workers);
  if (rc == 0 && s->opt.lr_linear)
    rc = pst_update_set_lr_scaling(&s->core.upd,
                                   (uint32_t)s->opt.batch_size * (uint32_t)s->opt.workers_min);
  if (rc < 0) {
    snprintf(err, errlen, "cannot set up the data handout: %s", strerror(-rc));
    return rc;
  }
  /* Nobody takes part until a worker registers (ps_worker_joined). */
  for (int i = 0; i < s->opt.workers; i++) {
    int published;
    pst_update_set_member(&s->core.upd, i, 0, &published);
  }
  return 0;
}

void ps_plan_lr(ps_server *s) {
  if (s->opt.lr_schedule != PST_LR_COSINE || !s->facts.data_known) return;
  /* A sync step is a version; in async and ssp each gradient is one. */
  uint64_t versions = (uint64_t)s->opt.epochs *
      (uint64_t)pst_steps_per_epoch((int)s->facts.train_n, s->opt.workers, s->opt.batch_size);
  if (s->opt.mode != PST_MODE_SYNC) versions *= (uint64_t)s->opt.workers;
  pst_update_set_lr_decay(&s->core.upd, versions);
}

float ps_lr_now(const ps_server *s) {
  uint64_t v = s->core.store.version;
  return s->opt.opt.lr * pst_update_lr_decay_at(&s->core.upd, v > 0 ? v - 1 : 0);
}

int ps_data_finished(const ps_server *s) {
  return s->opt.data_handout && pst_handout_finished(&s->plan.data);
}

uint64_t ps_slot_position(const ps_server *s, int i) {
  const ps_worker *w = &s->roster.workers[i];
  if (s->opt.mode != PST_MODE_SYNC) return w->pushes;
  /* The data handout: the step it takes part from (ps/train/dataplan.c). */
  if (s->opt.data_handout) return w->join_at;
  /* A slot's first worker starts its shard at the beginning (with backup workers the others
   * may be steps ahead by then); a replacement, or any worker of a resumed ps, where the
   * steps are: the batches of the steps it missed are skipped. A slot whose push for the
   * step in progress is in whole has done that step: its replacement starts at the next one
   * (lying_ps_test: a worker lost right after its push, the others' shares still arriving,
   * was told the step in progress, then computed that step's batch on the next version's
   * weights once the step completed, and the run ended with other weights). */
  uint64_t at = w->ever || s->restored.resumed ? s->core.store.version : 0;
  return w->whole_for > at ? w->whole_for : at;
}

uint64_t ps_data_join_version(const ps_server *s) {
  uint64_t v = s->core.store.version;
  if (!s->roster.started) return v;
  return s->plan.plan_next > v + 1 ? s->plan.plan_next : v + 1;
}

/* Slot i's range k goes back to the pool. */
static void give_back(ps_server *s, int i, int k) {
  ps_worker *w = &s->roster.workers[i];
  pst_range *r = &w->range[k];
  if (r->count == 0) return;
  if (pst_handout_return(&s->plan.data, r) == 0)
    s->events.range(s, "returned", i, w->range_version[k], r);
  r->count = 0;
}

static void hand_out(ps_server *s, int i, uint64_t version) {
  ps_worker *w = &s->roster.workers[i];
  int k = (int)(version & 1);
  give_back(s, i, k); /* a range of two steps ago was not trained: it never will be */
  pst_handout_next(&s->plan.data, &w->range[k]);
  w->range_version[k] = version;
  if (s->opt.mode == PST_MODE_SYNC) pst_update_set_samples(&s->core.upd, i, version, w->range[k].count);
  if (w->range[k].count)
    s->events.range(s, "handed", i, version, &w->range[k]);
}

/* sync: the ranges of the step on `version`, in slot order, to every worker taking part. */
static void plan(ps_server *s, uint64_t version) {
  for (int i = 0; i < s->opt.workers; i++) {
    const ps_worker *w = &s->roster.workers[i];
    if (!w->conn || w->done || w->leaving || !s->core.upd.member[i] || s->core.upd.join_at[i] > version)
      continue;
    hand_out(s, i, version);
  }
  s->plan.plan_next = version + 1;
}

int ps_data_range_for(ps_server *s, int worker, uint64_t v, Pstrain__DataRange *d) {
  if (!s->opt.data_handout || worker < 0) return 0;
  ps_worker *w = &s->roster.workers[worker];
  if (s->opt.mode == PST_MODE_SYNC) {
    if (v >= s->plan.plan_next) plan(s, v);
  } else {
    /* async, ssp: one range at a time (a push of the last one is in whole before this pull) */
    give_back(s, worker, (int)((v + 1) & 1));
    hand_out(s, worker, v);
  }
  const pst_range *r = &w->range[v & 1];
  int mine = r->count > 0 && w->range_version[v & 1] == v;
  if (mine) {
    d->epoch = r->epoch;
    d->start = r->start;
    d->count = r->count;
  }
  d->done = !mine && ps_data_finished(s);
  d->version = v;
  return 1;
}

void ps_data_pushed(ps_server *s, int i, uint64_t version, int trained) {
  if (!s->opt.data_handout) return;
  ps_worker *w = &s->roster.workers[i];
  int k = (int)(version & 1);
  pst_range *r = &w->range[k];
  if (r->count == 0 || w->range_version[k] != version) return;
  if (!trained) {
    give_back(s, i, k);
    return;
  }
  uint32_t before = s->plan.data.complete;
  if (pst_handout_trained(&s->plan.data, r) == 0) {
    s->events.range(s, "trained", i, version, r);
    w->trained_range = *r;
    w->trained_version = version;
  }
  r->count = 0;
  for (uint32_t e = before + 1; e <= s->plan.data.complete; e++) {
    s->events.data_epoch(s, e);
    LOG_INFO("epoch %u/%d: every one of its %" PRIu64 " samples trained once (version %" PRIu64
             ", %" PRIu64 " ranges handed out so far, %" PRIu64 " of them returned)", e,
             s->opt.epochs, s->plan.data.samples, s->core.store.version, s->plan.data.handed, s->plan.data.returned);
  }
}

void ps_data_slot_gone(ps_server *s, int i, const char *why) {
  if (!s->opt.data_handout) return;
  ps_worker *w = &s->roster.workers[i];
  for (int k = 0; k < 2; k++) {
    const pst_range *r = &w->range[k];
    if (r->count)
      LOG_INFO("worker %d: its range of epoch %u, positions [%" PRIu64 ", %" PRIu64 "), goes "
               "back to the pool (%s)", i, r->epoch, r->start, r->start + r->count, why);
  }
  /* The older step's first, so that ranges come back in the order they went out. */
  int first = w->range_version[0] <= w->range_version[1] ? 0 : 1;
  give_back(s, i, first);
  give_back(s, i, 1 - first);
}

static int by_position(const void *a, const void *b) {
  const pst_range *x = a, *y = b;
  if (x->epoch != y->epoch) return x->epoch < y->epoch ? -1 : 1;
  return x->start < y->start ? -1 : x->start > y->start;
}

int ps_data_position(const ps_server *s, uint32_t *epoch, uint64_t *next, uint64_t *trained,
                     pst_range **back, size_t *n_back) {
  const pst_handout *h = &s->plan.data;
  size_t cap = h->n_back + 3 * (size_t)s->opt.workers, n = 0;
  pst_range *b = malloc(cap * sizeof *b);
  if (!b) return -ENOMEM;
  *epoch = h->epoch;
  *next = h->next;
  for (uint32_t e = 1; e <= h->epochs; e++) trained[e] = h->trained[e];
  /* Ranges out now, and in sync the ones trained in the step under way (its gradients are
   * not in the published weights): in position order after the ones already back, so that
   * a resumed run hands them out again the same way whichever worker held them. */
  for (int i = 0; i < s->opt.workers; i++) {
    const ps_worker *w = &s->roster.workers[i];
    for (int k = 0; k < 2; k++)
      if (w->range[k].count) b[n++] = w->range[k];
    const pst_range *t = &w->trained_range;
    if (s->opt.mode == PST_MODE_SYNC && t->count && w->trained_version >= s->core.store.version) {
      b[n++] = *t;
      trained[t->epoch] -= t->count;
    }
  }
  qsort(b, n, sizeof *b, by_position);
  memmove(b + h->n_back, b, n * sizeof *b);
  memcpy(b, h->back, h->n_back * sizeof *b);
  *back = b;
  *n_back = n + h->n_back;
  return 0;
}
