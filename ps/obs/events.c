/* Observability told of the training core's and durable state's events (ps_obs_events,
 * ps/ps.h): each is recorded in the metrics (ps/obs/metrics.h), which write the metrics file
 * and TensorBoard and hold the figures /metrics, STATUS and the summary show. ps_server_start
 * wires these in; nothing else calls them. */
#include "ps/obs/obs.h"

#include "common/prom.h"
#include "ps/ps.h"

static void on_workers(ps_server *s, const char *why, int worker, int present, uint64_t join_at) {
  pst_metrics_workers(&s->obs.metrics, present, s->core.store.version, why, worker, join_at);
}

static void on_began(ps_server *s) { pst_metrics_mark_start(&s->obs.metrics); }

static void on_ended(ps_server *s) { pst_metrics_mark_end(&s->obs.metrics); }

static void on_range(ps_server *s, const char *what, int worker, uint64_t version,
                     const pst_range *r) {
  pst_metrics_range(&s->obs.metrics, what, worker, version, r->epoch, r->start, r->count);
}

static void on_data_epoch(ps_server *s, uint32_t epoch) {
  pst_metrics_data_epoch(&s->obs.metrics, epoch, s->core.store.version, s->plan.data.samples,
                         s->plan.data.epochs);
}

static void on_eval_share(ps_server *s, uint32_t epoch, uint64_t version, double loss_sum,
                          uint64_t correct, uint64_t samples) {
  pst_metrics_eval(&s->obs.metrics, epoch, version, loss_sum, correct, samples);
}

static void on_eval_set_aside(ps_server *s, uint32_t epoch, double loss_sum, uint64_t correct,
                              uint64_t samples) {
  pst_metrics_eval_set_aside(&s->obs.metrics, epoch, loss_sum, correct, samples);
}

static int on_eval_closed(ps_server *s, uint32_t epoch) {
  return pst_metrics_eval_complete(&s->obs.metrics, epoch);
}

static void on_published(ps_server *s) {
  pst_metrics_step(&s->obs.metrics); /* the step-time histogram */
  s->obs.metrics.lr = pst_prom_float(ps_lr_now(s)); /* TensorBoard's, under --lr-schedule */
}

static void on_trained(ps_server *s, int worker, const Pstrain__Report *r, uint64_t staleness) {
  pst_metrics_train(&s->obs.metrics, worker, r->epoch, r->step, s->core.store.version, staleness,
                    r->loss_sum, r->correct, r->samples, r->data_wait_seconds);
}

static void on_eval_time(ps_server *s, double seconds) {
  pst_metrics_eval_time(&s->obs.metrics, seconds);
}

static void on_subset_share(ps_server *s, int worker, const Pstrain__Report *r) {
  pst_metrics_subset(&s->obs.metrics, worker, r->subset_point, r->weights_version, r->epoch,
                     r->loss_sum, r->correct, r->samples);
}

static void on_applied(ps_server *s, uint64_t staleness, double seconds) {
  pst_metrics_applied(&s->obs.metrics, staleness, seconds);
}

static void on_pulled(ps_server *s, double seconds) { pst_metrics_pulled(&s->obs.metrics, seconds); }

static void on_round_trip(ps_server *s, double exposed, double queued, double sum,
                          double optimizer, double sending) {
  pst_metrics_round_trip(&s->obs.metrics, exposed, queued, sum, optimizer, sending);
}

static void on_subset_asked(ps_server *s, uint32_t point) {
  pst_metrics_subset_asked(&s->obs.metrics, point);
}

const ps_obs_events ps_obs_event_handlers = {
    .workers = on_workers,
    .began = on_began,
    .ended = on_ended,
    .range = on_range,
    .data_epoch = on_data_epoch,
    .eval_share = on_eval_share,
    .eval_set_aside = on_eval_set_aside,
    .eval_closed = on_eval_closed,
    .published = on_published,
    .trained = on_trained,
    .eval_time = on_eval_time,
    .subset_share = on_subset_share,
    .applied = on_applied,
    .pulled = on_pulled,
    .round_trip = on_round_trip,
    .subset_asked = on_subset_asked,
};
