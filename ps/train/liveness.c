/* Failures of workers, as the ps sees them: a worker is lost when its connection closes or
 * when it has sent nothing for --worker-timeout seconds (it sends a HEARTBEAT while it
 * computes, and so does the ps while it has nothing to send, so silence means a dead or
 * stopped process, a cut link, or a hung host). A lost worker's slot waits --rejoin-timeout
 * seconds for a replacement, which takes over its shard where the slot stands; meanwhile a
 * sync step goes on without it (--on-worker-loss continue, ps/train/update.h says how the mean is
 * scaled) or waits for it (wait). When the wait runs out the slot is abandoned: training goes
 * on with the others, and the rest of its shard is skipped. This file also decides when an
 * epoch's evaluation is complete and when the run is over, since both depend on who is still
 * there. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/notify.h"
#include "common/shard.h"
#include "ps/state/checkpointing.h"
#include "ps/ps.h"

/* The watch timer runs a few times per timeout, and at least once a second (rejoin deadlines
 * and timed checkpoints need no finer grain). */
static uint64_t watch_period_ms(const ps_server *s) {
  double ms = s->opt.worker_timeout * 1000.0 / 8.0;
  if (ms > 1000.0) ms = 1000.0;
  if (ms < 20.0) ms = 20.0;
  return (uint64_t)ms;
}

static void update_member(ps_server *s, int i, int on) {
  int published = 0;
  pst_update_set_member(&s->core.upd, i, on, &published);
  if (published) ps_ckpt_published(s);
}

static void abandon(ps_server *s, int i, const char *why) {
  ps_worker *w = &s->roster.workers[i];
  if (w->abandoned || w->done) return;
  w->abandoned = 1;
  w->lost = 0;
  s->roster.abandoned++;
  update_member(s, i, 0);
  LOG_WARN("worker slot %d ('%s') abandoned: %s; training goes on with %d of %d workers and "
           "the rest of its shard is skipped",
           i, w->name, why, s->opt.workers - s->roster.abandoned, s->opt.workers);
  pst_notify_status("worker slot %d abandoned (%s); training goes on without it", i, why);
  /* Pulls of the final weights may have waited for this slot alone (backup workers: the
   * others finished while it was lost), and so may a step: they are answered now. */
  s->ops.kick(s);
}

/* The steps of the job: every slot's shard has this many (0 while the data is unknown). */
static uint64_t job_steps(const ps_server *s) {
  if (!s->facts.data_known) return 0;
  return (uint64_t)s->opt.epochs *
         (uint64_t)pst_steps_per_epoch((int)s->facts.train_n, s->opt.workers, s->opt.batch_size);
}

int ps_slot_trained(const ps_server *s, int i) {
  if (s->opt.data_handout) return ps_data_finished(s);
  /* No worker has said what the data is (tools that speak the protocol without data, such
   * as pstrain-benchclient, or workers from before the data facts): the job has no steps to
   * train through, and a BYE ends a slot's rounds as it always has. Such a job that took no
   * step at all does not end as finished (ps_check_progress). */
  if (!s->facts.data_known) return 1;
  uint64_t total = job_steps(s);
  const ps_worker *w = &s->roster.workers[i];
  if (s->opt.mode != PST_MODE_SYNC) return w->pushes >= total;
  return ps_slot_position(s, i) >= total || w->pushed_to >= total;
}


int ps_waits_for(const ps_server *s, int i) {
  if (s->opt.mode != PST_MODE_SYNC || !s->roster.started) return 0;
  const ps_worker *w = &s->roster.workers[i];
  int pushed = w->pushes > 0 && w->last_version == s->core.store.version;
  return !pushed && !w->done && s->core.upd.member[i];
}

/* ---- the data handout: workers come and go (--workers MIN:MAX) ---- */

