/* `pstrain bench-train`: the same training job with 1, 2, 4 and 8 workers (or a given list),
 * one after the other, for one model or several (--models), and a table of what scale-out
 * gives: samples/s and steps/s, the ratio to one worker, each worker's compute-only rate
 * beside it (what the workers themselves measured while computing, from their logs), the
 * share of that compute rate the job reached, each step's exposed round trip (p50 and p99,
 * from the ps's summary) and the ps's CPU time per gradient. With --device null the workers
 * compute nothing, and the rows are the ceiling any device can reach (issue 26). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/json_file.h"
#include "launcher/commands.h"
#include "launcher/common/helpers.h"
#include "launcher/run/local.h"
#include "launcher/run/run.h"
#include "launcher/run/run_elastic.h"
#include "launcher/run/run_files.h"
#include "model/model.h"

#define MAX_COUNTS 16
#define MAX_MODELS 16

typedef struct {
  const char *model;
  int workers;
  char dir[PATH_MAX];
  pl_run_result res;
  int rc;
  double samples_per_sec, steps_per_sec, accuracy, ps_cpu_ms;
  double rt_p50, rt_p99; /* ms: each step's exposed wait (the ps's summary; -1: absent) */
  double compute_mean;   /* mean over the workers of their last "samples/s computing" */
  double wire_step, wire_sample; /* bytes on the ps's port per update and per sample */
  int compute_seen;      /* workers whose log had that figure */
} count_run;

/* A worker's compute-only rate: the last "N samples/s computing" of its log, or -1. */
static double worker_compute_rate(const char *dir, int i) {
  char path[PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/worker%d.log", dir, i);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[1024];
  double rate = -1;
  while (fgets(line, sizeof line, f)) {
    char *p = strstr(line, " samples/s computing");
    if (!p) continue;
    char *q = p;
    while (q > line && (q[-1] == '.' || (q[-1] >= '0' && q[-1] <= '9'))) q--;
    if (q < p) rate = strtod(q, NULL);
  }
  fclose(f);
  return rate;
}

/* A number inside the summary's "round_trip_ms" object: part's p50 or p99, or -1. */
static double round_trip_ms(const char *summary, const char *part, const char *q) {
  cJSON *o = cJSON_Parse(summary);
  cJSON *rt = cJSON_GetObjectItemCaseSensitive(o, "round_trip_ms");
  cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(rt, part), q);
  double x = cJSON_IsNumber(v) ? v->valuedouble : -1;
  cJSON_Delete(o);
  return x;
}

static void digest(count_run *r, int batch) {
  const char *s = r->res.summary_json;
  r->samples_per_sec = pl_json_num(s, "samples_per_sec");
  r->steps_per_sec = r->samples_per_sec > 0 ? r->samples_per_sec / batch / r->workers : 0;
  r->accuracy = pl_json_num(s, "test_accuracy");
  r->ps_cpu_ms = pl_json_num(s, "ps_cpu_ms_per_gradient");
  r->rt_p50 = pl_json_num(s, "round_trip_steps") > 0 ? round_trip_ms(s, "exposed", "p50") : -1;
  r->rt_p99 = r->rt_p50 >= 0 ? round_trip_ms(s, "exposed", "p99") : -1;
  r->wire_step = pl_json_num(s, "wire_bytes_per_step");
  r->wire_sample = pl_json_num(s, "wire_bytes_per_sample");
  double sum = 0;
  r->compute_seen = 0;
  for (int i = 0; i < r->workers; i++) {
    double v = worker_compute_rate(r->dir, i);
    if (v > 0) sum += v, r->compute_seen++;
  }
  r->compute_mean = r->compute_seen ? sum / r->compute_seen : -1;
}

