#include "ps/obs/obs.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/codec.h"
#include "common/log.h"
#include "proto/wire.h"
#include "common/shard.h"
#include "ps/state/checkpointing.h"
#include "ps/net/conn.h"

/* Figures derived from the ps's state, the same for /metrics and STATUS. */
typedef struct {
  double wall;      /* seconds since training started (to its end, once ended) */
  double sps;       /* samples per second over that time: the summary's figure */
  double progress;  /* share of the job's steps done, 0..1 */
  double eta;       /* seconds left at the speed so far; -1 while unknown */
  int epoch;        /* the epoch in progress, 1-based */
} ps_figures;

static void figures(const ps_server *s, ps_figures *f) {
  const pst_metrics *m = &s->obs.metrics;
  double end = m->train_end > 0 ? m->train_end : pst_now();
  f->wall = m->train_start > 0 ? end - m->train_start : 0;
  f->sps = f->wall > 0 ? (double)(m->samples_trained - m->samples_resumed) / f->wall : 0;
  f->epoch = m->last_epoch < s->opt.epochs ? m->last_epoch + 1 : s->opt.epochs;
  /* Steps: sync counts versions (every worker takes each); async and ssp count gradients. */
  f->progress = 0;
  f->eta = -1;
  if (!s->facts.data_known) return;
  double spe = pst_steps_per_epoch((int)s->facts.train_n, s->opt.workers, s->opt.batch_size);
  int sync = s->opt.mode == PST_MODE_SYNC;
  double total = spe * s->opt.epochs * (sync ? 1 : s->opt.workers);
  double done = sync ? (double)s->core.store.version : (double)(s->core.upd.pushes + s->core.upd.dropped);
  double at_start = sync ? (double)s->restored.resumed_from : 0;
  if (total <= 0) return;
  f->progress = done >= total ? 1 : done / total;
  if (done > at_start && f->wall > 0)
    f->eta = done >= total ? 0 : (total - done) * f->wall / (done - at_start);
}

/* The slowest active slot's position: what a worker's lead is measured from. */
static uint64_t slowest_position(const ps_server *s) {
  uint64_t min = UINT64_MAX;
  for (int i = 0; i < s->opt.workers; i++) {
    const ps_worker *w = &s->roster.workers[i];
    if (w->done || w->abandoned || !w->ever) continue;
    uint64_t p = ps_slot_position(s, i);
    if (p < min) min = p;
  }
  return min == UINT64_MAX ? 0 : min;
}

/* One labelled sample per worker slot of a per-worker figure. */
typedef double (*worker_value_fn)(const ps_server *s, int i, int *skip);

static void per_worker(pst_text *t, const ps_server *s, const char *name, pst_prom_type type,
                       const char *help, worker_value_fn fn) {
  pst_prom_family(t, name, type, help);
  for (int i = 0; i < s->opt.workers; i++) {
    int skip = 0;
    double v = fn(s, i, &skip);
    if (skip) continue;
    char label[32];
    snprintf(label, sizeof label, "worker=\"%d\"", i);
    pst_prom_sample(t, name, label, v);
  }
}

static double w_connected(const ps_server *s, int i, int *skip) {
  return s->roster.workers[i].conn != NULL;
}
static double w_done(const ps_server *s, int i, int *skip) { return s->roster.workers[i].done != 0; }
static double w_applied(const ps_server *s, int i, int *skip) {
  return (double)s->roster.workers[i].pushes;
}
static double w_dropped(const ps_server *s, int i, int *skip) {
  return (double)s->roster.workers[i].dropped;
}
static double w_version(const ps_server *s, int i, int *skip) {
  return (double)s->roster.workers[i].last_version;
}
static double w_staleness(const ps_server *s, int i, int *skip) {
  return (double)s->roster.workers[i].last_staleness;
}
static double w_lead(const ps_server *s, int i, int *skip) {
  const ps_worker *w = &s->roster.workers[i];
  if (!w->ever) {
    *skip = 1;
    return 0;
  }
  uint64_t p = ps_slot_position(s, i), min = slowest_position(s);
  return p > min ? (double)(p - min) : 0;
}
/* Seconds since the slot's worker was last heard from: its connection's last bytes, or
 * when it was lost; nothing for a slot no worker ever held. */
