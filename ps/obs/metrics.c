#include "ps/obs/metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "common/proc.h"

int pst_metrics_open(pst_metrics *m, const char *path, int epochs, int workers, int append,
                     char *err, size_t errlen) {
  memset(m, 0, sizeof *m);
  m->t0 = pst_now();
  m->epochs = epochs;
  m->workers = workers;
  pst_hist_init_staleness(&m->staleness);
  pst_hist_init_seconds(&m->step_seconds);
  pst_hist_init_seconds(&m->push_seconds);
  pst_hist_init_seconds(&m->pull_seconds);
  m->evals = calloc((size_t)epochs + 1, sizeof *m->evals);
  m->subset_done = calloc((size_t)(workers > 0 ? workers : 1), sizeof *m->subset_done);
  if (!m->evals || !m->subset_done) {
    free(m->evals);
    free(m->subset_done);
    m->evals = NULL;
    m->subset_done = NULL;
    return -ENOMEM;
  }
  if (path && path[0]) {
    snprintf(m->path, sizeof m->path, "%s", path);
    m->file = fopen(path, append ? "a" : "w");
    if (!m->file) {
      snprintf(err, errlen, "%s: cannot write the metrics file: %s", path, strerror(errno));
      int e = errno;
      free(m->evals);
      free(m->subset_done);
      m->evals = NULL;
      m->subset_done = NULL;
      return -e;
    }
    /* Line-buffered, so a launcher tailing the file sees each record whole and at once. */
    setvbuf(m->file, NULL, _IOLBF, 0);
  }
  return 0;
}

int pst_metrics_check(pst_metrics *m) {
  if (!m->file) return 0;
  return fflush(m->file) != 0 || ferror(m->file) ? -EIO : 0;
}

void pst_metrics_close(pst_metrics *m) {
  if (m->file) fclose(m->file);
  m->file = NULL;
  free(m->evals);
  m->evals = NULL;
  free(m->subset);
  free(m->subset_done);
  m->subset = NULL;
  m->subset_done = NULL;
  m->subset_n = 0;
}

/* Seconds of training up to now: since every slot had a worker, less the time the workers
 * spent evaluating (their mean: each worker's own training stopped while it evaluated). */
static double train_seconds(const pst_metrics *m, double now) {
  if (m->train_start <= 0) return 0;
  double end = m->train_end > 0 && m->train_end < now ? m->train_end : now;
  double t = end - m->train_start - m->eval_seconds / (m->workers > 0 ? m->workers : 1);
  return t > 0 ? t : 0;
}

/* The training scalars at a report: the report's figures, the speed so far, the learning
 * rate and the mean staleness since the previous record. */
static void tb_train(pst_metrics *m, uint64_t version) {
  double now = pst_now();
  double wall = m->train_start > 0 ? now - m->train_start : 0;
  double sps = wall > 0 ? (double)(m->samples_trained - m->samples_resumed) / wall : 0;
  uint64_t dn = m->staleness.count - m->tb_stale_count;
  double stale = dn ? (m->staleness.sum - m->tb_stale_sum) / (double)dn : 0;
  m->tb_stale_count = m->staleness.count;
  m->tb_stale_sum = m->staleness.sum;
  static const char *const tags[] = {"loss/train", "accuracy/train", "samples_per_sec",
                                     "learning_rate", "staleness/mean"};
  double values[] = {m->last_train_loss, m->last_train_accuracy, sps, m->lr, stale};
  pst_tb_scalars(m->tb, (int64_t)version, tags, values, 5);
}

static void history_add(pst_metrics *m, uint64_t version) {
  if (m->history_stride == 0) m->history_stride = 1;
  if (++m->history_skip < m->history_stride) return;
  m->history_skip = 0;
  if (m->history_n == PST_METRICS_HISTORY) {
    for (int i = 0; i < PST_METRICS_HISTORY / 2; i++) m->history[i] = m->history[2 * i + 1];
    m->history_n = PST_METRICS_HISTORY / 2;
    m->history_stride *= 2;
  }
  pst_train_point *p = &m->history[m->history_n++];
  p->version = version;
  p->loss = (float)m->last_train_loss;
  p->accuracy = (float)m->last_train_accuracy;
}

