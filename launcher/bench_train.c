/* `pstrain bench-train`: the same training job with 1, 2, 4 and 8 workers (or a given list),
 * one after the other, and a table of what scale-out gives: samples/s, its ratio to one
 * worker, each worker's compute-only rate beside it (what the workers themselves measured
 * while computing, from their logs), the share of that compute rate the job reached, and the
 * ps's CPU time per gradient (from its summary). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/json_file.h"
#include "launcher/commands.h"

#define MAX_COUNTS 16

typedef struct {
  int workers;
  char dir[PATH_MAX];
  pl_run_result res;
  int rc;
  double samples_per_sec, accuracy, ps_cpu_ms;
  double compute_mean; /* mean over the workers of their last "samples/s computing" */
  int compute_seen;    /* workers whose log had that figure */
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

static void digest(count_run *r) {
  const char *s = r->res.summary_json;
  r->samples_per_sec = pl_json_num(s, "samples_per_sec");
  r->accuracy = pl_json_num(s, "test_accuracy");
  r->ps_cpu_ms = pl_json_num(s, "ps_cpu_ms_per_gradient");
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
  fprintf(f, "| workers | samples/s | x 1 worker | compute-only samples/s per worker | "
             "of workers x compute | ps CPU ms per gradient | test accuracy |\n");
  fprintf(f, "|---|---|---|---|---|---|---|\n");
  double one = n > 0 && runs[0].rc == 0 ? runs[0].samples_per_sec / runs[0].workers : 0;
  for (int i = 0; i < n; i++) {
    const count_run *r = &runs[i];
    if (r->rc) {
      fprintf(f, "| %d | failed (status %d; logs in %s) | | | | | |\n", r->workers, r->rc, r->dir);
      continue;
    }
    char x1[32] = "-", share[32] = "-", comp[32] = "-";
    if (one > 0) snprintf(x1, sizeof x1, "%.2fx", r->samples_per_sec / one);
    if (r->compute_mean > 0) {
      snprintf(comp, sizeof comp, "%.0f", r->compute_mean);
      snprintf(share, sizeof share, "%.0f%%",
               100.0 * r->samples_per_sec / (r->compute_mean * r->workers));
    }
    fprintf(f, "| %d | %.0f | %s | %s | %s | %.3f | %.4f |\n", r->workers, r->samples_per_sec, x1,
            comp, share, r->ps_cpu_ms, r->accuracy);
  }
}

static int write_json(const char *path, const count_run *runs, int n, const pl_run_options *o) {
  cJSON *doc = cJSON_CreateObject(), *rows = cJSON_AddArrayToObject(doc, "runs");
  cJSON_AddStringToObject(doc, "mode", o->mode);
  cJSON_AddStringToObject(doc, "model", o->model);
  cJSON_AddNumberToObject(doc, "epochs", o->epochs);
  cJSON_AddNumberToObject(doc, "batch_size", o->batch_size);
  cJSON_AddNumberToObject(doc, "threads_per_worker", o->threads);
  for (int i = 0; i < n; i++) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "workers", runs[i].workers);
    cJSON_AddBoolToObject(r, "ok", runs[i].rc == 0);
    cJSON_AddNumberToObject(r, "samples_per_sec", runs[i].samples_per_sec);
    cJSON_AddNumberToObject(r, "compute_samples_per_sec_per_worker", runs[i].compute_mean);
    cJSON_AddNumberToObject(r, "ps_cpu_ms_per_gradient", runs[i].ps_cpu_ms);
    cJSON_AddNumberToObject(r, "test_accuracy", runs[i].accuracy);
    cJSON_AddItemToArray(rows, r);
  }
  int rc = pst_json_write_file(path, doc, 1);
  cJSON_Delete(doc);
  return rc;
}

