/* What a worker reports besides its gradients: its training loss and accuracy (told to
 * observability), and its shares of the evaluations (the epoch's, kept per slot for the
 * plausibility check of ps/train/liveness.c, and the dense ones on the test subset), checked
 * first (ps/train/validate.c). ps/net/messages.c hands a REPORT here; this file calls the
 * step watch and observability's events, and nothing of the connections. */
#include <inttypes.h>
#include <stdint.h>

#include "common/clock.h"
#include "common/log.h"
#include "ps/ps.h"

/* Slot i's share of epoch's evaluation came in: how long it took after it could be sent
 * (for the others' deadlines, ps/train/liveness.c). */
static void eval_reported(ps_server *s, int i, uint32_t epoch) {
  ps_worker *w = &s->roster.workers[i];
  if (w->eval_due_epoch == epoch && w->eval_due_at > 0) w->eval_took = pst_now() - w->eval_due_at;
}

/* A worker's evaluation of the last epoch names the whole weights it was taken on (every
 * worker evaluates the same final weights, in every mode: they pull them once all have said
 * BYE). The summary gives it as the model's checksum; reports that disagree are said, and the
 * summary then gives none. */
static void checksum_reported(ps_server *s, int worker, uint64_t sum) {
  if (s->evals.model_sums > 0 && sum != s->evals.model_sum && !s->evals.model_sums_differ) {
    s->evals.model_sums_differ = 1;
    LOG_WARN("worker %d '%s' evaluated final weights with checksum %016" PRIx64 ", another "
             "worker's had %016" PRIx64 ": the summary gives no checksum of the whole model",
             worker, s->roster.workers[worker].name, sum, s->evals.model_sum);
  }
  if (s->evals.model_sums++ == 0) s->evals.model_sum = sum;
}

uint32_t ps_eval_point_due(ps_server *s, int i, uint64_t version) {
  ps_worker *w = &s->roster.workers[i];
  uint64_t per = (uint64_t)s->opt.eval_every *
                 (uint64_t)(s->opt.mode == PST_MODE_SYNC ? 1 : s->opt.workers);
  uint32_t p = w->subset_asked + 1;
  if (version < (uint64_t)p * per) return 0;
  w->subset_asked = p;
  return p;
}

int ps_worker_reported(ps_server *s, int worker, const Pstrain__Report *r, char *why,
                       size_t whylen) {
  int rc = ps_check_report(s, worker, r, why, whylen);
  if (rc < 0) return rc;
  /* Evaluations are not training: their time is taken out of the training time. Its step
   * begins again after it (ps/train/stepwatch.h), and what it took sets what the next may. */
  if (r->is_eval) {
    s->events.eval_time(s, r->compute_seconds);
    pst_stepwatch_eval(&s->core.sw, worker, r->compute_seconds);
  }
  if (r->is_eval && r->subset_point) {
    s->events.subset_share(s, worker, r);
  } else if (r->is_eval) {
    ps_worker *w = &s->roster.workers[worker];
    if (r->epoch == (uint32_t)s->opt.epochs && r->weights_checksum != 0)
      checksum_reported(s, worker, r->weights_checksum);
    if (r->epoch > w->evals_done) {
      eval_reported(s, worker, r->epoch);
      w->eval_share[r->epoch % PS_EVAL_SHARES].epoch = r->epoch;
      w->eval_share[r->epoch % PS_EVAL_SHARES].correct = r->correct;
      w->eval_share[r->epoch % PS_EVAL_SHARES].samples = r->samples;
      w->eval_share[r->epoch % PS_EVAL_SHARES].loss_sum = r->loss_sum;
      w->eval_share[r->epoch % PS_EVAL_SHARES].set_aside = 0;
      w->evals_done = r->epoch;
      s->events.eval_share(s, r->epoch,
                           r->weights_version ? r->weights_version : s->core.store.version,
                           r->loss_sum, r->correct, r->samples);
    }
  }
  if (r->is_eval) {
    ps_step_begins(s, worker);
  } else {
    s->roster.workers[worker].epoch = r->epoch;
    s->events.trained(s, worker, r, s->roster.workers[worker].last_staleness);
  }
  return 0;
}
