/* `pstrain compare`: the same job under several update modes, each run --repeats times with
 * different seeds (the same seeds for every mode), for one or several worker counts; then
 * plots (gnuplot), a table of medians and ranges, summary.md and a self-contained
 * report.html, all under one run directory. */
#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/clock.h"
#include "common/config.h"
#include "common/json_file.h"
#include "common/proc.h"
#include "launcher/commands.h"
#include "common/codec.h"
#include "launcher/compare/compare.h"
#include "launcher/links/link.h"

static int parse_modes(const char *s, mode_run *runs, int max) {
  int n = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (n == max) return -E2BIG;
    mode_run *r = &runs[n];
    memset(r, 0, sizeof *r);
    snprintf(r->label, sizeof r->label, "%.31s", tok);
    /* MODE+sa: async or ssp with the staleness-aware learning rate (the ps's
     * --staleness-lr). */
    size_t len = strlen(tok);
    if (len > 3 && !strcmp(tok + len - 3, "+sa")) {
      tok[len - 3] = '\0';
      r->staleness_lr = 1;
      if (!strcmp(tok, "sync")) return -EINVAL;
    }
    if (!strcmp(tok, "sync") || !strcmp(tok, "async")) {
      snprintf(r->mode, sizeof r->mode, "%s", tok);
    } else if (!strncmp(tok, "ssp", 3) && (tok[3] == '\0' || tok[3] == ':')) {
      snprintf(r->mode, sizeof r->mode, "ssp");
      int64_t st = 2;
      if (tok[3] && pst_parse_int(tok + 4, 0, 1000000, &st) < 0) return -EINVAL;
      r->staleness = (int)st;
    } else {
      return -EINVAL;
    }
    memcpy(r->safe, r->label, sizeof r->safe);
    for (char *p = r->safe; *p; p++)
      if (*p == ':') *p = '-';
    n++;
  }
  return n;
}

/* A file-name-safe copy of a label: anything but letters, digits, '.', '_' and '-' becomes
 * '-'. */
static void make_safe(mode_run *r) {
  snprintf(r->safe, sizeof r->safe, "%s", r->label);
  for (char *p = r->safe; *p; p++)
    if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' && *p != '-') *p = '-';
}

/* --encodings PUSH[/PULL],... and --links SPEC;SPEC...: every mode of runs[0..n) once per
 * encoding and link (issue 27), labelled "MODE PUSH/PULL @LINK". Returns the new count, or
 * -1 with a one-line reason in err. */
static int expand_settings(mode_run *runs, int n, int max, const char *encs, const char *links,
                           char *err, size_t errlen) {
  char ebuf[512], lbuf[512];
  const char *elist[MAX_MODES], *llist[MAX_MODES];
  int ne = 0, nl = 0;
  snprintf(ebuf, sizeof ebuf, "%s", encs ? encs : "");
  snprintf(lbuf, sizeof lbuf, "%s", links ? links : "");
  for (char *save = NULL, *t = strtok_r(ebuf, ",", &save); t && ne < MAX_MODES;
       t = strtok_r(NULL, ",", &save)) {
    char push[64], *slash;
    pst_enc e;
    double f;
    snprintf(push, sizeof push, "%s", t);
    if ((slash = strchr(push, '/'))) *slash = '\0';
    if (strlen(t) >= 48 || pst_enc_parse_push(push, &e, &f) < 0 ||
        (slash && pst_enc_parse(slash + 1, &e) < 0)) {
      snprintf(err, errlen, "--encodings: '%.60s' is not PUSH[/PULL] (PUSH %s; PULL %s)", t,
               pst_enc_push_choices(), pst_enc_choices());
      return -1;
    }
    elist[ne++] = t;
  }
  for (char *save = NULL, *t = strtok_r(lbuf, ";", &save); t && nl < MAX_MODES;
       t = strtok_r(NULL, ";", &save)) {
    pl_link_spec l;
    char why[300];
    if (strlen(t) >= 64 || pl_link_parse(t, &l, why, sizeof why) < 0) {
      snprintf(err, errlen, "--links: %s", why);
      return -1;
    }
    llist[nl++] = t;
  }
  if (ne == 0) elist[ne++] = NULL;
  if (nl == 0) llist[nl++] = NULL;
  if (n * ne * nl > max) {
    snprintf(err, errlen, "%d modes x %d encodings x %d links is over %d settings", n, ne, nl,
             max);
    return -1;
  }
  static mode_run base[MAX_MODES];
  memcpy(base, runs, (size_t)n * sizeof *runs);
  int k = 0;
  for (int i = 0; i < n; i++)
    for (int e = 0; e < ne; e++)
      for (int l = 0; l < nl; l++) {
        mode_run *r = &runs[k++];
        *r = base[i];
        if (elist[e]) {
          const char *slash = strchr(elist[e], '/');
          snprintf(r->push, sizeof r->push, "%.*s",
                   (int)(slash ? (size_t)(slash - elist[e]) : strlen(elist[e])), elist[e]);
          if (slash) snprintf(r->pull, sizeof r->pull, "%s", slash + 1);
        }
        if (llist[l]) snprintf(r->link, sizeof r->link, "%s", llist[l]);
        size_t used = strlen(r->label);
        if (elist[e]) used += (size_t)snprintf(r->label + used, sizeof r->label - used, " %s", elist[e]);
        if (llist[l] && used < sizeof r->label)
          snprintf(r->label + used, sizeof r->label - used, " @%s", llist[l]);
        make_safe(r);
      }
  return k;
}