static double w_last_seen(const ps_server *s, int i, int *skip) {
  const ps_worker *w = &s->roster.workers[i];
  double now = pst_now();
  if (w->conn) return now - w->conn->last_rx;
  if (w->lost && w->lost_at > 0) return now - w->lost_at;
  *skip = 1;
  return 0;
}

void ps_obs_render(const void *arg, pst_text *t) {
  const ps_server *s = arg;
  const pst_metrics *m = &s->obs.metrics;
  const pst_update *u = &s->core.upd;
  char l1[160], l2[160], l3[300], labels[700];

  snprintf(labels, sizeof labels, "role=\"ps\",wire_version=\"%d\"", PST_WIRE_VERSION);
  pst_prom_family(t, "pstrain_build_info", PST_PROM_GAUGE,
                  "Always 1: the daemon's role and wire protocol version.");
  pst_prom_sample(t, "pstrain_build_info", labels, 1);
  snprintf(labels, sizeof labels, "%s,%s,%s",
           pst_prom_label(l1, sizeof l1, "optimizer", pst_opt_kind_name(s->opt.opt.kind)),
           pst_prom_label(l2, sizeof l2, "mode", pst_mode_name(s->opt.mode)),
           pst_prom_label(l3, sizeof l3, "model", s->opt.model_name ? s->opt.model_name : ""));
  pst_prom_family(t, "pstrain_optimizer_info", PST_PROM_GAUGE,
                  "Always 1: the optimizer, update mode and model of the job.");
  pst_prom_sample(t, "pstrain_optimizer_info", labels, 1);
  pst_prom_gauge(t, "pstrain_learning_rate", "The newest step's learning rate (--lr, under --lr-schedule its share of it).",
                 pst_prom_float(ps_lr_now(s)));
  pst_prom_gauge(t, "pstrain_batch_size", "Samples per worker per step.", s->opt.batch_size);

  pst_prom_gauge(t, "pstrain_model_version", "Version of the weights (steps applied).",
                 (double)s->core.store.version);
  pst_prom_counter(t, "pstrain_steps_total", "Versions published (optimizer steps).",
                   (double)s->core.store.version);
  pst_prom_counter(t, "pstrain_gradients_applied_total", "Gradients applied whole.",
                   (double)u->pushes);
  pst_prom_counter(t, "pstrain_gradients_dropped_total",
                   "Gradients read and dropped (late, stale, or backup workers').",
                   (double)u->dropped);
  pst_prom_counter(t, "pstrain_messages_rejected_total",
                   "Gradients or reports refused as invalid.", (double)s->net->rejected);
  pst_prom_counter(t, "pstrain_unsafe_updates_total",
                   "Chunks whose update would have made the weights or the optimizer's state "
                   "non-finite, kept as they were.",
                   (double)u->unsafe_chunks);
  pst_prom_counter(t, "pstrain_status_requests_dropped_total",
                   "STATUS_REQs past a connection's rate, dropped.", (double)s->net->status_dropped);
  /* Every frame by its type and what ps/net/rules.h made of it in its connection's phase. */
  pst_prom_family(t, "pstrain_frames_total", PST_PROM_COUNTER,
                  "Frames read, by message type and the action the connection's phase gave "
                  "them (handle, strike, close, ignore).");
  for (int ty = 0; ty < PS_RULE_TYPES; ty++)
    for (int a = 0; a <= PS_ACT_IGNORE; a++) {
      if (!s->net->frames[ty][a]) continue;
      char name[16], labels[96];
      snprintf(labels, sizeof labels, "type=\"%s\",action=\"%s\"",
               ps_msg_name(ty, name, sizeof name), ps_action_name((ps_action)a));
      pst_prom_sample(t, "pstrain_frames_total", labels, (double)s->net->frames[ty][a]);
    }
  uint64_t missed = 0;
  for (int i = 0; i < s->opt.workers; i++) missed += s->roster.workers[i].evals_missed;
  pst_prom_counter(t, "pstrain_evaluations_flagged_total",
                   "Evaluation shares implausible against the other workers' (flagged).",
                   (double)s->evals.evals_flagged);
  pst_prom_counter(t, "pstrain_evaluations_missed_total",
                   "Evaluation shares a connected worker did not report within --eval-timeout.",
                   (double)missed);
  pst_prom_counter(t, "pstrain_partial_steps_total",
                   "Sync steps applied without some lost worker's share.",
                   (double)u->partial_steps);
  pst_prom_counter(t, "pstrain_received_bytes_total",
                   "Bytes read on the training port (after TLS).", (double)s->net->bytes_in);
  pst_prom_counter(t, "pstrain_sent_bytes_total",
                   "Bytes queued on the training port (before TLS).", (double)s->net->bytes_out);
  pst_prom_counter(t, "pstrain_shm_received_bytes_total",
                   "Payload bytes read from workers' shared memory (workers on this host).",
                   (double)s->net->shm_in);
  pst_prom_counter(t, "pstrain_shm_sent_bytes_total",
                   "Payload bytes put into shared memory for workers on this host.",
                   (double)s->net->shm_out);
  pst_prom_hist(t, "pstrain_gradient_staleness", "Versions a gradient was behind when applied.",
                &m->staleness);
  pst_prom_hist(t, "pstrain_step_seconds", "Seconds between consecutive versions.",
                &m->step_seconds);
  pst_prom_hist(t, "pstrain_push_seconds",
                "Seconds from a gradient's first chunk to its last being taken.",
                &m->push_seconds);
  pst_prom_hist(t, "pstrain_pull_seconds",
                "Seconds from a PULL to its reply's last chunk written (waits included).",
                &m->pull_seconds);
  pst_prom_gauge(t, "pstrain_max_lead", "ssp: the largest lead an answered pull had.",
                 (double)s->core.max_lead);
  pst_prom_counter(t, "pstrain_round_trip_steps_total",
                   "Worker steps whose round trip was measured (both sides' figures met).",
                   (double)m->round_trip[PST_RT_EXPOSED].n);
  pst_prom_family(t, "pstrain_round_trip_seconds", PST_PROM_GAUGE,
                  "A worker step's exposed wait (its push's last byte out to its next weights' "
                  "first byte in) and its parts, quantiles over the steps: wire, queued in the "
                  "ps, summing, the optimizer, sending.");
  for (int i = 0; i < PST_RT_PARTS; i++)
    for (int k = 0; k < 2; k++) {
      char labels[96];
      snprintf(labels, sizeof labels, "part=\"%s\",quantile=\"%s\"", pst_rt_part_names[i],
               k ? "0.99" : "0.5");
      pst_prom_sample(t, "pstrain_round_trip_seconds", labels,
                      pst_quant_value(&m->round_trip[i], k ? 0.99 : 0.5));
    }

  pst_prom_gauge(t, "pstrain_workers", "Workers the job trains with (N).", s->opt.workers);
  pst_prom_gauge(t, "pstrain_workers_registered", "Slots a worker holds now.", s->roster.registered);
  pst_prom_gauge(t, "pstrain_workers_finished", "Slots whose worker said BYE.", s->roster.finished);
  pst_prom_counter(t, "pstrain_worker_losses_total", "Times a worker was lost.", s->roster.losses);
  if (s->opt.data_handout) {
    /* An elastic job (issue 28): who trains now, who left, and how far the handout is. */
    pst_prom_gauge(t, "pstrain_workers_min", "Workers the job starts with and trains on (MIN).",
                   s->opt.workers_min);
    pst_prom_gauge(t, "pstrain_workers_training", "Workers connected and not finished.",
                   ps_present_workers(&s->roster));
    pst_prom_counter(t, "pstrain_worker_departures_total", "Workers that left on purpose.",
                     (uint64_t)s->roster.departures);
    pst_prom_counter(t, "pstrain_data_ranges_handed_total", "Ranges of samples handed out.",
                     s->plan.data.handed);
    pst_prom_counter(t, "pstrain_data_ranges_returned_total",
                     "Ranges that came back untrained (their worker left or was lost).",
                     s->plan.data.returned);
    pst_prom_gauge(t, "pstrain_data_epochs_complete", "Epochs with every sample trained.",
                   s->plan.data.complete);
  }
  per_worker(t, s, "pstrain_worker_connected", PST_PROM_GAUGE,
             "1 while a worker holds the slot.", w_connected);
  per_worker(t, s, "pstrain_worker_done", PST_PROM_GAUGE, "1 once the slot's worker said BYE.",
             w_done);
  per_worker(t, s, "pstrain_worker_last_seen_age_seconds", PST_PROM_GAUGE,
             "Seconds since the slot's worker was last heard from.", w_last_seen);
  per_worker(t, s, "pstrain_worker_lead", PST_PROM_GAUGE,
             "Steps the slot is ahead of the slowest active slot.", w_lead);
  per_worker(t, s, "pstrain_worker_gradients_applied_total", PST_PROM_COUNTER,
             "The slot's gradients applied.", w_applied);
  per_worker(t, s, "pstrain_worker_gradients_dropped_total", PST_PROM_COUNTER,
             "The slot's gradients dropped.", w_dropped);
  per_worker(t, s, "pstrain_worker_last_version", PST_PROM_GAUGE,
             "Version the slot's last gradient was computed on.", w_version);
  per_worker(t, s, "pstrain_worker_staleness", PST_PROM_GAUGE,
             "Staleness of the slot's last applied gradient.", w_staleness);

  ps_figures f;
  figures(s, &f);
  pst_prom_gauge(t, "pstrain_epochs", "Passes over the training set the job makes.",
                 s->opt.epochs);
  pst_prom_gauge(t, "pstrain_epoch", "The epoch in progress (1-based).", f.epoch);
  pst_prom_gauge(t, "pstrain_epochs_evaluated", "Epochs whose test evaluation is complete.",
                 m->last_epoch);
  pst_prom_gauge(t, "pstrain_train_loss", "Training loss of the newest worker report.",
                 m->last_train_loss);
  pst_prom_gauge(t, "pstrain_train_accuracy", "Training accuracy of the newest worker report.",
                 m->last_train_accuracy);
  pst_prom_gauge(t, "pstrain_test_loss", "Test loss after the newest evaluated epoch.",
                 m->last_test_loss);
  pst_prom_gauge(t, "pstrain_test_accuracy", "Test accuracy after the newest evaluated epoch.",
                 m->last_test_accuracy);
  pst_prom_counter(t, "pstrain_samples_trained_total", "Training samples the workers reported.",
                   (double)m->samples_trained);
  pst_prom_counter(t, "pstrain_data_wait_seconds_total",
                   "Seconds the workers' training steps waited for their batches (summed over "
                   "the workers; their prefetch threads hide the rest of the data work).",
                   m->data_wait);
  pst_prom_gauge(t, "pstrain_samples_per_second",
                 "Training samples per second since training started (the summary's figure).",
                 f.sps);
  pst_prom_gauge(t, "pstrain_training_seconds", "Seconds since every slot had a worker.", f.wall);
  pst_prom_gauge(t, "pstrain_progress_ratio", "Share of the job's steps done (0 to 1).",
                 f.progress);
  pst_prom_gauge(t, "pstrain_eta_seconds", "Seconds left at the speed so far (-1: unknown).",
                 f.eta);

  pst_prom_gauge(t, "pstrain_open_connections", "Open connections on the training port.",
                 s->net->n_conns);
}

