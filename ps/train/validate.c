/* What the ps believes from a registered worker (issue 12): every message that would change
 * the model or its figures is checked, and a worker that keeps sending wrong ones is
 * disconnected. A rejected message changes nothing and is counted against its connection
 * (the strikes that disconnect it: a newcomer on a slot whose earlier holders were struck out
 * starts with none) and in its slot's total (the summary's "rejected_per_slot", and the
 * job's "rejected"); the run goes on.
 *   - gradient chunks: the right chunk of the right size (ps/server.c's on_payload), a version
 *     the ps has published (a newer one is a lie), finite values (ps/train/update.c);
 *   - evaluation reports: the worker's test slice exactly (common/shard.h), correct <= count,
 *     a finite loss, and only for an epoch its slot has trained through;
 *   - training reports: at most report_every batches, correct <= count, a finite loss;
 *   - registration: the same data as the other workers, with as many classes as the model. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "common/shard.h"
#include "ps/ps.h"


void ps_facts_fix(ps_facts *f, uint32_t train, uint32_t test, uint32_t classes) {
  f->data_known = f->data_fixed = 1;
  f->train_n = train;
  f->test_n = test;
  f->classes = classes;
}

void ps_facts_forget(ps_facts *f) {
  if (!f->data_fixed) f->data_known = 0;
}

int ps_check_hello(ps_server *s, const Pstrain__Hello *h, char *why, size_t whylen) {
  /* A worker given the shards in another order, or another number of them, would push
   * one part of its gradient into another part of the model. */
  uint32_t k = h->shard_count ? h->shard_count : 1;
  if (k != (uint32_t)s->opt.shard_count || h->shard_index != (uint32_t)s->opt.shard_index) {
    snprintf(why, whylen, "this ps is shard %d/%d, but the worker took it for shard %u/%u "
             "(give every worker all %d shards, in order)", s->opt.shard_index,
             s->opt.shard_count, h->shard_index, k, s->opt.shard_count);
    return -EINVAL;
  }
  /* A worker from before issue 27 (or one of a build without an encoding) would send float32
   * pushes and read encoded weights as floats: refused like a worker of another model. */
  uint32_t need = (s->opt.push_enc ? 1u << s->opt.push_enc : 0) |
                  (s->opt.pull_enc ? 1u << s->opt.pull_enc : 0);
  if ((h->encodings & need) != need) {
    snprintf(why, whylen, "this job pushes in %s and pulls in %s, which the worker does not know "
             "(a pstrain-worker from before compression; use one of the ps's version)",
             pst_enc_name(s->opt.push_enc), pst_enc_name(s->opt.pull_enc));
    return -EINVAL;
  }
  if (h->train_samples == 0 && h->test_samples == 0) return 0; /* no data facts: nothing to check */
  if ((int)h->classes > s->model->classes || h->classes == 0) {
    snprintf(why, whylen, "the worker's data has %u classes, but the model outputs %d", h->classes,
             s->model->classes);
    return -EINVAL;
  }
  if (!s->facts.data_known) {
    if (pst_steps_per_epoch((int)h->train_samples, s->opt.workers, s->opt.batch_size) < 1) {
      snprintf(why, whylen, "a shard of %u training samples over %d workers holds no full batch "
               "of %d", h->train_samples, s->opt.workers, s->opt.batch_size);
      return -EINVAL;
    }
    s->facts.data_known = 1;
    s->facts.data_pinned_at = s->core.store.version;
    s->facts.train_n = h->train_samples;
    s->facts.test_n = h->test_samples;
    s->facts.classes = h->classes;
    ps_plan_lr(s);
    return 0;
  }
  if (h->train_samples != s->facts.train_n || h->test_samples != s->facts.test_n || h->classes != s->facts.classes) {
    snprintf(why, whylen, "its data (%u training, %u test samples, %u classes) differs from %s "
             "(%u, %u, %u)", h->train_samples, h->test_samples, h->classes,
             s->facts.data_fixed ? "--data-facts" : "the other workers'", s->facts.train_n, s->facts.test_n,
             s->facts.classes);
    return -EINVAL;
  }
  return 0;
}