void pst_metrics_train(pst_metrics *m, int worker, uint32_t epoch, uint64_t step,
                       uint64_t version, uint64_t staleness, double loss_sum, uint64_t correct,
                       uint64_t samples, double data_wait) {
  m->samples_trained += samples;
  m->data_wait += data_wait;
  if (epoch >= 1 && (int)epoch <= m->epochs) m->evals[epoch].data_wait += data_wait;
  if (samples > 0) {
    m->last_train_loss = loss_sum / (double)samples;
    m->last_train_accuracy = (double)correct / (double)samples;
    history_add(m, version);
    if (m->tb) tb_train(m, version);
  }
  if (!m->file || samples == 0) return;
  fprintf(m->file,
          "{\"time\":%.3f,\"event\":\"train\",\"epoch\":%u,\"step\":%" PRIu64
          ",\"version\":%" PRIu64 ",\"worker\":%d,\"staleness\":%" PRIu64
          ",\"loss\":%.6f,\"accuracy\":%.6f,\"samples\":%" PRIu64
          ",\"train_time\":%.3f,\"data_wait\":%.4f}\n",
          pst_now() - m->t0, epoch, step, version, worker, staleness, loss_sum / (double)samples,
          (double)correct / (double)samples, samples, train_seconds(m, pst_now()), data_wait);
}

void pst_metrics_applied(pst_metrics *m, uint64_t staleness, double seconds) {
  pst_hist_observe(&m->staleness, (double)staleness);
  pst_hist_observe(&m->push_seconds, seconds);
}

void pst_metrics_range(pst_metrics *m, const char *what, int worker, uint64_t version,
                       uint32_t epoch, uint64_t start, uint32_t count) {
  if (!m->file) return;
  fprintf(m->file,
          "{\"time\":%.3f,\"event\":\"data\",\"what\":\"%s\",\"worker\":%d,\"version\":%" PRIu64
          ",\"epoch\":%u,\"start\":%" PRIu64 ",\"count\":%u}\n",
          pst_now() - m->t0, what, worker, version, epoch, start, count);
}

void pst_metrics_data_epoch(pst_metrics *m, uint32_t epoch, uint64_t version, uint64_t samples,
                            uint32_t epochs) {
  if (!m->file) return;
  fprintf(m->file,
          "{\"time\":%.3f,\"event\":\"data_epoch\",\"epoch\":%u,\"epochs\":%u,\"samples\":%" PRIu64
          ",\"version\":%" PRIu64 ",\"train_time\":%.3f}\n",
          pst_now() - m->t0, epoch, epochs, samples, version, train_seconds(m, pst_now()));
}

void pst_metrics_workers(pst_metrics *m, int workers, uint64_t version, const char *why,
                         int worker, uint64_t from) {
  if (!m->file) return;
  fprintf(m->file,
          "{\"time\":%.3f,\"event\":\"workers\",\"workers\":%d,\"version\":%" PRIu64
          ",\"why\":\"%s\",\"worker\":%d,\"from\":%" PRIu64 ",\"train_time\":%.3f}\n",
          pst_now() - m->t0, workers, version, why, worker, from, train_seconds(m, pst_now()));
}

void pst_metrics_pulled(pst_metrics *m, double seconds) {
  pst_hist_observe(&m->pull_seconds, seconds);
}

const char *const pst_rt_part_names[PST_RT_PARTS] = {"exposed", "wire",      "queued",
                                                      "sum",     "optimizer", "sending"};

void pst_metrics_round_trip(pst_metrics *m, double exposed, double queued, double sum,
                            double optimizer, double sending) {
  double wire = exposed - queued - sum - optimizer - sending;
  double v[PST_RT_PARTS] = {exposed, wire, queued, sum, optimizer, sending};
  for (int i = 0; i < PST_RT_PARTS; i++) pst_quant_observe(&m->round_trip[i], v[i] > 0 ? v[i] : 0);
}