/* The front buffer of a version never changes once published, so its checksum is computed
 * once per version (a pass over every weight: 1 ms for the mlp, more with the model). */
static uint64_t weights_checksum(ps_server *s) {
  if (!s->obs.status_ck_valid || s->obs.status_ck_version != s->core.store.version) {
    s->obs.status_ck = pst_store_checksum(&s->core.store);
    s->obs.status_ck_version = s->core.store.version;
    s->obs.status_ck_valid = 1;
  }
  return s->obs.status_ck;
}

void ps_obs_status(ps_server *s, ps_status_msg *m) {
  const pst_metrics *mt = &s->obs.metrics;
  Pstrain__Status *st = &m->st;
  pstrain__status__init(st);
  ps_figures f;
  figures(s, &f);
  st->version = s->core.store.version;
  st->mode = (Pstrain__Mode)s->opt.mode;
  st->world_size = (uint32_t)s->opt.workers;
  st->registered = (uint32_t)s->roster.registered;
  st->max_staleness = s->core.upd.staleness_max;
  st->mean_staleness =
      s->core.upd.pushes ? (double)s->core.upd.staleness_sum / (double)s->core.upd.pushes : 0;
  st->weights_checksum = weights_checksum(s);
  st->dropped_gradients = s->core.upd.dropped;
  st->max_lead = s->core.max_lead;
  st->finished = (uint32_t)s->roster.finished;
  st->epochs = (uint32_t)s->opt.epochs;
  st->epochs_evaluated = (uint32_t)mt->last_epoch;
  st->test_accuracy = mt->last_test_accuracy;
  st->test_loss = mt->last_test_loss;
  st->train_loss = mt->last_train_loss;
  st->samples_trained = mt->samples_trained;
  st->samples_per_sec = f.sps;
  st->training_seconds = f.wall;
  st->progress = f.progress;
  st->eta_seconds = f.eta;
  st->optimizer = (char *)pst_opt_kind_name(s->opt.opt.kind);
  st->learning_rate = pst_prom_float(ps_lr_now(s));
  st->gradients_applied = s->core.upd.pushes;
  size_t n = s->opt.workers < PS_STATUS_MAX_WORKERS ? (size_t)s->opt.workers
                                                    : PS_STATUS_MAX_WORKERS;
  for (size_t i = 0; i < n; i++) {
    const ps_worker *w = &s->roster.workers[i];
    Pstrain__WorkerStatus *ws = &m->ws[i];
    pstrain__worker_status__init(ws);
    ws->index = (uint32_t)i;
    ws->name = (char *)w->name;
    ws->last_version = w->last_version;
    ws->staleness = w->last_staleness;
    ws->pushes = w->pushes;
    ws->done = w->done != 0;
    ws->dropped = w->dropped;
    ws->connected = w->conn != NULL;
    ws->abandoned = w->abandoned != 0;
    ws->losses = w->losses;
    ws->epoch = w->epoch;
    ws->waited_for = ps_waits_for(s, (int)i) != 0;
    int skip = 0;
    ws->lead = (uint64_t)w_lead(s, (int)i, &skip);
    skip = 0;
    double seen = w_last_seen(s, (int)i, &skip);
    ws->last_seen_seconds = skip ? -1 : seen;
    m->wp[i] = ws;
  }
  st->n_workers = n;
  st->workers = m->wp;
}

