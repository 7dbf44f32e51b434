/* `pstrain compare`: one run's figures read back (launcher/compare/digest.h). */
#include "launcher/compare/digest.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/json_file.h"
#include "launcher/run/run_elastic.h"

static double num(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static int add_point(run_rec *r, eval_point p) {
  if (r->npts == r->cap) {
    int cap = r->cap ? r->cap * 2 : 64;
    eval_point *g = realloc(r->pts, (size_t)cap * sizeof *g);
    if (!g) return -ENOMEM;
    r->pts = g;
    r->cap = cap;
  }
  r->pts[r->npts++] = p;
  return 0;
}

static int by_samples(const void *a, const void *b) {
  double x = ((const eval_point *)a)->samples, y = ((const eval_point *)b)->samples;
  return x < y ? -1 : x > y;
}

/* Pairs of numbers in the order read: (time, samples) or (time, workers). */
typedef struct {
  double (*v)[2];
  int n, cap;
} trained_series;

static void series_add(trained_series *s, double a, double b) {
  if (s->n == s->cap) {
    int cap = s->cap ? s->cap * 2 : 256;
    double(*v)[2] = realloc(s->v, (size_t)cap * sizeof *v);
    if (!v) return;
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n][0] = a;
  s->v[s->n][1] = b;
  s->n++;
}

/* The ps's records that an elastic run's plot needs: each range trained (with the handout)
 * or each worker's report (without), and each change of the number of workers. The ps's
 * "time" is the x axis: the evaluations' pauses show as the dips they are. */
static int saw_data;
static void elastic_record(trained_series *tp, trained_series *wk, const char *ev, const cJSON *j) {
  if (!strcmp(ev, "data")) {
    const char *what = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "what"));
    if (what && !strcmp(what, "trained")) {
      if (!saw_data) tp->n = 0; /* reports read before: the ranges count instead */
      saw_data = 1;
      series_add(tp, num(j, "time"), num(j, "count"));
    }
  } else if (!strcmp(ev, "train") && !saw_data && num(j, "samples") > 0) {
    series_add(tp, num(j, "time"), num(j, "samples"));
  } else if (!strcmp(ev, "workers") && num(j, "workers") >= 0) {
    series_add(wk, num(j, "time"), num(j, "workers"));
  }
}

/* DIR/throughput.dat (time, samples/s over windows of about a 40th of the run, at least
 * 0.25 s) and DIR/workers.dat (time, workers, a step each change). */
static void write_elastic(const char *dir, trained_series *tp, const trained_series *wk) {
  saw_data = 0;
  char path[PATH_MAX + 32];
  double end = 0;
  for (int i = 0; i < tp->n; i++)
    if (tp->v[i][0] > end) end = tp->v[i][0];
  snprintf(path, sizeof path, "%s/throughput.dat", dir);
  FILE *f = fopen(path, "w");
  if (f) {
    double width = end / 40 > 0.25 ? end / 40 : 0.25;
    int bins = (int)(end / width) + 1;
    double *sum = calloc((size_t)bins, sizeof *sum);
    for (int i = 0; sum && i < tp->n; i++) {
      int b = (int)(tp->v[i][0] / width);
      if (b >= 0 && b < bins) sum[b] += tp->v[i][1];
    }
    fprintf(f, "# time samples_per_sec\n");
    for (int b = 0; sum && b < bins; b++) fprintf(f, "%g %g\n", (b + 0.5) * width, sum[b] / width);
    free(sum);
    fclose(f);
  }
  snprintf(path, sizeof path, "%s/workers.dat", dir);
  f = fopen(path, "w");
  if (f) {
    fprintf(f, "# time workers\n");
    for (int i = 0; i < wk->n; i++) fprintf(f, "%g %g\n", wk->v[i][0], wk->v[i][1]);
    if (wk->n > 0 && end > wk->v[wk->n - 1][0]) fprintf(f, "%g %g\n", end, wk->v[wk->n - 1][1]);
    fclose(f);
  }
}