int pl_cmd_bench_train(int argc, char **argv) {
  const char *counts_arg = "1,2,4,8", *out = "pstrain-bench-train", *json = NULL;
  /* Our own flags first; everything else is a run flag shared with `local`. One epoch unless
   * --epochs says otherwise: it comes first, so a later --epochs wins. */
  char **rest = calloc((size_t)argc + 3, sizeof *rest);
  if (!rest) {
    fprintf(stderr, "pstrain bench-train: out of memory\n");
    return 1;
  }
  int nrest = 0;
  rest[nrest++] = argv[0];
  rest[nrest++] = "--epochs";
  rest[nrest++] = "1";
  static const char *const names[] = {"--worker-counts", "--out", "--json"};
  const char **const values[] = {&counts_arg, &out, &json};
  if (pl_split_flags("bench-train", argc, argv, names, values, 3, rest, &nrest) != 0) {
    free(rest);
    return 2;
  }
  pl_run_options base;
  static pst_model model;
  int rc = pl_parse_run_flags("bench-train", nrest, rest, &base, &model,
                              "Also: --worker-counts LIST (default 1,2,4,8), --out DIR (default\n"
                              "./pstrain-bench-train), --json FILE. Runs the job (1 epoch unless\n"
                              "--epochs says otherwise) with each number of workers in turn and\n"
                              "prints samples/s beside each worker's compute-only rate.\n");
  free(rest);
  if (rc == 1) return 0;
  if (rc) return rc;
  static count_run runs[MAX_COUNTS];
  int counts[MAX_COUNTS];
  int n = pl_parse_int_list(counts_arg, counts, MAX_COUNTS, 1, PL_MAX_WORKERS);
  if (n <= 0) {
    fprintf(stderr, "pstrain bench-train: --worker-counts wants up to %d numbers in 1..%d, "
                    "e.g. 1,2,4,8\n", MAX_COUNTS, PL_MAX_WORKERS);
    return 2;
  }
  if (mkdir(out, 0755) < 0 && errno != EEXIST) {
    fprintf(stderr, "pstrain bench-train: cannot create %s: %s\n", out, strerror(errno));
    return 1;
  }
  char abs_out[PATH_MAX];
  if (!realpath(out, abs_out)) snprintf(abs_out, sizeof abs_out, "%s", out);
  printf("pstrain bench-train: %s, model %s, %d epoch%s, batch %d per worker, %d thread%s per "
         "worker; output in %s\n",
         base.mode, base.model, base.epochs, base.epochs == 1 ? "" : "s", base.batch_size,
         base.threads, base.threads == 1 ? "" : "s", abs_out);
  int failures = 0;
  for (int i = 0; i < n; i++) {
    count_run *r = &runs[i];
    r->workers = counts[i];
    pl_run_options o = base;
    o.workers = counts[i];
    char label[32], want[PATH_MAX + 32];
    snprintf(label, sizeof label, "[%d workers] ", counts[i]);
    o.label = label;
    o.quiet = 1;
    snprintf(want, sizeof want, "%s/workers-%d", abs_out, counts[i]);
    if (pl_make_run_dir(want, r->dir, sizeof r->dir) < 0) return 1;
    o.run_dir = r->dir;
    o.metrics_path = NULL;
    o.summary_path = NULL;
    printf("[%d workers] running\n", counts[i]);
    fflush(stdout);
    r->rc = pl_run_local(&o, &r->res);
    if (r->rc == 130) return 130;
    if (r->rc) failures++;
    digest(r);
  }
  char title[256];
  snprintf(title, sizeof title, "## pstrain bench-train: %s, model %s, %d epoch%s, batch %d per worker",
           base.mode, base.model, base.epochs, base.epochs == 1 ? "" : "s", base.batch_size);
  printf("\n");
  table(stdout, runs, n, title);
  char md[PATH_MAX + 32];
  snprintf(md, sizeof md, "%s/summary.md", abs_out);
  FILE *f = fopen(md, "w");
  if (f) {
    table(f, runs, n, title);
    fclose(f);
  }
  if (json && write_json(json, runs, n, &base) < 0) {
    fprintf(stderr, "pstrain bench-train: cannot write %s\n", json);
    return 1;
  }
  printf("\ntable: %s\n", md);
  return failures ? 1 : 0;
}