static void format_eta(double s, char *buf, size_t len) {
  if (s < 0) snprintf(buf, len, "unknown");
  else if (s < 120) snprintf(buf, len, "%.0fs", s);
  else if (s < 7200) snprintf(buf, len, "%ldm%02lds", (long)s / 60, (long)s % 60);
  else snprintf(buf, len, "%.1fh", s / 3600);
}

size_t ps_obs_status_line(const ps_server *s, char *buf, size_t len) {
  if (len == 0) return 0;
  buf[0] = '\0';
  if (s->obs.metrics.train_start == 0)
    return (size_t)snprintf(buf, len, "listening on %s:%d, waiting for workers: %d of %d registered",
                            s->opt.listen_host, s->opt.listen_port, s->roster.registered,
                            s->opt.workers);
  ps_figures f;
  figures(s, &f);
  char eta[32];
  format_eta(f.eta, eta, sizeof eta);
  int lost = 0;
  for (int i = 0; i < s->opt.workers; i++) {
    const ps_worker *w = &s->roster.workers[i];
    lost += w->lost && !w->abandoned && !w->done;
  }
  size_t n = (size_t)snprintf(buf, len, "training: epoch %d/%d, version %" PRIu64 ", %d/%d workers",
                              f.epoch, s->opt.epochs, s->core.store.version,
                              s->roster.registered - s->roster.finished, s->opt.workers);
#define LINE_ADD(...) \
  if (n < len) n += (size_t)snprintf(buf + n, len - n, __VA_ARGS__)
  if (lost) LINE_ADD(" (%d lost)", lost);
  if (s->roster.abandoned) LINE_ADD(" (%d abandoned)", s->roster.abandoned);
  LINE_ADD(", %.0f%% done, ETA %s, %.0f samples/s", f.progress * 100, eta, f.sps);
  if (s->obs.metrics.last_epoch > 0)
    LINE_ADD(", epoch %d/%d evaluated: test accuracy %.4f", s->obs.metrics.last_epoch,
             s->opt.epochs, s->obs.metrics.last_test_accuracy);
#undef LINE_ADD
  return n < len ? n : len - 1;
}