/* The round trips the launcher measured over the run's links (run_dir/links.json, written
 * with --link): the smallest and largest over the workers, or -1; what made the delay, and
 * how late the delay line's verdicts came (a line that falls behind slows the job). */
static void link_figures(run_rec *r) {
  char path[PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/links.json", r->dir);
  r->rtt_lo = r->rtt_hi = -1;
  cJSON *doc = pst_json_read_file(path);
  const char *by = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(doc, "delay_by"));
  snprintf(r->delay_by, sizeof r->delay_by, "%s", by ? by : "");
  const cJSON *line = cJSON_GetObjectItemCaseSensitive(doc, "delay_line");
  const cJSON *mean = cJSON_GetObjectItemCaseSensitive(line, "late_mean_ms");
  const cJSON *max = cJSON_GetObjectItemCaseSensitive(line, "late_max_ms");
  const cJSON *p90 = cJSON_GetObjectItemCaseSensitive(line, "late_p90_ms");
  r->late_mean = cJSON_IsNumber(mean) ? cJSON_GetNumberValue(mean) : -1;
  r->late_p90 = cJSON_IsNumber(p90) ? cJSON_GetNumberValue(p90) : -1;
  r->late_max = cJSON_IsNumber(max) ? cJSON_GetNumberValue(max) : -1;
  const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(line, "cpu_share");
  const cJSON *steal = cJSON_GetObjectItemCaseSensitive(line, "host_steal_share");
  r->line_cpu = cJSON_IsNumber(cpu) ? cJSON_GetNumberValue(cpu) : -1;
  r->host_steal = cJSON_IsNumber(steal) ? cJSON_GetNumberValue(steal) : -1;
  /* The busiest link's bytes per step beside the model's (issue 39; -1 where absent). */
  const cJSON *b = cJSON_GetObjectItemCaseSensitive(doc, "busiest_link");
  double v;
  r->link_step = cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(b, "bytes_per_step")) ? num(b, "bytes_per_step") : -1;
  r->model_step = (v = num(b, "model_bytes_per_step")) > 0 ? v : -1;
  r->step_s = (v = num(b, "step_seconds")) > 0 ? v : -1;
  r->model_comm = (v = num(b, "model_comm_seconds")) > 0 ? v : -1;
  r->compute_s = -1; /* pl_cmp_add_compute's, once every run is in */
  r->model_s = r->model_comm;
  const cJSON *w;
  cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(doc, "workers")) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(w, "round_trip_ms");
    if (!cJSON_IsNumber(v)) continue;
    double ms = cJSON_GetNumberValue(v);
    if (r->rtt_lo < 0 || ms < r->rtt_lo) r->rtt_lo = ms;
    if (ms > r->rtt_hi) r->rtt_hi = ms;
  }
  cJSON_Delete(doc);
}

/* Reads a run's metrics: its evaluations (dense ones when there are any, else the epochs'),
 * the staleness its training reports carried, and its summary. */