static void joined_elastic(ps_server *s, int i, const char *peer, const char *session) {
  ps_worker *w = &s->roster.workers[i];
  w->leaving = 0;
  w->lost = 0;
  if (w->abandoned) s->roster.abandoned--;
  w->abandoned = 0;
  if (!w->ever) s->roster.slots_seen++;
  w->ever = 1;
  s->roster.empty_since = 0;
  /* ssp: the newcomer's clock starts at the slowest present worker's (ps_ssp_clock). */
  uint64_t slowest = UINT64_MAX;
  for (int k = 0; k < s->opt.workers; k++)
    if (k != i && s->roster.workers[k].conn && !s->roster.workers[k].done &&
        ps_ssp_clock(&s->roster.workers[k]) < slowest)
      slowest = ps_ssp_clock(&s->roster.workers[k]);
  w->clock_off = slowest == UINT64_MAX ? 0 : slowest - w->pushes;
  update_member(s, i, 1);
  int present = ps_present_workers(&s->roster);
  LOG_INFO("worker %d '%s' joined from %s%s%s: %d training (of %d to %d); it takes part from "
           "version %" PRIu64, i, w->name, peer, session[0] ? " over " : "", session,
           present, s->opt.workers_min, s->opt.workers, w->join_at);
  if (present > s->roster.workers_most) s->roster.workers_most = present;
  s->events.workers(s, "joined", i, present, w->join_at);
  if (!s->roster.started && s->roster.registered >= s->opt.workers_min) {
    s->roster.started = 1;
    s->events.began(s);
    LOG_INFO("%d workers registered (at least %d); training %s, %d epochs, the ps handing out "
             "the data%s", s->roster.registered, s->opt.workers_min, pst_mode_name(s->opt.mode),
             s->opt.epochs, s->restored.resumed ? " (resumed)" : "");
    s->ops.kick(s); /* the pulls held until now */
  }
}

static void gone_elastic(ps_server *s, int i, const char *why) {
  ps_worker *w = &s->roster.workers[i];
  ps_data_slot_gone(s, i, w->leaving ? "its worker left" : "its worker was lost");
  update_member(s, i, 0);
  int present = ps_present_workers(&s->roster);
  if (w->leaving) {
    s->roster.departures++;
    LOG_INFO("worker %d '%s' departed (it said goodbye); %d training", i, w->name, present);
  } else {
    w->losses++;
    s->roster.losses++;
    LOG_WARN("worker %d '%s' lost (%s); %d training, and any newcomer may take its place", i,
             w->name, why ? why : "disconnected", present);
    pst_notify_status("worker %d lost (%s); %d training", i, why ? why : "disconnected", present);
  }
  s->events.workers(s, w->leaving ? "departed" : "lost", i, present, 0);
  if (present < s->opt.workers_min && !ps_data_finished(s))
    LOG_WARN("%d workers training, fewer than --workers' minimum of %d: training goes on with "
             "them, and newcomers are admitted", present, s->opt.workers_min);
  if (s->roster.registered == 0) s->roster.empty_since = pst_now();
  s->ops.kick(s);
}

void ps_worker_lost(ps_server *s, int i, const char *why) {
  ps_worker *w = &s->roster.workers[i];
  w->conn = NULL;
  s->roster.registered--;
  if (s->life.stopping) return;
  if (s->facts.data_known && !s->facts.data_fixed && s->roster.registered == 0 &&
      s->core.store.version == s->facts.data_pinned_at) {
    /* The data facts came from workers that have all gone before a step was taken on them:
     * a worker that lied about its data (or a wrong one) must not keep the right ones out. */
    LOG_INFO("the workers' data facts (%u training, %u test samples, %u classes) are "
             "forgotten: every worker that gave them left before a step; the next one sets them",
             s->facts.train_n, s->facts.test_n, s->facts.classes);
    ps_facts_forget(&s->facts);
  }
  if (w->done) {
    /* A finished worker owes nothing more but its evaluation, which it no longer owes now:
     * the epoch, or the run, may be complete without it. */
    ps_check_progress(s);
    return;
  }
  if (s->opt.data_handout) {
    gone_elastic(s, i, why);
    return;
  }
  w->lost = 1;
  w->lost_at = pst_now();
  w->losses++;
  s->roster.losses++;
  int waits = s->opt.mode == PST_MODE_SYNC && s->opt.wait_on_loss;
  LOG_WARN("worker %d '%s' lost (%s); its slot waits %.0f s for a replacement, and %s", i,
           w->name, why ? why : "disconnected", s->opt.rejoin_timeout,
           waits ? "sync steps wait for it (--on-worker-loss wait)"
                 : s->opt.mode == PST_MODE_SYNC ? "sync steps go on without it"
                                                : "training goes on without it");
  pst_notify_status("worker %d lost (%s); waiting %.0f s for a replacement", i,
                    why ? why : "disconnected", s->opt.rejoin_timeout);
  if (!waits) update_member(s, i, 0);
  s->ops.kick(s);
}