void ps_obs_heartbeat_line(void *arg, char *buf, size_t len) {
  const ps_server *s = arg;
  /* Once stopping, the ps's own final line (finished, aborted, stopped) stays. */
  if (s->life.stopping) return;
  ps_obs_status_line(s, buf, len);
}

/* The end of a run: the last checkpoint (written on the threadpool: the loop ends after
 * it), the summary and the metrics file's last word. */
static void write_report(ps_server *s);

void ps_obs_stop_report(ps_server *s, const char *reason, int failed) {
  snprintf(s->obs.end_reason, sizeof s->obs.end_reason, "%s", reason ? reason : "");
  s->obs.end_failed = failed;
  /* The summary names the final checkpoint only once it exists: it waits for the write. */
  if (ps_ckpt_final(s, reason, write_report) == 0) write_report(s);
}

static void write_report(ps_server *s) {
  const char *reason = s->obs.end_reason;
  /* A final checkpoint that was not written fails the run: its newest state is nowhere on
   * disk, and a ps started again would train again from an older one. A run that failed
   * already keeps its own status. */
  const char *ckpt_err = ps_ckpt_final_error(s);
  int failed = s->obs.end_failed || ckpt_err != NULL;
  s->obs.ckpt_failed = ckpt_err != NULL;
  int lost = 0;
  uint64_t missed = 0;
  uint32_t *per_slot = calloc((size_t)s->opt.workers, sizeof *per_slot);
  for (int i = 0; i < s->opt.workers; i++) {
    lost += s->roster.workers[i].losses;
    missed += s->roster.workers[i].evals_missed;
    if (per_slot) per_slot[i] = s->roster.workers[i].rejected_total;
  }
  /* The whole model's checksum: this ps's own when it holds every parameter, else the one
   * the workers' evaluations of the last epoch reported (ps/net/messages.c), when they agree. */
  uint64_t own = pst_store_checksum(&s->core.store);
  int whole = s->opt.shard_count <= 1;
  int reported = s->evals.model_sums > 0 && !s->evals.model_sums_differ;
  if (whole && reported && s->evals.model_sum != own)
    LOG_WARN("the workers evaluated final weights with checksum %016" PRIx64 ", but this ps "
             "holds weights with checksum %016" PRIx64, s->evals.model_sum, own);
  uint64_t *untrained = calloc((size_t)s->opt.workers, sizeof *untrained);
  for (int i = 0; untrained && i < s->opt.workers; i++) untrained[i] = s->roster.workers[i].untrained_steps;
  if (s->core.upd.norm_factor > 0)
    LOG_INFO("gradient norms: largest accepted %.3g times the running median (--grad-norm-factor "
             "%g), largest RMS in the warm-up %.3g (bound %g); %" PRIu64 " pushes rejected",
             s->core.upd.norm_ratio_max, s->core.upd.norm_factor, s->core.upd.warm_rms_max, PST_NORM_WARMUP_RMS,
             s->core.upd.norm_rejected);
  pst_run_summary sum = {
      .mode = pst_mode_name(s->opt.mode),
      .model = s->opt.model_name,
      .optimizer = pst_opt_kind_name(s->opt.opt.kind),
      .batch = s->opt.batch_size,
      .staleness_lr = s->opt.staleness_lr,
      .lr_schedule = pst_lr_schedule_name(s->opt.lr_schedule),
      .lr_linear = s->opt.lr_linear,
      .lr_last = ps_lr_now(s),
      .version = s->core.store.version,
      .checksum = whole ? own : s->evals.model_sum,
      .checksum_from = whole ? "ps" : reported ? "workers" : NULL,
      .shard_index = whole ? 0 : s->opt.shard_index,
      .shard_count = whole ? 1 : s->opt.shard_count,
      .shard_checksum = own,
      .mean_staleness =
          s->core.upd.pushes ? (double)s->core.upd.staleness_sum / (double)s->core.upd.pushes : 0,
      .max_staleness = s->core.upd.staleness_max,
      .applied = s->core.upd.pushes,
      .dropped = s->core.upd.dropped,
      .max_lead = s->core.max_lead,
      .failed = failed,
      .stopped = s->life.stop_requested,
      .stop_reason = reason,
      .resumed = s->restored.resumed,
      .resumed_from = s->restored.resumed_from,
      .partial_steps = s->core.upd.partial_steps,
      .workers_lost = lost,
      .data_order = s->opt.data_handout ? "ps" : "shards",
      .workers_departed = s->roster.departures,
      .workers_most = s->roster.workers_most,
      .ranges_handed = s->plan.data.handed,
      .ranges_returned = s->plan.data.returned,
      .workers_abandoned = s->roster.abandoned,
      .checkpoint = ps_ckpt_last_path(s),
      .checkpoint_final_error = ckpt_err,
      .rejected = s->net->rejected,
      .rejected_per_slot = per_slot,
      .slots = per_slot ? s->opt.workers : 0,
      .evaluated_by = s->opt.evaluator ? "ps" : "workers",
      .push_encoding = s->obs.push_enc_text,
      .topk_warmup = s->opt.push_enc == PST_ENC_TOPK ? s->opt.topk_warmup : 0,
      .topk_momentum = s->opt.topk_momentum,
      .pull_encoding = pst_enc_name(s->opt.pull_enc),
      .evals_missed = missed,
      .unsafe_updates = s->core.upd.unsafe_chunks,
      .norm_factor = s->core.upd.norm_factor,
      .norm_rejected = s->core.upd.norm_rejected,
      .norm_ratio_max = s->core.upd.norm_ratio_max,
      .norm_warmup_rms_max = s->core.upd.warm_rms_max,
      .flags = s->evals.eval_flags,
      .n_flags = s->evals.n_eval_flags,
      .untrained_samples = s->roster.untrained_samples,
      .untrained_steps = untrained,
      .n_untrained = untrained ? s->opt.workers : 0,
  };
  /* The connections count the bytes on the wire; the summary gives them. */
  s->obs.metrics.bytes_in = s->net->bytes_in;
  s->obs.metrics.bytes_out = s->net->bytes_out;
  s->obs.metrics.shm_in = s->net->shm_in;
  s->obs.metrics.shm_out = s->net->shm_out;
  int rc = pst_metrics_summary(&s->obs.metrics, s->opt.summary_path, &sum);
  free(untrained);
  free(per_slot);
  if (rc < 0) {
    LOG_ERR("%s: cannot write the summary: %s", s->opt.summary_path, strerror(-rc));
    s->obs.report_failed = 1;
  }
  if (pst_metrics_check(&s->obs.metrics) < 0) {
    LOG_ERR("%s: records could not be written to the metrics file (disk full?)", s->obs.metrics.path);
    s->obs.report_failed = 1;
  }
}