static void table(FILE *f, const count_run *runs, int n, const char *title) {
  fprintf(f, "%s\n\n", title);
  fprintf(f, "| model | workers | samples/s | steps/s per worker | x 1 worker | compute-only "
             "samples/s per worker | of workers x compute | round trip p50 / p99 ms | ps CPU "
             "ms per gradient | wire MB per step | wire bytes per sample | test accuracy |\n");
  fprintf(f, "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  double one = 0;
  for (int i = 0; i < n; i++) {
    const count_run *r = &runs[i];
    /* Scale-out is against this model's first row. */
    if (i == 0 || strcmp(r->model, runs[i - 1].model))
      one = r->rc == 0 ? r->samples_per_sec / r->workers : 0;
    if (r->rc) {
      fprintf(f, "| %s | %d | failed (status %d; logs in %s) | | | | | | | | | |\n", r->model,
              r->workers, r->rc, r->dir);
      continue;
    }
    char x1[32] = "-", share[32] = "-", comp[32] = "-", rt[48] = "-";
    if (one > 0) snprintf(x1, sizeof x1, "%.2fx", r->samples_per_sec / one);
    if (r->compute_mean > 0) {
      snprintf(comp, sizeof comp, "%.0f", r->compute_mean);
      snprintf(share, sizeof share, "%.0f%%",
               100.0 * r->samples_per_sec / (r->compute_mean * r->workers));
    }
    if (r->rt_p50 >= 0) snprintf(rt, sizeof rt, "%.3f / %.3f", r->rt_p50, r->rt_p99);
    /* A job without a ps (--mode allreduce) has no ps CPU and no ps port to count: "-". */
    char cpu[32] = "-", wstep[32] = "-", wsample[32] = "-";
    if (r->ps_cpu_ms >= 0) snprintf(cpu, sizeof cpu, "%.3f", r->ps_cpu_ms);
    if (r->wire_step >= 0) snprintf(wstep, sizeof wstep, "%.3f", r->wire_step / 1e6);
    if (r->wire_sample >= 0) snprintf(wsample, sizeof wsample, "%.0f", r->wire_sample);
    fprintf(f, "| %s | %d | %.0f | %.1f | %s | %s | %s | %s | %s | %s | %s | %.4f |\n",
            r->model, r->workers, r->samples_per_sec, r->steps_per_sec, x1, comp, share, rt,
            cpu, wstep, wsample, r->accuracy);
  }
}

static int write_json(const char *path, const count_run *runs, int n, const pl_run_options *o) {
  cJSON *doc = cJSON_CreateObject(), *rows = cJSON_AddArrayToObject(doc, "runs");
  cJSON_AddStringToObject(doc, "mode", o->mode);
  cJSON_AddStringToObject(doc, "device", o->device ? o->device : "auto");
  cJSON_AddNumberToObject(doc, "epochs", o->epochs);
  cJSON_AddNumberToObject(doc, "batch_size", o->batch_size);
  cJSON_AddNumberToObject(doc, "threads_per_worker", o->threads);
  cJSON_AddStringToObject(doc, "push_compress", o->push_compress ? o->push_compress : "none");
  cJSON_AddStringToObject(doc, "pull_compress", o->pull_compress ? o->pull_compress : "none");
  for (int i = 0; i < n; i++) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "model", runs[i].model);
    cJSON_AddNumberToObject(r, "workers", runs[i].workers);
    cJSON_AddBoolToObject(r, "ok", runs[i].rc == 0);
    cJSON_AddNumberToObject(r, "samples_per_sec", runs[i].samples_per_sec);
    cJSON_AddNumberToObject(r, "steps_per_sec_per_worker", runs[i].steps_per_sec);
    cJSON_AddNumberToObject(r, "compute_samples_per_sec_per_worker", runs[i].compute_mean);
    cJSON_AddNumberToObject(r, "round_trip_p50_ms", runs[i].rt_p50);
    cJSON_AddNumberToObject(r, "round_trip_p99_ms", runs[i].rt_p99);
    cJSON_AddNumberToObject(r, "ps_cpu_ms_per_gradient", runs[i].ps_cpu_ms);
    cJSON_AddNumberToObject(r, "wire_bytes_per_step", runs[i].wire_step);
    cJSON_AddNumberToObject(r, "wire_bytes_per_sample", runs[i].wire_sample);
    cJSON_AddNumberToObject(r, "test_accuracy", runs[i].accuracy);
    cJSON_AddItemToArray(rows, r);
  }
  int rc = pst_json_write_file(path, doc, 1);
  cJSON_Delete(doc);
  return rc;
}