/* "0.85,0.88,0.9": each in (0, 1]. */
static int parse_targets(const char *s, double *out, int max) {
  int n = 0;
  while (*s) {
    if (n == max) return -E2BIG;
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v > 0 && v <= 1) || (*end && *end != ',')) return -EINVAL;
    out[n++] = v;
    s = *end ? end + 1 : end;
  }
  return n;
}

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
  r->late_mean = cJSON_IsNumber(mean) ? cJSON_GetNumberValue(mean) : -1;
  r->late_max = cJSON_IsNumber(max) ? cJSON_GetNumberValue(max) : -1;
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
static void digest(mode_run *m, run_rec *r, const pl_run_options *o, const double *targets,
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
      r->wire_step = num(j, "wire_bytes_per_step");
      r->wire_sample = num(j, "wire_bytes_per_sample");
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

/* ---- the command ---- */

int pl_cmd_compare(int argc, char **argv) {
  const char *modes_arg = "sync,async,ssp:2", *out_arg = "", *target_arg = NULL;
  const char *targets_arg = "0.85,0.88,0.90", *repeats_arg = "1", *workers_arg = NULL;
  /* Our own flags first; everything else is a run flag shared with `local`. --workers is
   * ours too, as it takes a list here. */
  char **rest = calloc((size_t)argc + 2, sizeof *rest);
  char **args = calloc((size_t)argc + 1, sizeof *args);
  if (!rest || !args) {
    fprintf(stderr, "pstrain compare: out of memory\n");
    free(rest);
    free(args);
    return 1;
  }
  int nargs = 0;
  for (int i = 0; i < argc; i++) {
    if (!strncmp(argv[i], "--workers=", 10)) workers_arg = argv[i] + 10;
    else args[nargs++] = argv[i];
  }
  int nrest = 0;
  rest[nrest++] = argv[0];
  const char *encodings_arg = NULL, *links_arg = NULL;
  static const char *const names[] = {"--modes", "--out", "--target-accuracy", "--targets",
                                      "--repeats", "--workers", "--encodings", "--links"};
  const char **const values[] = {&modes_arg, &out_arg, &target_arg, &targets_arg, &repeats_arg,
                                 &workers_arg, &encodings_arg, &links_arg};
  if (pl_split_flags("compare", nargs, args, names, values, 8, rest, &nrest) != 0) {
    free(rest);
    free(args);
    return 2;
  }
  int counts[MAX_COUNTS];
  /* --workers MIN:MAX: one elastic count, passed on to every run as it is (pl_parse_run_flags
   * checks it); MIN names its table and plots. */
  int range_min = 0, range_max = 0;
  if (workers_arg && strchr(workers_arg, ':') &&
      pl_parse_workers_range(workers_arg, &range_min, &range_max) < 0) {
    fprintf(stderr, "pstrain compare: --workers: '%.40s' is not N, a list like 2,4,8 or MIN:MAX "
                    "with 1 <= MIN <= MAX <= %d\n", workers_arg, PL_MAX_WORKERS);
    free(rest);
    free(args);
    return 2;
  }
  int ncounts = range_min ? 1
                : workers_arg ? pl_parse_int_list(workers_arg, counts, MAX_COUNTS, 1, PL_MAX_WORKERS)
                              : 0;
  if (range_min) counts[0] = range_min;
  if (workers_arg && ncounts <= 0) {
    fprintf(stderr, "pstrain compare: --workers wants a count or a list like 2,4,8 (up to %d, "
                    "each in 1..%d)\n", MAX_COUNTS, PL_MAX_WORKERS);
    free(rest);
    free(args);
    return 2;
  }
  /* The run flags are checked against the smallest count: --slow-worker I must fit them all. */
  char wflag[32];
  if (range_min) {
    snprintf(wflag, sizeof wflag, "--workers=%d:%d", range_min, range_max);
    rest[nrest++] = wflag;
  } else if (workers_arg) {
    int smallest = counts[0];
    for (int c = 1; c < ncounts; c++)
      if (counts[c] < smallest) smallest = counts[c];
    snprintf(wflag, sizeof wflag, "--workers=%d", smallest);
    rest[nrest++] = wflag;
  }
  pl_run_options base;
  static pst_model model;
  int rc = pl_parse_run_flags("compare", nrest, rest, &base, &model,
                              "Also: --modes LIST (default sync,async,ssp:2; ssp:S sets the bound; async+sa,\n"
                              "ssp:S+sa: the staleness-aware learning rate, --staleness-lr),\n"
                              "--workers N or a list (2,4,8: one table per count and a scaling plot),\n"
                              "or MIN:MAX (an elastic job, with --schedule: see `pstrain local --help`;\n"
                              "its plots add samples/s and the workers over time),\n"
                              "--repeats R (seeds --seed .. --seed+R-1 for every mode, default 1),\n"
                              "--targets LIST (default 0.85,0.88,0.90; --target-accuracy X: one target),\n"
                              "--encodings LIST (PUSH[/PULL] each, e.g. none,fp16/fp16,topk:0.01/fp16: every\n"
                              "mode once per encoding), --links LIST (RATE[,DELAY[,LOSS]] each, separated by\n"
                              "';': every mode once per --link),\n"
                              "--out DIR (default: a new /tmp/pstrain-run-* directory).\n"
                              "Use --eval-every STEPS for accuracy curves (a test subset of --eval-samples).\n"
                              "Writes per-run metrics and logs, PNG plots (gnuplot), summary.md and a\n"
                              "self-contained report.html, all under DIR; nothing in the current directory.\n");
  free(rest);
  free(args);
  if (rc == 1) return 0;
  if (rc) return rc;
  if (!workers_arg) { /* one count: --workers's default, the config file's, or --gpus's */
    int w = pl_job_workers(&base);
    counts[0] = w > 0 ? w : base.workers;
    ncounts = 1;
  }
  int64_t repeats = 0;
  if (pst_parse_int(repeats_arg, 1, MAX_REPEATS, &repeats) < 0) {
    fprintf(stderr, "pstrain compare: --repeats must be in 1..%d\n", MAX_REPEATS);
    return 2;
  }
  if (base.seed > INT64_MAX - repeats) {
    fprintf(stderr, "pstrain compare: --seed + --repeats must stay below 2^63\n");
    return 2;
  }
  double targets[MAX_TARGETS];
  int ntargets = parse_targets(target_arg ? target_arg : targets_arg, targets, MAX_TARGETS);
  if (ntargets <= 0) {
    fprintf(stderr, "pstrain compare: --targets wants up to %d accuracies in (0, 1], like 0.85,0.9\n",
            MAX_TARGETS);
    return 2;
  }
  static mode_run grid[MAX_COUNTS][MAX_MODES];
  int n = parse_modes(modes_arg, grid[0], MAX_MODES);
  if (n <= 0) {
    fprintf(stderr, "pstrain compare: --modes wants a list of sync, async, ssp or ssp:S, async and ssp with +sa for the staleness-aware learning rate (up to %d)\n",
            MAX_MODES);
    return 2;
  }
  if (encodings_arg || links_arg) {
    char serr[400];
    n = expand_settings(grid[0], n, MAX_MODES, encodings_arg, links_arg, serr, sizeof serr);
    if (n < 0) {
      fprintf(stderr, "pstrain compare: %s\n", serr);
      return 2;
    }
  }
  for (int c = 1; c < ncounts; c++) memcpy(grid[c], grid[0], sizeof grid[0]);
  if (base.tensorboard_dir && mkdir(base.tensorboard_dir, 0755) < 0 && errno != EEXIST) {
    fprintf(stderr, "pstrain compare: cannot create %s: %s\n", base.tensorboard_dir, strerror(errno));
    return 1;
  }
  char out[PATH_MAX];
  if (pl_make_run_dir(out_arg, out, sizeof out) < 0) return 1;
  char abs_out[PATH_MAX];
  if (!realpath(out, abs_out)) snprintf(abs_out, sizeof abs_out, "%s", out);
  if (!workers_arg) snprintf(wflag, sizeof wflag, "%d", counts[0]);
  char command[4096], machine[512], load_start[128], load_end[128], date[64];
  pl_cmp_command_line(command, sizeof command, argc, argv);
  pl_cmp_machine_line(machine, sizeof machine);
  pl_cmp_load_line(load_start, sizeof load_start);
  time_t now = time(NULL);
  strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
  printf("pstrain compare: %d mode%s x %ld seed%s, workers %s, model %s, %d epochs, batch %d per "
         "worker%s\nrun directory: %s\n",
         n, n > 1 ? "s" : "", repeats, repeats > 1 ? "s" : "", workers_arg ? workers_arg : wflag,
         base.model, base.epochs, base.batch_size,
         base.eval_every > 0 ? "" : " (no --eval-every: one evaluation per epoch)", abs_out);
  fflush(stdout);
  double t_start = pst_now();
  int failures = 0;
  /* Repeat k of every mode runs before repeat k+1 of any, so that a machine whose load
   * changes over the session weighs on every mode alike. */
  for (int c = 0; c < ncounts; c++) {
    for (long k = 0; k < repeats; k++) {
      for (int i = 0; i < n; i++) {
        mode_run *m = &grid[c][i];
        run_rec *r = &m->reps[k];
        pl_run_options o = base;
        o.workers = counts[c];
        o.mode = m->mode;
        o.staleness = m->staleness;
        o.staleness_lr = m->staleness_lr || base.staleness_lr;
        if (m->push[0]) o.push_compress = strcmp(m->push, "none") ? m->push : NULL;
        if (m->pull[0]) o.pull_compress = strcmp(m->pull, "none") ? m->pull : NULL;
        if (m->link[0]) o.link = m->link;
        o.seed = base.seed + k;
        r->seed = o.seed;
        /* The run's folder (and TensorBoard run): the mode, then wN- in a sweep and -rK with
         * repeats, so that a plain comparison keeps one folder per mode. */
        char name[96], label[128], rep[24] = "";
        if (repeats > 1) snprintf(rep, sizeof rep, "-r%ld", k + 1);
        if (ncounts > 1) snprintf(name, sizeof name, "w%d-%s%s", counts[c], m->safe, rep);
        else snprintf(name, sizeof name, "%s%s", m->safe, rep);
        snprintf(label, sizeof label, "[%s] ", name);
        o.label = label;
        char want[PATH_MAX + 100];
        snprintf(want, sizeof want, "%s/%s", abs_out, name);
        if (pl_make_run_dir(want, r->dir, sizeof r->dir) < 0) return 1;
        o.run_dir = r->dir;
        o.metrics_path = NULL;
        o.summary_path = NULL;
        /* TensorBoard overlays the runs of sub-directories: one per run, named as the folders. */
        char tb[PATH_MAX + 100];
        if (base.tensorboard_dir) {
          snprintf(tb, sizeof tb, "%s/%s", base.tensorboard_dir, name);
          o.tensorboard_dir = tb;
        }
        printf("[%s] running (seed %lld)\n", name, o.seed);
        fflush(stdout);
        pl_run_result res;
        r->rc = pl_run_local(&o, &res);
        if (r->rc == 130) return 130;
        if (r->rc) failures++;
        digest(m, r, &o, targets, ntargets);
      }
    }
  }
  double elapsed = pst_now() - t_start;
  pl_cmp_load_line(load_end, sizeof load_end);

  /* Plots, where gnuplot is installed. Every figure is also in summary.md, report.html and
   * compare.json, so a host without it (a GPU host running the bundle) still gets its
   * comparison, with one line saying why there are no plots. */
  int plots_ok = 1;
  char gnuplot[PATH_MAX];
  int have_gnuplot = pl_find_program("gnuplot", NULL, gnuplot, sizeof gnuplot) == 0;
  if (!have_gnuplot)
    fprintf(stderr, "pstrain compare: gnuplot not found on PATH: no plots (./pstrain installs "
                    "gnuplot-nox)\n");
  for (int c = 0; c < ncounts && have_gnuplot; c++) {
    char prefix[32] = "";
    if (ncounts > 1) snprintf(prefix, sizeof prefix, "w%d-", counts[c]);
    int dense = 0;
    for (int i = 0; i < n; i++) dense |= grid[c][i].reps[0].dense;
    if (pl_cmp_plot_count(abs_out, prefix, grid[c], n, (int)repeats, dense,
                   base.eval_samples > 0 ? base.eval_samples : 2000, counts[c]) < 0)
      plots_ok = 0;
  }
  if (have_gnuplot && ncounts > 1 && pl_cmp_plot_scaling(abs_out, grid, counts, ncounts, n, (int)repeats) < 0) plots_ok = 0;

  /* summary.md and report.html. */
  char md[PATH_MAX + 32], html[PATH_MAX + 32];
  snprintf(md, sizeof md, "%s/summary.md", abs_out);
  snprintf(html, sizeof html, "%s/report.html", abs_out);
  char cond[512] = "";
  size_t cl = 0;
  for (int i = 0; i < PL_MAX_WORKERS && cl < sizeof cond - 40; i++) {
    if (base.slow_factor[i] > 1)
      cl += (size_t)snprintf(cond + cl, sizeof cond - cl, "%sworker %d %gx slower", cl ? ", " : "",
                             i, base.slow_factor[i]);
    if (base.delay_ms[i] > 0)
      cl += (size_t)snprintf(cond + cl, sizeof cond - cl, "%sworker %d's pulls and pushes %g ms late",
                             cl ? ", " : "", i, base.delay_ms[i]);
  }
  char about[1024];
  snprintf(about, sizeof about,
           "model %s, %d epochs, batch %d per worker, %s lr %g%s%s, seeds %lld..%lld; %s; %s",
           base.model, base.epochs, base.batch_size, base.optimizer, base.lr,
           base.lr_schedule ? " " : "", base.lr_schedule ? base.lr_schedule : "", base.seed,
           base.seed + repeats - 1, cond[0] ? cond : "no slowed worker",
           base.eval_every > 0 ? "dense evaluation" : "one evaluation per epoch");
  char evaldesc[256];
  if (base.eval_every > 0)
    snprintf(evaldesc, sizeof evaldesc,
             "Curves and times to a target: evaluations of a fixed test subset of %d samples "
             "each time the ps reached another %d steps' worth of samples (%d x workers "
             "batches); final accuracy: the full test set after the last epoch.",
             base.eval_samples > 0 ? base.eval_samples : 2000, base.eval_every, base.eval_every);
  else
    snprintf(evaldesc, sizeof evaldesc,
             "Curves and times to a target: the full test set after each epoch (add --eval-every "
             "for denser curves).");
  FILE *f = fopen(md, "w");
  FILE *h = fopen(html, "w");
  if (!f || !h) {
    fprintf(stderr, "pstrain compare: cannot write %s: %s\n", f ? html : md, strerror(errno));
    if (f) fclose(f);
    if (h) fclose(h);
    return 1;
  }
  fprintf(f, "# pstrain compare\n\n- command: `%s`\n- machine: %s\n- date: %s; %.0f s in all; load "
             "average at start %s, at end %s\n- %s\n\n%s Times are training seconds: the "
             "workers' evaluation time is left out. Each cell is the median over the seeds, "
             "with [min, max] when there are several.\n\n",
          command, machine, date, elapsed, load_start, load_end, about, evaldesc);
  fprintf(h, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>pstrain compare</title>\n"
             "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
             "table{border-collapse:collapse;font-size:0.9em;margin:1em 0}th,td{border:1px solid #bbb;"
             "padding:0.3em 0.5em;text-align:right}th{background:#eee}td:first-child{text-align:left}"
             "code{background:#f4f4f4;padding:0.1em 0.3em}img{max-width:100%%}figure{margin:1em 0}"
             "</style></head><body>\n<h1>pstrain compare</h1>\n<ul><li>command: <code>");
  pl_cmp_html_text(h, command);
  fprintf(h, "</code></li>\n<li>machine: ");
  pl_cmp_html_text(h, machine);
  fprintf(h, "</li>\n<li>date: %s; %.0f s in all; load average at start %s, at end %s</li>\n<li>",
          date, elapsed, load_start, load_end);
  pl_cmp_html_text(h, about);
  fprintf(h, "</li></ul>\n<p>");
  pl_cmp_html_text(h, evaldesc);
  fprintf(h, " Times are training seconds: the workers' evaluation time is left out. Each cell is "
             "the median over the seeds, with [min, max] when there are several.</p>\n");
  printf("\n");
  for (int c = 0; c < ncounts; c++) {
    char prefix[32] = "";
    if (ncounts > 1) snprintf(prefix, sizeof prefix, "w%d-", counts[c]);
    char title[128];
    snprintf(title, sizeof title, "%d worker%s", counts[c], counts[c] > 1 ? "s" : "");
    fprintf(f, "## %s\n\n", title);
    pl_cmp_md_table(f, grid[c], n, (int)repeats, targets, ntargets);
    fprintf(h, "<h2>%s</h2>\n", title);
    pl_cmp_html_table(h, grid[c], n, (int)repeats, targets, ntargets);
    pl_cmp_plots_section(f, h, abs_out, prefix, grid[c], n, have_gnuplot);
    printf("## %s\n\n", title);
    pl_cmp_md_table(stdout, grid[c], n, (int)repeats, targets, ntargets);
    printf("\n");
  }
  if (ncounts > 1 && have_gnuplot) {
    fprintf(f, "## Scaling\n\nscaling.png: training samples/s against the worker count.\n\n");
    fprintf(h, "<h2>Scaling</h2>\n");
    pl_cmp_html_image(h, abs_out, "scaling.png");
  }
  fprintf(f, "Per-run metrics (JSON lines), summaries and logs are in the per-run folders "
             "(MODE, with -rK for seed --seed + K - 1 and a wN- prefix in a sweep).\n");
  fprintf(h, "<p>Per-run metrics (JSON lines), summaries and logs are in the per-run folders "
             "beside this file.</p>\n</body></html>\n");
  int werr = ferror(f) || ferror(h);
  werr |= fclose(f) != 0;
  werr |= fclose(h) != 0;
  if (werr) {
    fprintf(stderr, "pstrain compare: cannot write %s or %s\n", md, html);
    return 1;
  }
  char json[PATH_MAX + 32];
  snprintf(json, sizeof json, "%s/compare.json", abs_out);
  int jrc = pl_cmp_write_json(json, grid, counts, ncounts, n, (int)repeats, targets, ntargets);
  if (jrc < 0) fprintf(stderr, "pstrain compare: cannot write %s: %s\n", json, strerror(-jrc));
  for (int c = 0; c < ncounts; c++)
    for (int i = 0; i < n; i++)
      for (long k = 0; k < repeats; k++) free(grid[c][i].reps[k].pts);
  printf("report: %s\nsummary: %s\nrun directory: %s (%.0f s)\n", html, md, abs_out, elapsed);
  if (jrc < 0) return 1;
  if (!plots_ok) return 1;
  return failures ? 1 : 0;
}