void ps_worker_joined(ps_server *s, int i, const char *peer, const char *session) {
  ps_worker *w = &s->roster.workers[i];
  pst_stepwatch_forget(&s->core.sw, i); /* its steps' figures are another worker's */
  if (s->opt.data_handout) {
    joined_elastic(s, i, peer, session);
    return;
  }
  if (w->lost || w->abandoned) {
    LOG_INFO("worker %d '%s' rejoined from %s%s%s %.1f s after its slot was lost; it resumes at "
             "step %" PRIu64 " of its shard (version %" PRIu64 ")",
             i, w->name, peer, session[0] ? " over " : "", session,
             pst_now() - w->lost_at, ps_slot_position(s, i), s->core.store.version);
    if (w->abandoned) s->roster.abandoned--;
    w->lost = w->abandoned = 0;
    update_member(s, i, 1);
  } else {
    /* With TLS the line says what the session is: "over TLSv1.3 TLS_AES_256_GCM_SHA384, peer
     * CN=worker-3". */
    LOG_INFO("worker %d '%s' registered from %s%s%s (%d of %d)", i, w->name, peer,
             session[0] ? " over " : "", session, s->roster.registered, s->opt.workers);
  }
  if (!w->ever) s->roster.slots_seen++;
  w->ever = 1;
  /* Training is under way once every slot has had a worker (not necessarily all at once: one
   * may have been lost before the last registered). */
  if (!s->roster.started && s->roster.slots_seen == s->opt.workers) {
    s->roster.started = 1;
    s->events.began(s);
    LOG_INFO("all %d workers registered; training %s, %d epochs%s", s->opt.workers,
             pst_mode_name(s->opt.mode), s->opt.epochs, s->restored.resumed ? " (resumed)" : "");
  }
}

/* Whether slot i still owes (or may still send) its share of the evaluation of `epoch`: a
 * slot whose worker is gone is excused, so that a lost worker never holds up an epoch. */
static int owes_eval(const ps_server *s, int i, uint32_t epoch) {
  const ps_worker *w = &s->roster.workers[i];
  if (s->opt.evaluator) return 0; /* --eval-on ps: no worker owes one */
  return w->evals_done < epoch && (w->conn != NULL || !w->ever);
}

int ps_no_more_pushes(const ps_server *s) {
  if (s->opt.data_handout) return ps_data_finished(s) && ps_present_workers(&s->roster) == 0;
  /* Sync with backup workers: once the version is the job's last, no push can change the
   * weights (a late one is a backup worker's, dropped), whoever has not said BYE yet. Not
   * without backup workers: a worker that rejoined while two shards stood a step apart
   * (worker/register.c) still pushes once to the shard ahead after that shard's count of
   * steps is reached, and the final weights answered before it would differ from those
   * answered after (tests/shard_test.sh saw the two workers' final checksums differ); there
   * every slot finishes or is given up, and that ends it. */
  uint64_t total = job_steps(s);
  if (s->opt.mode == PST_MODE_SYNC && s->opt.backup_workers > 0 && total > 0 &&
      s->core.store.version >= total)
    return 1;
  return s->roster.finished + s->roster.abandoned == s->opt.workers;
}

/* --eval-on ps: whether every slot still training has trained through `epoch` (the last:
 * every slot finished or given up, the final weights fixed). */
static int epoch_trained(const ps_server *s, uint32_t epoch) {
  if (!s->facts.data_known || !s->roster.started) return 0;
  if (epoch >= (uint32_t)s->opt.epochs) return ps_no_more_pushes(s);
  if (s->opt.data_handout) return s->plan.data.complete >= epoch;
  uint64_t spe = (uint64_t)pst_steps_per_epoch((int)s->facts.train_n, s->opt.workers, s->opt.batch_size);
  for (int i = 0; i < s->opt.workers; i++) {
    const ps_worker *w = &s->roster.workers[i];
    if (!w->done && !w->abandoned && ps_slot_position(s, i) < (uint64_t)epoch * spe) return 0;
  }
  return 1;
}

static void on_ps_eval(void *arg, const ps_eval_result *r) {
  ps_server *s = arg;
  if (r->rc < 0) {
    /* Said, and the run goes on: its figures are only without that epoch's evaluation. */
    LOG_ERR("the ps's evaluation of epoch %u failed: %s", r->epoch, r->why);
  } else {
    /* Not taken out of the training time: the workers trained on meanwhile. */
    s->events.eval_share(s, r->epoch, r->version, r->loss_sum, r->correct, r->samples);
    if (s->events.eval_closed(s, r->epoch))
      LOG_INFO("epoch %u/%d: test loss %.4f accuracy %.4f (version %" PRIu64 ", evaluated by the "
               "ps over %" PRIu64 " samples in %.2f s)", r->epoch, s->opt.epochs,
               r->loss_sum / (double)r->samples, (double)r->correct / (double)r->samples,
               r->version, r->samples, r->seconds);
  }
  ps_check_progress(s);
}