void pst_metrics_step(pst_metrics *m) {
  double now = pst_now();
  /* The first version after a start (or a resume) has no predecessor to measure from. */
  if (m->last_step_at > 0) pst_hist_observe(&m->step_seconds, now - m->last_step_at);
  m->last_step_at = now;
}

void pst_metrics_eval(pst_metrics *m, uint32_t epoch, uint64_t version, double loss_sum,
                      uint64_t correct, uint64_t samples) {
  if (epoch < 1 || (int)epoch > m->epochs) return;
  pst_epoch_eval *e = &m->evals[epoch];
  if (e->complete) return; /* a late share after the epoch was closed without it */
  e->loss_sum += loss_sum;
  e->correct += correct;
  e->samples += samples;
  e->reports++;
  if (version > e->version) e->version = version;
}

void pst_metrics_eval_set_aside(pst_metrics *m, uint32_t epoch, double loss_sum,
                                uint64_t correct, uint64_t samples) {
  if (epoch < 1 || (int)epoch > m->epochs) return;
  pst_epoch_eval *e = &m->evals[epoch];
  if (e->complete || samples > e->samples || correct > e->correct) return;
  e->loss_sum -= loss_sum;
  if (e->loss_sum < 0) e->loss_sum = 0; /* rounding, when the rest is nearly nothing */
  e->correct -= correct;
  e->samples -= samples;
  e->reports--;
  e->aside_loss_sum += loss_sum;
  e->aside_correct += correct;
  e->aside_samples += samples;
  e->aside++;
}

int pst_metrics_eval_complete(pst_metrics *m, uint32_t epoch) {
  if (epoch < 1 || (int)epoch > m->epochs) return 0;
  pst_epoch_eval *e = &m->evals[epoch];
  if (e->complete || e->samples == 0) return 0;
  e->complete = 1;
  if ((int)epoch > m->last_epoch) {
    m->last_epoch = (int)epoch;
    m->last_test_loss = e->loss_sum / (double)e->samples;
    m->last_test_accuracy = (double)e->correct / (double)e->samples;
    uint64_t all = e->samples + e->aside_samples;
    m->last_loss_with_flagged = (e->loss_sum + e->aside_loss_sum) / (double)all;
    m->last_accuracy_with_flagged = (double)(e->correct + e->aside_correct) / (double)all;
  }
  if (m->tb) {
    static const char *const tags[] = {"loss/test", "accuracy/test", "data_wait_seconds/epoch"};
    double values[] = {e->loss_sum / (double)e->samples, (double)e->correct / (double)e->samples,
                       e->data_wait};
    pst_tb_scalars(m->tb, (int64_t)e->version, tags, values, 3);
  }
  if (m->file)
    fprintf(m->file,
            "{\"time\":%.3f,\"event\":\"eval\",\"epoch\":%u,\"version\":%" PRIu64
            ",\"worker\":-1,\"loss\":%.6f,\"accuracy\":%.6f,\"samples\":%" PRIu64
            ",\"shares\":%d,\"flagged_shares\":%d,\"train_time\":%.3f,\"data_wait\":%.4f}\n",
            pst_now() - m->t0, epoch, e->version, e->loss_sum / (double)e->samples,
            (double)e->correct / (double)e->samples, e->samples, e->reports, e->aside,
            train_seconds(m, pst_now()), e->data_wait);
  return 1;
}

void pst_metrics_eval_time(pst_metrics *m, double seconds) {
  if (seconds > 0) m->eval_seconds += seconds;
}

static void subset_write(pst_metrics *m, uint32_t point) {
  pst_subset_eval *e = &m->subset[point - 1];
  e->written = 1;
  if (!m->file || e->samples == 0) return;
  /* time and train_time: when the ps first asked for the point (it had just reached the
   * point's version). version: the newest weights evaluated (sync: every share's);
   * version_min the oldest (async and ssp: each worker's next pull after that moment). */
  double now = pst_now();
  double t = e->asked ? e->time : now - m->t0, tt = e->asked ? e->train_time : train_seconds(m, now);
  fprintf(m->file,
          "{\"time\":%.3f,\"event\":\"eval_subset\",\"point\":%u,\"epoch\":%u,\"version\":%" PRIu64
          ",\"version_min\":%" PRIu64 ",\"worker\":-1,\"loss\":%.6f,\"accuracy\":%.6f,\"samples\":%" PRIu64
          ",\"shares\":%d,\"train_time\":%.3f,\"eval_seconds\":%.3f}\n",
          t, point, e->epoch, e->version_max, e->version_min,
          e->loss_sum / (double)e->samples, (double)e->correct / (double)e->samples, e->samples,
          e->reports, tt,
          m->eval_seconds / (m->workers > 0 ? m->workers : 1));
}