int ps_check_report(ps_server *s, int i, const Pstrain__Report *r, char *why, size_t whylen) {
  if (!(r->compute_seconds >= 0 && r->compute_seconds < 1e6)) {
    snprintf(why, whylen, "a report of %g compute seconds", r->compute_seconds);
    return -EINVAL;
  }
  /* The wait is part of the compute time (the worker times the step around it). */
  if (!(r->data_wait_seconds >= 0 && r->data_wait_seconds <= r->compute_seconds)) {
    snprintf(why, whylen, "a report of %g seconds of data wait in %g compute seconds",
             r->data_wait_seconds, r->compute_seconds);
    return -EINVAL;
  }
  if (r->weights_version > s->core.store.version) {
    snprintf(why, whylen, "an evaluation of version %" PRIu64 ", newer than the ps's %" PRIu64,
             r->weights_version, s->core.store.version);
    return -EINVAL;
  }
  if (!isfinite(r->loss_sum) || r->loss_sum < 0 || r->correct > r->samples) {
    snprintf(why, whylen, "a report with loss sum %g and %" PRIu64 " of %" PRIu64 " correct",
             r->loss_sum, r->correct, r->samples);
    return -EINVAL;
  }
  if (r->epoch < 1 || r->epoch > (uint32_t)s->opt.epochs) {
    snprintf(why, whylen, "a report for epoch %u of %d", r->epoch, s->opt.epochs);
    return -EINVAL;
  }
  if (!r->is_eval) {
    uint64_t most = (uint64_t)s->opt.report_every * (uint64_t)s->opt.batch_size;
    if (r->samples > most) {
      snprintf(why, whylen, "a training report of %" PRIu64 " samples (at most %" PRIu64 ")",
               r->samples, most);
      return -EINVAL;
    }
    return 0;
  }
  if (r->subset_point) {
    /* A dense evaluation: the worker's part of the subset, at one of its own steps. */
    if (s->opt.eval_every <= 0) {
      snprintf(why, whylen, "a subset evaluation, but --eval-every is off");
      return -EINVAL;
    }
    /* Shard 0 asks for the points; the other shards cannot tell which were asked. */
    if (s->opt.shard_index == 0 && r->subset_point > s->roster.workers[i].subset_asked) {
      snprintf(why, whylen, "a subset evaluation of point %u, not asked for (%u was)",
               r->subset_point, s->roster.workers[i].subset_asked);
      return -EINVAL;
    }
    if (!s->facts.data_known) return 0;
    int n = s->opt.eval_samples < (int)s->facts.test_n ? s->opt.eval_samples : (int)s->facts.test_n, b, e;
    pst_data_shard_range(n, i, s->opt.workers, &b, &e);
    if (r->samples != (uint64_t)(e - b)) {
      snprintf(why, whylen, "a subset evaluation of %" PRIu64 " samples; its part has %d",
               r->samples, e - b);
      return -EINVAL;
    }
    return 0;
  }
  if (s->opt.evaluator) {
    snprintf(why, whylen, "an evaluation report, but the ps evaluates the epochs itself "
             "(--eval-on ps)");
    return -EINVAL;
  }
  if (!s->facts.data_known) return 0;
  int b, e;
  pst_data_shard_range((int)s->facts.test_n, i, s->opt.workers, &b, &e);
  if (r->samples != (uint64_t)(e - b)) {
    snprintf(why, whylen, "an evaluation of %" PRIu64 " samples; its test slice has %d",
             r->samples, e - b);
    return -EINVAL;
  }
  uint64_t spe = (uint64_t)pst_steps_per_epoch((int)s->facts.train_n, s->opt.workers, s->opt.batch_size);
  if (ps_slot_position(s, i) < (uint64_t)r->epoch * spe) {
    snprintf(why, whylen, "an evaluation of epoch %u before training through it (step %" PRIu64
             " of %" PRIu64 ")", r->epoch, ps_slot_position(s, i), (uint64_t)r->epoch * spe);
    return -EINVAL;
  }
  return 0;
}