/* --eval-on ps: the next epoch's evaluation, once its weights are there and none runs. */
static void ps_eval_epochs(ps_server *s) {
  const ps_eval_hook *ev = s->opt.evaluator;
  if (s->life.stopping || ev->busy(ev->ctx) || s->evals.ps_eval_epoch >= (uint32_t)s->opt.epochs) return;
  uint32_t e = s->evals.ps_eval_epoch + 1;
  if (s->obs.metrics.evals[e].complete) { /* a resumed ps's, from its checkpoint */
    s->evals.ps_eval_epoch = e;
    ps_eval_epochs(s);
    return;
  }
  if (!epoch_trained(s, e)) return;
  int rc = ev->start(ev->ctx, s->loop, pst_store_front(&s->core.store), e, s->core.store.version,
                     on_ps_eval, s);
  if (rc < 0) LOG_ERR("cannot evaluate epoch %u: %s", e, uv_strerror(rc));
  s->evals.ps_eval_epoch = e; /* tried: a failure is said once, not retried at every event */
}

/* Whether slot i could have reported its share of `epoch` by now: it has trained through
 * the epoch, and for the last one the final weights are out (every slot finished or given
 * up). 0 while the data's size is unknown. */
static int eval_possible(const ps_server *s, int i, uint32_t epoch) {
  if (!s->facts.data_known) return 0;
  uint64_t spe = (uint64_t)pst_steps_per_epoch((int)s->facts.train_n, s->opt.workers, s->opt.batch_size);
  if (ps_slot_position(s, i) < (uint64_t)epoch * spe) return 0;
  return epoch < (uint32_t)s->opt.epochs || ps_no_more_pushes(s);
}

/* The wait for a slot whose worker is connected and owes an evaluation the others have sent:
 * --eval-timeout (the worker timeout by default), or twice the longest the others' shares
 * took after they could be sent, when that is longer (a big model evaluated on a slow
 * device). A worker that trains its epoch and never reports (a lie, or a hang that still
 * sends heartbeats) thus holds up neither the epoch's figures nor the end of the run. */
static void eval_deadlines(ps_server *s, double now) {
  if (s->opt.evaluator) return; /* no worker owes an evaluation */
  double base = s->opt.eval_timeout > 0 ? s->opt.eval_timeout : s->opt.worker_timeout;
  for (int i = 0; i < s->opt.workers; i++) {
    ps_worker *w = &s->roster.workers[i];
    uint32_t e = w->evals_done + 1;
    if (!w->conn || e > (uint32_t)s->opt.epochs || !eval_possible(s, i, e)) continue;
    if (w->eval_due_epoch != e) {
      w->eval_due_epoch = e;
      w->eval_due_at = now;
      continue;
    }
    /* Only once some other slot's share is in: alone, nobody's figures wait on this one. */
    if (s->obs.metrics.evals[e].reports == 0) continue;
    double longest = 0;
    for (int j = 0; j < s->opt.workers; j++)
      if (j != i && s->roster.workers[j].evals_done >= e && s->roster.workers[j].eval_took > longest)
        longest = s->roster.workers[j].eval_took;
    double wait = 2 * longest > base ? 2 * longest : base;
    if (now - w->eval_due_at <= wait) continue;
    /* Excused; check_evals counts the share as missed when it evaluates the epoch. */
    w->evals_done = e;
    LOG_WARN("worker %d '%s' did not report its evaluation of epoch %u within %.1f s of "
             "training through it (--eval-timeout): the epoch is evaluated without its share",
             i, w->name, e, wait);
    ps_check_progress(s);
    if (s->life.stopping) return;
  }
}

/* The shares of epoch e's evaluation that are implausible against the workers': an accuracy
 * more than PS_FLAG_Z binomial standard errors and PS_FLAG_DIFF away from the median share's
 * accuracy, or a mean loss more than PS_FLAG_Z standard errors and PS_FLAG_LOSS_REL of it
 * away from the median share's mean loss. The median, not the others' pool: one liar among
 * three would pull the pool far enough to flag the honest too. Honest slices of one test set
 * differ by their content as well (2-3 standard errors were seen between two slices of
 * Fashion-MNIST's); a worker that reports a perfect score for weights that score 0.84 is
 * some twenty away. A mean loss has no binomial variance: its standard error is taken as
 * PS_LOSS_SD_PER_MEAN times the median mean loss over the root of the share's samples,
 * since a classifier's per-sample cross-entropy is heavy-tailed (most samples near 0, a few
 * large), with a standard deviation of one to two times its mean; and a share must also be
 * PS_FLAG_LOSS_REL off in proportion, which honest slices of a few thousand samples were not
 * (README, "Validated input"). Flagged shares are logged, counted, listed in the summary and
 * set aside: the epoch's figures are the other shares' (the summary gives the figure with
 * them beside), since which side is wrong the ps cannot prove, but the median is the
 * majority's (--eval-on ps is the answer that needs no trust). The largest honest deviations
 * are logged at each epoch, to keep the thresholds' margins in view. */