/* Point `point`'s record, the array grown as needed; NULL when out of memory (a point lost,
 * not the run). */
static pst_subset_eval *subset_at(pst_metrics *m, uint32_t point) {
  if (point > m->subset_n) {
    uint32_t n = m->subset_n ? m->subset_n : 64;
    while (n < point) n *= 2;
    pst_subset_eval *grown = realloc(m->subset, (size_t)n * sizeof *grown);
    if (!grown) return NULL;
    memset(grown + m->subset_n, 0, (size_t)(n - m->subset_n) * sizeof *grown);
    m->subset = grown;
    m->subset_n = n;
  }
  return &m->subset[point - 1];
}

void pst_metrics_subset_asked(pst_metrics *m, uint32_t point) {
  pst_subset_eval *e = point ? subset_at(m, point) : NULL;
  if (!e || e->asked) return;
  e->asked = 1;
  double now = pst_now();
  e->time = now - m->t0;
  e->train_time = train_seconds(m, now);
}

void pst_metrics_subset(pst_metrics *m, int worker, uint32_t point, uint64_t version,
                        uint32_t epoch, double loss_sum, uint64_t correct, uint64_t samples) {
  /* A rejoining worker may evaluate a point again: its first share counts. */
  if (point == 0 || worker < 0 || worker >= m->workers || point <= m->subset_done[worker]) return;
  m->subset_done[worker] = point;
  pst_subset_eval *e = subset_at(m, point);
  if (!e) return;
  if (e->written) return;
  if (e->reports == 0 || version < e->version_min) e->version_min = version;
  if (version > e->version_max) e->version_max = version;
  if (epoch > e->epoch) e->epoch = epoch;
  e->loss_sum += loss_sum;
  e->correct += correct;
  e->samples += samples;
  if (++e->reports >= m->workers) subset_write(m, point);
}

void pst_metrics_mark_start(pst_metrics *m) {
  m->train_start = pst_now();
  m->cpu_start = pst_proc_self_cpu_s();
}

void pst_metrics_mark_end(pst_metrics *m) {
  m->train_end = pst_now();
  m->cpu_end = pst_proc_self_cpu_s();
}