void pl_cmp_digest(mode_run *m, run_rec *r, const pl_run_options *o, const double *targets,
                   int ntargets) {
  char path[PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/metrics.jsonl", r->dir);
  FILE *in = fopen(path, "r");
  run_rec epochs = {.npts = 0};
  double per_step = (double)o->batch_size * o->workers;
  double spe = -1; /* steps per epoch per worker, from the summary's samples */
  char line[8192];
  /* An elastic run's samples over time and its workers (written beside its metrics for the
   * plot of both, launcher/compare/compare_report.c). */
  m->elastic |= pl_elastic(o);
  trained_series tp = {0}, wk = {0};
  while (in && fgets(line, sizeof line, in)) {
    cJSON *j = cJSON_Parse(line);
    const char *ev = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "event"));
    if (!ev) {
      cJSON_Delete(j);
      continue;
    }
    if (pl_elastic(o)) elastic_record(&tp, &wk, ev, j);
    double tt = num(j, "train_time");
    if (tt < 0) tt = num(j, "time");
    if (!strcmp(ev, "eval_subset")) {
      /* A point some worker never evaluated (it had finished, or was lost) covers part of
       * the subset only: not comparable, left out. */
      if (num(j, "shares") < o->workers) {
        cJSON_Delete(j);
        continue;
      }
      /* The ps asked at version point x eval_every (sync) or x eval_every x workers (async,
       * ssp): point x eval_every x workers batches either way. */
      eval_point p = {tt, num(j, "version"), num(j, "point") * o->eval_every * per_step,
                      num(j, "loss"), num(j, "accuracy")};
      add_point(r, p);
      r->dense = 1;
    } else if (!strcmp(ev, "eval")) {
      eval_point p = {tt, num(j, "version"), num(j, "epoch"), num(j, "loss"), num(j, "accuracy")};
      add_point(&epochs, p);
    } else if (!strcmp(ev, "summary")) {
      r->have_summary = 1;
      r->wall = num(j, "wall_seconds");
      r->train_s = num(j, "training_seconds");
      if (r->train_s < 0) r->train_s = r->wall;
      r->eval_s = num(j, "eval_seconds");
      r->accuracy = num(j, "test_accuracy");
      r->updates = num(j, "updates");
      r->sps = num(j, "samples_per_sec");
      r->mean_stale = num(j, "mean_staleness");
      r->max_stale = num(j, "max_staleness");
      r->dropped = num(j, "dropped_gradients");
      r->max_lead = num(j, "max_lead");
      /* What each mode and encoding moves between the workers and the ps: the port's bytes
       * and, with workers on the ps's host, those through shared memory (issue 41), which a
       * link between them would carry. */
      r->wire_step = num(j, "wire_bytes_per_step");
      r->wire_sample = num(j, "wire_bytes_per_sample");
      if (num(j, "shm_bytes_per_step") > 0) r->wire_step += num(j, "shm_bytes_per_step");
      if (num(j, "shm_bytes_per_sample") > 0) r->wire_sample += num(j, "shm_bytes_per_sample");
      r->ups = r->train_s > 0 ? r->updates / r->train_s : 0;
      double samples = num(j, "samples"), ep = num(j, "epochs");
      if (samples > 0 && ep > 0) spe = samples / ep / per_step;
      const cJSON *b = cJSON_GetObjectItemCaseSensitive(j, "staleness_bounds");
      const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "staleness_counts");
      int nb = cJSON_GetArraySize(b);
      if (cJSON_IsArray(b) && cJSON_IsArray(c) && nb < MAX_STALE &&
          cJSON_GetArraySize(c) == nb + 1) {
        m->stale_nb = nb;
        for (int i = 0; i < nb; i++) m->stale_bounds[i] = cJSON_GetNumberValue(cJSON_GetArrayItem(b, i));
        for (int i = 0; i <= nb; i++) m->stale_hist[i] += cJSON_GetNumberValue(cJSON_GetArrayItem(c, i));
      }
    }
    cJSON_Delete(j);
  }
  if (in) fclose(in);
  if (pl_elastic(o)) write_elastic(r->dir, &tp, &wk);
  free(tp.v);
  free(wk.v);
  /* The epochs' evaluations: samples from the epoch number. */
  for (int i = 0; i < epochs.npts; i++) {
    epochs.pts[i].samples = spe > 0 ? epochs.pts[i].samples * spe * per_step : epochs.pts[i].samples;
    if (!r->dense) add_point(r, epochs.pts[i]);
  }
  free(epochs.pts);
  qsort(r->pts, (size_t)r->npts, sizeof *r->pts, by_samples);
  link_figures(r);
  for (int t = 0; t < ntargets; t++) {
    r->ttt[t] = r->stt[t] = -1;
    for (int i = 0; i < r->npts; i++)
      if (r->pts[i].accuracy >= targets[t]) {
        r->ttt[t] = r->pts[i].time;
        r->stt[t] = r->pts[i].samples;
        break;
      }
  }
}