/* --models: a comma-separated list, "presets" for every preset. Returns how many, or -1. */
static int parse_models(const char *arg, char *store, size_t storelen, const char **out) {
  snprintf(store, storelen, "%s", strcmp(arg, "presets") ? arg : PST_MODEL_PRESETS);
  int n = 0;
  for (char *save = NULL, *m = strtok_r(store, ",", &save); m; m = strtok_r(NULL, ",", &save)) {
    if (n == MAX_MODELS) return -1;
    out[n++] = m;
  }
  return n > 0 ? n : -1;
}

int pl_cmd_bench_train(int argc, char **argv) {
  const char *counts_arg = "1,2,4,8", *out = "pstrain-bench-train", *json = NULL;
  const char *models_arg = NULL;
  /* Our own flags first; everything else is a run flag shared with `local`. One epoch unless
   * --epochs says otherwise: it comes first, so a later --epochs wins. Each model of --models
   * is given as a last --model. */
  char **rest = calloc((size_t)argc + 5, sizeof *rest);
  if (!rest) {
    fprintf(stderr, "pstrain bench-train: out of memory\n");
    return 1;
  }
  int nrest = 0;
  rest[nrest++] = argv[0];
  rest[nrest++] = "--epochs";
  rest[nrest++] = "1";
  static const char *const names[] = {"--worker-counts", "--out", "--json", "--models"};
  const char **const values[] = {&counts_arg, &out, &json, &models_arg};
  if (pl_split_flags("bench-train", argc, argv, names, values, 4, rest, &nrest) != 0) {
    free(rest);
    return 2;
  }
  static const char usage[] =
      "Also: --worker-counts LIST (default 1,2,4,8), --models LIST (default: --model's; presets:\n"
      "every preset, each at its own input size), --out DIR (default ./pstrain-bench-train),\n"
      "--json FILE. Runs the job (1 epoch unless --epochs says otherwise) with each number of\n"
      "workers in turn and prints samples/s and the round trip beside each worker's\n"
      "compute-only rate; with --device null the workers compute nothing and the rows are\n"
      "the ceiling any device can reach.\n";
  pl_run_options base;
  static pst_model model;
  int rc = pl_parse_run_flags("bench-train", nrest, rest, &base, &model, usage);
  if (rc == 1 || rc) {
    free(rest);
    return rc == 1 ? 0 : rc;
  }
  /* Each measurement is a fixed number of workers; an elastic job's changing count would
   * make its samples/s belong to no row of the table. */
  if (pl_elastic(&base)) {
    fprintf(stderr, "pstrain bench-train: --workers MIN:MAX and --schedule are for `pstrain "
                    "local` and `pstrain compare`\n");
    free(rest);
    return 2;
  }
  static char model_store[1024];
  const char *models[MAX_MODELS];
  int n_models = 1;
  models[0] = base.model;
  if (models_arg &&
      (n_models = parse_models(models_arg, model_store, sizeof model_store, models)) < 0) {
    fprintf(stderr, "pstrain bench-train: --models wants up to %d models, comma-separated, "
                    "or presets\n", MAX_MODELS);
    free(rest);
    return 2;
  }
  static count_run runs[MAX_COUNTS * MAX_MODELS];
  int counts[MAX_COUNTS];
  int n = pl_parse_int_list(counts_arg, counts, MAX_COUNTS, 1, PL_MAX_WORKERS);
  if (n <= 0) {
    fprintf(stderr, "pstrain bench-train: --worker-counts wants up to %d numbers in 1..%d, "
                    "e.g. 1,2,4,8\n", MAX_COUNTS, PL_MAX_WORKERS);
    free(rest);
    return 2;
  }
  if (mkdir(out, 0755) < 0 && errno != EEXIST) {
    fprintf(stderr, "pstrain bench-train: cannot create %s: %s\n", out, strerror(errno));
    free(rest);
    return 1;
  }
  char abs_out[PATH_MAX];
  if (!realpath(out, abs_out)) snprintf(abs_out, sizeof abs_out, "%s", out);
  printf("pstrain bench-train: %s, %d epoch%s, batch %d per worker, %s, %d thread%s per "
         "worker; output in %s\n",
         base.mode, base.epochs, base.epochs == 1 ? "" : "s", base.batch_size,
         base.device ? base.device : "device auto", base.threads, base.threads == 1 ? "" : "s",
         abs_out);
  int failures = 0, total = 0;
  for (int m = 0; m < n_models; m++) {
    /* Each model with its own spec's settings (its optimizer line) and, unless --image-size
     * says otherwise, the data resized to its own input. */
    pl_run_options o = base;
    static pst_data_flags data;
    if (models_arg) {
      rest[nrest] = "--model";
      rest[nrest + 1] = (char *)models[m];
      if ((rc = pl_parse_run_flags("bench-train", nrest + 2, rest, &o, &model, usage)) != 0) {
        free(rest);
        return rc == 1 ? 0 : rc;
      }
      const pst_layer *in = &model.layers[0];
      if (o.data_flags && !o.data_flags->image_size[0] && in->in_h > 1 && in->in_w > 1) {
        data = *o.data_flags;
        snprintf(data.image_size, sizeof data.image_size, "%dx%d", in->in_h, in->in_w);
        o.data_flags = &data;
      }
    }
    for (int i = 0; i < n; i++) {
      count_run *r = &runs[total++];
      r->model = models[m];
      r->workers = counts[i];
      o.workers = counts[i];
      char label[96], want[PATH_MAX + 96];
      snprintf(label, sizeof label, "[%s, %d workers] ", models[m], counts[i]);
      o.label = label;
      o.quiet = 1;
      if (n_models > 1)
        snprintf(want, sizeof want, "%s/%s-workers-%d", abs_out, models[m], counts[i]);
      else
        snprintf(want, sizeof want, "%s/workers-%d", abs_out, counts[i]);
      if (pl_make_run_dir(want, r->dir, sizeof r->dir) < 0) {
        free(rest);
        return 1;
      }
      o.run_dir = r->dir;
      o.metrics_path = NULL;
      o.summary_path = NULL;
      printf("%srunning\n", label);
      fflush(stdout);
      r->rc = pl_run_local(&o, &r->res);
      if (r->rc == 130) {
        free(rest);
        return 130;
      }
      if (r->rc) failures++;
      digest(r, o.batch_size);
    }
  }
  free(rest);
  char title[256];
  snprintf(title, sizeof title,
           "## pstrain bench-train: %s, %s, %d epoch%s, batch %d per worker, push %s, pull %s",
           base.mode, base.device ? base.device : "device auto", base.epochs,
           base.epochs == 1 ? "" : "s", base.batch_size,
           base.push_compress ? base.push_compress : "none",
           base.pull_compress ? base.pull_compress : "none");
  printf("\n");
  table(stdout, runs, total, title);
  char md[PATH_MAX + 32];
  snprintf(md, sizeof md, "%s/summary.md", abs_out);
  FILE *f = fopen(md, "w");
  if (f) {
    table(f, runs, total, title);
    fclose(f);
  }
  if (json && write_json(json, runs, total, &base) < 0) {
    fprintf(stderr, "pstrain bench-train: cannot write %s\n", json);
    return 1;
  }
  printf("\ntable: %s\n", md);
  return failures ? 1 : 0;
}