static char *summary_json(const pst_metrics *m, const pst_run_summary *r, double wall,
                          double sps) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  char hex[17], shard[24];
  cJSON_AddStringToObject(o, "event", "summary");
  cJSON_AddStringToObject(o, "mode", r->mode);
  cJSON_AddStringToObject(o, "model", r->model);
  cJSON_AddStringToObject(o, "optimizer", r->optimizer);
  cJSON_AddBoolToObject(o, "staleness_lr", r->staleness_lr);
  cJSON_AddStringToObject(o, "lr_schedule", r->lr_schedule ? r->lr_schedule : "");
  cJSON_AddStringToObject(o, "lr_scaling", r->lr_linear ? "linear" : "none");
  cJSON_AddNumberToObject(o, "learning_rate_last", r->lr_last);
  cJSON_AddNumberToObject(o, "workers", m->workers);
  cJSON_AddNumberToObject(o, "epochs", m->epochs);
  cJSON_AddNumberToObject(o, "epochs_evaluated", m->last_epoch);
  cJSON_AddNumberToObject(o, "batch_size", r->batch);
  cJSON_AddNumberToObject(o, "test_accuracy", m->last_test_accuracy);
  cJSON_AddNumberToObject(o, "test_loss", m->last_test_loss);
  /* The figures with the shares flagged implausible (evaluations_flagged) put back: what
   * the job would have claimed had it believed them. */
  cJSON_AddNumberToObject(o, "test_accuracy_with_flagged", m->last_accuracy_with_flagged);
  cJSON_AddNumberToObject(o, "test_loss_with_flagged", m->last_loss_with_flagged);
  cJSON_AddNumberToObject(o, "samples_per_sec", sps);
  cJSON_AddNumberToObject(o, "wall_seconds", wall);
  /* The workers' mean evaluation time, and the wall time less it. */
  double ev = m->eval_seconds / (m->workers > 0 ? m->workers : 1);
  cJSON_AddNumberToObject(o, "eval_seconds", ev);
  cJSON_AddNumberToObject(o, "training_seconds", wall - ev > 0 ? wall - ev : 0);
  cJSON_AddNumberToObject(o, "samples", (double)m->samples_trained);
  cJSON_AddNumberToObject(o, "data_wait_seconds", m->data_wait);
  cJSON_AddNumberToObject(o, "updates", (double)r->version);
  /* Bytes on the ps's training port, both ways, all connections (what a link between the
   * ps and its workers carries), and per update and per sample trained by this process: the
   * figures the encodings change (issue 27). */
  cJSON_AddStringToObject(o, "push_encoding", r->push_encoding ? r->push_encoding : "none");
  cJSON_AddNumberToObject(o, "topk_warmup_epochs", r->topk_warmup);
  cJSON_AddNumberToObject(o, "topk_momentum", r->topk_momentum);
  cJSON_AddStringToObject(o, "pull_encoding", r->pull_encoding ? r->pull_encoding : "none");
  double wire = (double)m->bytes_in + (double)m->bytes_out;
  uint64_t own = m->samples_trained - m->samples_resumed;
  uint64_t updates = r->version > r->resumed_from ? r->version - r->resumed_from : 0;
  cJSON_AddNumberToObject(o, "wire_bytes_in", (double)m->bytes_in);
  cJSON_AddNumberToObject(o, "wire_bytes_out", (double)m->bytes_out);
  cJSON_AddNumberToObject(o, "wire_bytes_per_step", updates ? wire / (double)updates : 0);
  cJSON_AddNumberToObject(o, "wire_bytes_per_sample", own ? wire / (double)own : 0);
  /* Payloads that went through shared memory with workers on this host (proto/ring.h)
   * instead: with the wire's, every byte the workers and the ps exchanged. */
  double shm = (double)m->shm_in + (double)m->shm_out;
  cJSON_AddNumberToObject(o, "shm_bytes_in", (double)m->shm_in);
  cJSON_AddNumberToObject(o, "shm_bytes_out", (double)m->shm_out);
  cJSON_AddNumberToObject(o, "shm_bytes_per_step", updates ? shm / (double)updates : 0);
  cJSON_AddNumberToObject(o, "shm_bytes_per_sample", own ? shm / (double)own : 0);
  /* The model's checksum, and this ps's part of the weights with its own checksum (the same
   * as the model's without shards): a shard's summary does not pass its part off as the
   * model (issue 25). */
  if (r->checksum_from) {
    snprintf(hex, sizeof hex, "%016" PRIx64, r->checksum);
    cJSON_AddStringToObject(o, "weights_checksum", hex);
  }
  cJSON_AddStringToObject(o, "weights_checksum_from", r->checksum_from ? r->checksum_from : "none");
  snprintf(shard, sizeof shard, "%d/%d", r->shard_index, r->shard_count);
  cJSON_AddStringToObject(o, "shard", shard);
  snprintf(hex, sizeof hex, "%016" PRIx64, r->shard_checksum);
  cJSON_AddStringToObject(o, "shard_checksum", hex);
  cJSON_AddNumberToObject(o, "mean_staleness", r->mean_staleness);
  cJSON_AddNumberToObject(o, "max_staleness", (double)r->max_staleness);
  /* Every applied gradient's staleness: counts per bucket, the bucket's upper bounds (the
   * last count is above the last bound). */
  cJSON *bounds = cJSON_AddArrayToObject(o, "staleness_bounds");
  cJSON *counts = cJSON_AddArrayToObject(o, "staleness_counts");
  for (int i = 0; bounds && counts && i <= m->staleness.n; i++) {
    if (i < m->staleness.n) cJSON_AddItemToArray(bounds, cJSON_CreateNumber(m->staleness.bounds[i]));
    cJSON_AddItemToArray(counts, cJSON_CreateNumber((double)m->staleness.counts[i]));
  }
  cJSON_AddNumberToObject(o, "gradients_applied", (double)r->applied);
  /* The ps's CPU time over training, and per gradient applied: what scale-out is bounded by
   * (a gradient costs the ps its check, sum, optimizer pass and the pulls that follow). */
  double cpu_end = m->cpu_end > 0 ? m->cpu_end : pst_proc_self_cpu_s();
  double cpu = m->cpu_start > 0 && cpu_end >= m->cpu_start ? cpu_end - m->cpu_start : 0;
  cJSON_AddNumberToObject(o, "ps_cpu_seconds", cpu);
  cJSON_AddNumberToObject(o, "ps_cpu_ms_per_gradient",
                          r->applied > 0 ? cpu * 1e3 / (double)r->applied : 0);
  /* The round trip's p50 and p99 per part, in milliseconds, over the workers' steps. */
  cJSON_AddNumberToObject(o, "round_trip_steps", (double)m->round_trip[PST_RT_EXPOSED].n);
  cJSON *rt = cJSON_AddObjectToObject(o, "round_trip_ms");
  for (int i = 0; rt && i < PST_RT_PARTS; i++) {
    cJSON *part = cJSON_AddObjectToObject(rt, pst_rt_part_names[i]);
    if (!part) break;
    cJSON_AddNumberToObject(part, "p50", pst_quant_value(&m->round_trip[i], 0.5) * 1e3);
    cJSON_AddNumberToObject(part, "p99", pst_quant_value(&m->round_trip[i], 0.99) * 1e3);
  }
  cJSON_AddNumberToObject(o, "dropped_gradients", (double)r->dropped);
  cJSON_AddNumberToObject(o, "rejected", (double)r->rejected);
  /* Per slot, over every connection that held it: the strikes that disconnect a worker are
   * its connection's own (ps/train/validate.c), so a slot may total more than three. */
  cJSON *per_slot = cJSON_AddArrayToObject(o, "rejected_per_slot");
  for (int i = 0; per_slot && r->rejected_per_slot && i < r->slots; i++)
    cJSON_AddItemToArray(per_slot, cJSON_CreateNumber((double)r->rejected_per_slot[i]));
  cJSON_AddNumberToObject(o, "unsafe_updates", (double)r->unsafe_updates);
  cJSON_AddNumberToObject(o, "grad_norm_factor", r->norm_factor);
  cJSON_AddNumberToObject(o, "grad_norm_rejected", (double)r->norm_rejected);
  cJSON_AddNumberToObject(o, "grad_norm_ratio_max", r->norm_ratio_max);
  cJSON_AddNumberToObject(o, "grad_norm_warmup_rms_max", r->norm_warmup_rms_max);
  cJSON_AddStringToObject(o, "evaluated_by", r->evaluated_by ? r->evaluated_by : "workers");
  cJSON_AddNumberToObject(o, "evaluations_missed", (double)r->evals_missed);
  cJSON *flags = cJSON_AddArrayToObject(o, "evaluations_flagged");
  for (int i = 0; flags && i < r->n_flags; i++) {
    const pst_eval_flag *f = &r->flags[i];
    cJSON *x = cJSON_CreateObject();
    if (!x) break;
    cJSON_AddNumberToObject(x, "worker", f->worker);
    cJSON_AddNumberToObject(x, "epoch", f->epoch);
    cJSON_AddNumberToObject(x, "accuracy", (double)f->correct / (double)f->samples);
    cJSON_AddNumberToObject(x, "samples", (double)f->samples);
    cJSON_AddNumberToObject(x, "median_accuracy", f->median_accuracy);
    cJSON_AddNumberToObject(x, "z", f->z);
    cJSON_AddNumberToObject(x, "loss", f->loss);
    cJSON_AddNumberToObject(x, "median_loss", f->median_loss);
    cJSON_AddItemToArray(flags, x);
  }
  cJSON_AddNumberToObject(o, "max_lead", (double)r->max_lead);
  cJSON_AddBoolToObject(o, "failed", r->failed);
  cJSON_AddBoolToObject(o, "finished", !r->failed && !r->stopped && r->untrained_samples == 0);
  /* Samples never trained, and whose: a job with any did not finish (issue 43). */
  cJSON_AddNumberToObject(o, "untrained_samples", (double)r->untrained_samples);
  cJSON *untrained = cJSON_AddArrayToObject(o, "untrained");
  for (int i = 0; untrained && i < r->n_untrained; i++) {
    if (r->untrained_steps[i] == 0) continue;
    cJSON *x = cJSON_CreateObject();
    if (!x) break;
    cJSON_AddNumberToObject(x, "worker", i);
    cJSON_AddNumberToObject(x, "steps", (double)r->untrained_steps[i]);
    cJSON_AddNumberToObject(x, "samples", (double)r->untrained_steps[i] * r->batch);
    cJSON_AddItemToArray(untrained, x);
  }
  cJSON_AddBoolToObject(o, "stopped", r->stopped);
  if (r->stop_reason) cJSON_AddStringToObject(o, "stop_reason", r->stop_reason);
  cJSON_AddBoolToObject(o, "resumed", r->resumed);
  cJSON_AddNumberToObject(o, "resumed_from_version", (double)r->resumed_from);
  cJSON_AddNumberToObject(o, "partial_steps", (double)r->partial_steps);
  cJSON_AddNumberToObject(o, "workers_lost", r->workers_lost);
  cJSON_AddStringToObject(o, "data_order", r->data_order ? r->data_order : "shards");
  cJSON_AddNumberToObject(o, "workers_departed", r->workers_departed);
  cJSON_AddNumberToObject(o, "workers_most", r->workers_most);
  cJSON_AddNumberToObject(o, "ranges_handed", (double)r->ranges_handed);
  cJSON_AddNumberToObject(o, "ranges_returned", (double)r->ranges_returned);
  cJSON_AddNumberToObject(o, "workers_abandoned", r->workers_abandoned);
  cJSON_AddStringToObject(o, "checkpoint", r->checkpoint ? r->checkpoint : "");
  /* The final checkpoint's fate: `checkpoint` above is then an older one (or ""). */
  cJSON_AddBoolToObject(o, "checkpoint_final_failed", r->checkpoint_final_error != NULL);
  if (r->checkpoint_final_error)
    cJSON_AddStringToObject(o, "checkpoint_final_error", r->checkpoint_final_error);
  char *text = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return text;
}