#define PS_FLAG_Z 6.0
#define PS_FLAG_DIFF 0.02
#define PS_LOSS_SD_PER_MEAN 2.0
#define PS_FLAG_LOSS_REL 0.25

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median_of(double *v, int n) {
  qsort(v, (size_t)n, sizeof v[0], cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Whether a share is implausible against the median share's accuracy med and mean loss
 * med_loss (the rule above); its accuracy's z, its loss's z and relative difference. */
static int implausible(const ps_eval_share *x, double med, double med_loss, double *z,
                       double *lz, double *rel) {
  double pi = (double)x->correct / (double)x->samples;
  double var = med * (1 - med) / (double)x->samples;
  double se = var > 0 ? sqrt(var) : 1.0 / (double)x->samples;
  *z = (pi - med) / se;
  double li = x->loss_sum / (double)x->samples;
  double lse = PS_LOSS_SD_PER_MEAN * med_loss / sqrt((double)x->samples);
  *lz = lse > 0 ? (li - med_loss) / lse : 0;
  *rel = med_loss > 0 ? fabs(li / med_loss - 1) : (li > 0 ? INFINITY : 0);
  return (fabs(*z) > PS_FLAG_Z && fabs(pi - med) > PS_FLAG_DIFF) ||
         (fabs(*lz) > PS_FLAG_Z && *rel > PS_FLAG_LOSS_REL);
}

static void flag_implausible(ps_server *s, uint32_t e) {
  static double acc[PST_WIRE_MAX_WORKERS], loss[PST_WIRE_MAX_WORKERS];
  int n = 0;
  for (int i = 0; i < s->opt.workers && n < PST_WIRE_MAX_WORKERS; i++) {
    const ps_eval_share *x = &s->roster.workers[i].eval_share[e % PS_EVAL_SHARES];
    if (x->epoch == e && x->samples > 0) {
      acc[n] = (double)x->correct / (double)x->samples;
      loss[n++] = x->loss_sum / (double)x->samples;
    }
  }
  if (n < 2) return;
  double med = median_of(acc, n), med_loss = median_of(loss, n);
  double z_max = 0, rel_max = 0, z, lz, rel;
  /* Shares are set aside only when some are kept (an even count's median can be far from
   * every share) and there are three or more (see below). */
  int bad = 0;
  for (int i = 0; i < s->opt.workers; i++) {
    const ps_eval_share *x = &s->roster.workers[i].eval_share[e % PS_EVAL_SHARES];
    if (x->epoch == e && x->samples > 0) bad += implausible(x, med, med_loss, &z, &lz, &rel);
  }
  for (int i = 0; i < s->opt.workers; i++) {
    ps_worker *w = &s->roster.workers[i];
    ps_eval_share *mine = &w->eval_share[e % PS_EVAL_SHARES];
    if (mine->epoch != e || mine->samples == 0 || mine->set_aside) continue;
    double pi = (double)mine->correct / (double)mine->samples;
    double li = mine->loss_sum / (double)mine->samples;
    if (!implausible(mine, med, med_loss, &z, &lz, &rel)) {
      if (fabs(z) > z_max) z_max = fabs(z);
      if (rel > rel_max) rel_max = rel;
      continue;
    }
    s->evals.evals_flagged++;
    /* With two shares the median is their mean and both are as far from it: flagged, and
     * kept, since nothing says which is the liar. */
    int aside = n >= 3 && bad < n;
    if (aside) {
      mine->set_aside = 1;
      s->events.eval_set_aside(s, e, mine->loss_sum, mine->correct, mine->samples);
    }
    LOG_WARN("worker %d '%s': its evaluation of epoch %u (accuracy %.4f, mean loss %.4f over "
             "%" PRIu64 " samples) is implausible against the workers' median share (accuracy "
             "%.4f, %.1f standard errors; loss %.4f, %.1f): flagged%s", i, w->name, e, pi, li,
             mine->samples, med, z, med_loss, lz,
             aside ? " and left out of the epoch's figures" : " (kept: no majority to go by)");
    if (s->evals.n_eval_flags < PS_EVAL_FLAGS)
      s->evals.eval_flags[s->evals.n_eval_flags++] =
          (pst_eval_flag){i, e, mine->correct, mine->samples, med, z, li, med_loss};
  }
  LOG_INFO("epoch %u: the shares kept are within %.1f standard errors of the median share's "
           "accuracy and %.1f%% of its mean loss", e, z_max, 100 * rel_max);
}

static void check_evals(ps_server *s) {
  for (uint32_t e = 1; e <= (uint32_t)s->opt.epochs; e++) {
    if (s->obs.metrics.evals[e].complete || s->obs.metrics.evals[e].reports == 0) continue;
    int waiting = 0;
    for (int i = 0; i < s->opt.workers && !waiting; i++) waiting = owes_eval(s, i, e);
    if (waiting) continue;
    /* Before the figures are final: flagged shares are left out of them. Run again should
     * the epoch not complete (no samples left), it sets nothing aside twice. */
    flag_implausible(s, e);
    if (!s->events.eval_closed(s, e)) continue;
    /* Every slot whose share is not in (its worker was lost, left, or did not report in
     * time) is named with the epoch and counted, here and only here, whatever excused it:
     * the summary's evaluations_missed is the shares the figures lack. Slots excused from
     * this evaluation do not owe it to a later replacement either. */
    for (int i = 0; i < s->opt.workers; i++) {
      ps_worker *w = &s->roster.workers[i];
      const ps_eval_share *x = &w->eval_share[e % PS_EVAL_SHARES];
      if (w->ever && !(x->epoch == e && x->samples > 0)) {
        w->evals_missed++;
        LOG_WARN("epoch %u/%d is evaluated without the share of worker %d '%s' (%s; %u "
                 "evaluations missed by its slot)", e, s->opt.epochs, i, w->name,
                 !w->conn ? "its worker was lost or left" : "not reported in time",
                 w->evals_missed);
      }
      if (w->evals_done < e) w->evals_done = e;
    }
    const pst_epoch_eval *ev = &s->obs.metrics.evals[e];
    LOG_INFO("epoch %u/%d: test loss %.4f accuracy %.4f (version %" PRIu64 "%s)", e,
             s->opt.epochs, ev->loss_sum / (double)ev->samples,
             (double)ev->correct / (double)ev->samples, ev->version,
             ev->reports < s->opt.workers
                 ? ", without the shares of workers that were lost or did not report in time"
                 : "");
    pst_notify_status("epoch %u/%d evaluated: test accuracy %.4f (version %" PRIu64 ")", e,
                      s->opt.epochs, s->obs.metrics.last_test_accuracy, s->core.store.version);
  }
}

/* ---- sync steps one worker holds open (ps/train/stepwatch.h) ---- */

/* Whether slot i owes an evaluation before its next step: an epoch's (it has trained
 * through one it has not reported), or a dense evaluation point's. */
static int owes_eval_now(const ps_server *s, int i) {
  if (s->opt.evaluator || !s->facts.data_known) return 0;
  const ps_worker *w = &s->roster.workers[i];
  uint32_t trained;
  if (s->opt.data_handout) {
    trained = s->plan.data.complete;
  } else {
    uint64_t spe = (uint64_t)pst_steps_per_epoch((int)s->facts.train_n, s->opt.workers, s->opt.batch_size);
    uint64_t e = spe ? ps_slot_position(s, i) / spe : 0;
    trained = e > (uint64_t)s->opt.epochs ? (uint32_t)s->opt.epochs : (uint32_t)e;
  }
  if (w->evals_done < trained) return 1;
  return s->opt.eval_every > 0 && s->core.store.version > 0 &&
         s->core.store.version % (uint64_t)s->opt.eval_every == 0;
}

void ps_step_opened(ps_server *s) {
  if (s->opt.mode != PST_MODE_SYNC || !s->roster.started || s->core.sw_version == s->core.store.version) return;
  uint64_t steps = s->core.sw_version == UINT64_MAX || s->core.store.version < s->core.sw_version
                       ? 0 : s->core.store.version - s->core.sw_version;
  uint64_t seen = s->core.sw_version; /* the version the watch saw open at the last kick */
  s->core.sw_version = s->core.store.version;
  double now = pst_now();
  for (int i = 0; i < s->opt.workers; i++) {
    ps_worker *w = &s->roster.workers[i];
    /* Steps published without a slot that is lost or given up skip its batches (with the
     * data handed out, its ranges went back to the pool instead): those of the versions
     * since the last kick that no whole push of it reached. A slot lost after its push of
     * the step in progress was in whole did take part in that step, however late the step
     * is published (the kill and the publication may come in either order). */
    if (!s->opt.data_handout && !w->done && !s->core.upd.member[i] && steps > 0) {
      uint64_t from = w->pushed_to > seen ? w->pushed_to : seen;
      if (s->core.store.version > from) w->skipped_steps += s->core.store.version - from;
    }
    if (w->conn && !w->done && s->core.upd.member[i]) pst_stepwatch_begin(&s->core.sw, i, now, owes_eval_now(s, i));
  }
}

void ps_step_begins(ps_server *s, int i) {
  if (s->opt.mode != PST_MODE_SYNC || i < 0 || i >= s->opt.workers) return;
  pst_stepwatch_begin(&s->core.sw, i, pst_now(), owes_eval_now(s, i));
}

void ps_step_pushed(ps_server *s, int i) { pst_stepwatch_end(&s->core.sw, i, pst_now()); }

/* A connected worker that keeps a sync step open past its bound (ps/train/stepwatch.h) is given
 * up like a stalled one: its connection closes, which is its loss, and the step goes on
 * with the others (or backup workers), or waits for a replacement (--on-worker-loss wait).
 * Only while someone else waits: a lone worker holds up nobody but itself. */
static void step_watch(ps_server *s, double now) {
  if (s->opt.mode != PST_MODE_SYNC || !s->roster.started || s->core.upd.members < 2) return;
  for (int i = 0; i < s->opt.workers && !s->life.stopping; i++) {
    ps_worker *w = &s->roster.workers[i];
    if (!w->conn || !ps_waits_for(s, i)) continue;
    /* Backup workers: the step waits for a slot's push only once it holds one of the step's
     * N-K places, or while places are still free; a surplus worker holds nothing up. */
    if (s->opt.backup_workers > 0 && s->core.upd.step_open && s->core.upd.slot_of[i] < 0 &&
        s->core.upd.slots_taken >= s->core.upd.needed)
      continue;
    char how[160], why[320];
    double held = pst_stepwatch_held(&s->core.sw, i, now);
    double bound = pst_stepwatch_bound(&s->core.sw, i, how, sizeof how);
    if (bound <= 0 || held <= bound) continue;
    snprintf(why, sizeof why, "it held step %" PRIu64 " open for %.1f s (the bound: %s)",
             s->core.store.version, held, how);
    LOG_WARN("worker %d '%s': %s; dropped as a stall", i, w->name, why);
    s->ops.drop(w->conn, why);
  }
}

/* ---- the end of the run ---- */

/* The samples of slot i never trained, now that the run is over (issue 43): sync, the
 * steps published without its share while it was lost or given up (with backup workers only
 * when some step had fewer shares than N-K: otherwise skipping the slowest is the design);
 * async and ssp, the pushes its shard still lacked when it was given up. */
static uint64_t untrained_steps(const ps_server *s, int i) {
  const ps_worker *w = &s->roster.workers[i];
  if (s->opt.data_handout || w->done) return 0;
  if (s->opt.mode == PST_MODE_SYNC)
    return s->opt.backup_workers > 0 && s->core.upd.partial_steps == 0 ? 0 : w->skipped_steps;
  uint64_t total = job_steps(s);
  return total > w->pushes ? total - w->pushes : 0;
}

/* Says which slots left samples untrained and how many (0: none). */
static uint64_t count_untrained(ps_server *s) {
  uint64_t all = 0;
  for (int i = 0; i < s->opt.workers; i++) {
    uint64_t steps = s->roster.workers[i].untrained_steps = untrained_steps(s, i);
    if (steps == 0) continue;
    uint64_t samples = steps * (uint64_t)s->opt.batch_size;
    all += samples;
    LOG_ERR("worker slot %d ('%s'): %" PRIu64 " steps of its shard (%" PRIu64 " samples) were "
            "never trained (%s)", i, s->roster.workers[i].name, steps, samples,
            s->roster.workers[i].abandoned ? "its worker was lost and not replaced in time"
                                    : "its worker was away while the others trained on");
  }
  s->roster.untrained_samples = all;
  return all;
}

void ps_check_progress(ps_server *s) {
  if (s->life.stopping) return;
  if (s->opt.evaluator) ps_eval_epochs(s);
  else check_evals(s);
  int present = 0, over = 0;
  if (s->opt.data_handout) {
    /* Over once every range is trained and every worker still there has said BYE. */
    if (!s->roster.started || !ps_no_more_pushes(s)) return;
    over = s->opt.workers;
  }
  for (int i = 0; i < s->opt.workers && !s->opt.data_handout; i++) {
    ps_worker *w = &s->roster.workers[i];
    if (w->conn && !w->done) present++;
    if (w->done || w->abandoned) over++;
  }
  /* Sync, going on without lost workers: once every worker still there has finished, a
   * replacement would find nothing left to train (its shard's position is the version), so
   * the lost slots are done with. */
  if (s->roster.started && !s->opt.data_handout && present == 0 && over < s->opt.workers &&
      s->opt.mode == PST_MODE_SYNC &&
      !s->opt.wait_on_loss && s->roster.finished > 0) {
    for (int i = 0; i < s->opt.workers; i++)
      if (s->roster.workers[i].lost) abandon(s, i, "every other worker has finished");
    over = s->roster.finished + s->roster.abandoned;
  }
  if (s->roster.abandoned == s->opt.workers && !s->opt.data_handout) {
    LOG_ERR("every worker slot was abandoned; training aborted at version %" PRIu64,
            s->core.store.version);
    s->ops.stop(s, "every worker was lost; training aborted", 1, PST_EXIT_FAILED);
    return;
  }
  if (over < s->opt.workers) return;
  /* Every slot is finished or given up: the final weights went out (ps/net/pull.c) and the run
   * is over once the last evaluation is in from every worker still connected. */
  for (int i = 0; i < s->opt.workers; i++)
    if (owes_eval(s, i, (uint32_t)s->opt.epochs)) return;
  /* --eval-on ps: the last epoch's evaluation is the ps's own, on the final weights. */
  if (s->opt.evaluator &&
      (s->opt.evaluator->busy(s->opt.evaluator->ctx) || s->evals.ps_eval_epoch < (uint32_t)s->opt.epochs))
    return;
  s->events.eval_closed(s, (uint32_t)s->opt.epochs);
  s->events.ended(s);
  if (!s->facts.data_known && s->core.store.version == 0 && !s->restored.resumed) {
    /* Every slot said BYE without a step, and nobody said what the data is: nothing was
     * trained, whatever the BYEs claim. */
    LOG_ERR("training ended without a single step: every worker said BYE before pushing a "
            "gradient, and none said what its data is; not a finished job");
    s->ops.stop(s, "every worker left before a step was trained", 1, PST_EXIT_INCOMPLETE);
    return;
  }
  if (count_untrained(s) > 0) {
    /* Not a finish: part of the data was never trained. The workers did their part (they
     * are told so, and exit 0); the ps says why and exits PST_EXIT_INCOMPLETE. */
    LOG_ERR("training ended at version %" PRIu64 " with %" PRIu64 " samples never trained "
            "(test accuracy %.4f): not a finished job", s->core.store.version, s->roster.untrained_samples,
            s->obs.metrics.last_test_accuracy);
    s->ops.stop(s, "training ended with part of the data never trained", 0,
                PST_EXIT_INCOMPLETE);
    return;
  }
  double wall = s->obs.metrics.train_end - s->obs.metrics.train_start;
  LOG_INFO("training complete: %d epochs, version %" PRIu64 ", test accuracy %.4f, %.0f samples/s"
           " over %.1f s, weights checksum %016" PRIx64 "%s",
           s->opt.epochs, s->core.store.version, s->obs.metrics.last_test_accuracy,
           wall > 0 ? (double)(s->obs.metrics.samples_trained - s->obs.metrics.samples_resumed) / wall
                    : 0.0,
           wall,
           pst_store_checksum(&s->core.store),
           s->roster.abandoned ? " (some worker slots were abandoned)" : "");
  s->ops.stop(s, "training complete", 0, 0);
}

static void on_watch(uv_timer_t *t) {
  ps_server *s = t->data;
  if (s->life.stopping) return;
  double now = pst_now();
  s->ops.watch(s, now);
  for (int i = 0; i < s->opt.workers && !s->life.stopping; i++) {
    ps_worker *w = &s->roster.workers[i];
    if (w->lost && now - w->lost_at > s->opt.rejoin_timeout) {
      char why[96];
      snprintf(why, sizeof why, "no replacement within --rejoin-timeout %g s", s->opt.rejoin_timeout);
      abandon(s, i, why);
      s->ops.kick(s);
    }
  }
  if (s->opt.data_handout && s->roster.started && s->roster.registered == 0 && s->roster.empty_since > 0 &&
      !ps_data_finished(s) && now - s->roster.empty_since > s->opt.rejoin_timeout) {
    LOG_ERR("no worker for %.0f s (--rejoin-timeout); training aborted at version %" PRIu64,
            now - s->roster.empty_since, s->core.store.version);
    s->ops.stop(s, "every worker left or was lost; training aborted", 1, PST_EXIT_FAILED);
    return;
  }
  if (!s->life.stopping) ps_step_opened(s);
  if (!s->life.stopping) step_watch(s, now);
  if (!s->life.stopping) eval_deadlines(s, now);
  if (!s->life.stopping) s->ops.admission_watch(s, now);
  if (!s->life.stopping) ps_ckpt_tick(s);
}

int ps_liveness_start(ps_server *s) {
  uv_timer_init(s->loop, &s->roster.watch_timer);
  s->roster.watch_timer.data = s;
  uint64_t ms = watch_period_ms(s);
  return uv_timer_start(&s->roster.watch_timer, on_watch, ms, ms);
}

void ps_liveness_stop(ps_server *s) { uv_close((uv_handle_t *)&s->roster.watch_timer, NULL); }