int pst_metrics_summary(pst_metrics *m, const char *summary_path, const pst_run_summary *r) {
  double end = m->train_end > 0 ? m->train_end : pst_now();
  double wall = m->train_start > 0 ? end - m->train_start : 0;
  /* Points some worker never evaluated (it was lost) are written with the shares they have. */
  for (uint32_t p = 1; p <= m->subset_n; p++)
    if (!m->subset[p - 1].written && m->subset[p - 1].reports > 0) subset_write(m, p);
  /* The speed of this process's part of the run (a resumed ps's clock starts anew), over the
   * training time: evaluations are left out. */
  double train = train_seconds(m, end);
  double sps = train > 0 ? (double)(m->samples_trained - m->samples_resumed) / train : 0;
  char *text = summary_json(m, r, wall, sps);
  if (!text) return -ENOMEM;
  int rc = 0;
  if (m->file) fprintf(m->file, "%s\n", text);
  if (summary_path && summary_path[0]) {
    FILE *f = fopen(summary_path, "w");
    if (!f || fprintf(f, "%s\n", text) < 0) rc = -errno;
    if (f && fclose(f) != 0 && rc == 0) rc = -errno;
    if (rc == 0 && !f) rc = -EIO;
  }
  cJSON_free(text);
  return rc;
}
