/* `pstrain bench-train`: the same training job with 1, 2, 4 and 8 workers (or a given list),
 * one after the other, for one model or several (--models), under one update mode or several
 * (--modes, all-reduce among them), with PyTorch DDP on the same job beside them (--peer ddp,
 * peer_ddp.h), each cell --repeats times in rotation, and a table of what scale-out
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
#include "common/proc.h"
#include "launcher/bench/peer_ddp.h"
#include "launcher/commands.h"
#include "launcher/common/helpers.h"
#include "launcher/run/local.h"
#include "launcher/run/run.h"
#include "launcher/run/run_elastic.h"
#include "launcher/run/run_files.h"
#include "model/model.h"

#define MAX_COUNTS 16
#define MAX_MODELS 16
#define MAX_KINDS 5   /* the modes of --modes (up to 4) and the peer */
#define MAX_REPEATS 9

/* The peer's row: its "mode" in the table. */
static const char PEER_DDP[] = "PyTorch DDP (gloo)";

typedef struct {
  const char *model;
  const char *kind; /* the update mode (sync, async, ssp, allreduce) or PEER_DDP */
  int workers, batch;
  char dir[PATH_MAX];
  pl_run_result res;
  int rc;
  double samples_per_sec, steps_per_sec, accuracy, ps_cpu_ms;
  double rt_p50, rt_p99; /* ms: each step's exposed wait (the ps's summary; -1: absent) */
  double compute_mean;   /* mean over the workers of their last "samples/s computing" */
  /* Bytes moved between the workers and the ps per update and per sample: on the ps's port
   * and, with workers on its host, through shared memory (issue 41). */
  double wire_step, wire_sample;
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
  r->batch = batch;
  r->samples_per_sec = pl_json_num(s, "samples_per_sec");
  r->steps_per_sec = r->samples_per_sec > 0 ? r->samples_per_sec / batch / r->workers : 0;
  r->accuracy = pl_json_num(s, "test_accuracy");
  r->ps_cpu_ms = pl_json_num(s, "ps_cpu_ms_per_gradient");
  r->rt_p50 = pl_json_num(s, "round_trip_steps") > 0 ? round_trip_ms(s, "exposed", "p50") : -1;
  r->rt_p99 = r->rt_p50 >= 0 ? round_trip_ms(s, "exposed", "p99") : -1;
  r->wire_step = pl_json_num(s, "wire_bytes_per_step");
  r->wire_sample = pl_json_num(s, "wire_bytes_per_sample");
  if (pl_json_num(s, "shm_bytes_per_step") > 0) r->wire_step += pl_json_num(s, "shm_bytes_per_step");
  if (pl_json_num(s, "shm_bytes_per_sample") > 0)
    r->wire_sample += pl_json_num(s, "shm_bytes_per_sample");
  double sum = 0;
  r->compute_seen = 0;
  for (int i = 0; i < r->workers; i++) {
    double v = worker_compute_rate(r->dir, i);
    if (v > 0) sum += v, r->compute_seen++;
  }
  r->compute_mean = r->compute_seen ? sum / r->compute_seen : -1;
}

/* A cell of the table: one model, worker count and mode (or the peer), run --repeats times. */
typedef struct {
  count_run *runs; /* [repeats] */
  int n_ok;
  double median, lo, hi; /* samples/s over the runs that succeeded */
  const count_run *mid;  /* the run whose samples/s is the median (its other figures shown) */
  const char *skipped;   /* the peer's one-line reason when it did not run */
  int unfit;             /* the peer cannot run this job at all: no row */
  char why[512];         /* where that reason is kept when the peer said it */
} cell;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void settle(cell *c, int repeats) {
  double v[MAX_REPEATS];
  c->n_ok = 0;
  c->mid = NULL;
  for (int r = 0; r < repeats; r++)
    if (c->runs[r].rc == 0) v[c->n_ok++] = c->runs[r].samples_per_sec;
  if (!c->n_ok) return;
  qsort(v, (size_t)c->n_ok, sizeof v[0], cmp_double);
  c->median = c->n_ok % 2 ? v[c->n_ok / 2] : (v[c->n_ok / 2 - 1] + v[c->n_ok / 2]) / 2;
  c->lo = v[0];
  c->hi = v[c->n_ok - 1];
  double best = -1;
  for (int r = 0; r < repeats; r++) {
    const count_run *x = &c->runs[r];
    double d = x->samples_per_sec > c->median ? x->samples_per_sec - c->median
                                              : c->median - x->samples_per_sec;
    if (x->rc == 0 && (best < 0 || d < best)) best = d, c->mid = x;
  }
}

/* --device null:RATE: the rate each worker is paced at (samples a second), else 0. */
static double emulated_rate(const char *device) {
  if (!device || strncmp(device, "null:", 5) != 0) return 0;
  char *end;
  double r = strtod(device + 5, &end);
  return *end == '\0' && r > 0 ? r : 0;
}

/* rate: the emulated device's (emulated_rate), which adds the column of the job's share of
 * it: the workers' samples/s against what they would compute alone, the figure the GPU
 * worker is judged by (issue 41). */
static void table(FILE *f, const cell *cells, int n, int repeats, const char *title,
                  double rate) {
  fprintf(f, "%s\n\n", title);
  fprintf(f, "| model | mode | workers | samples/s%s | steps/s per worker | x 1 worker | "
             "compute-only samples/s per worker | of workers x compute | %sround trip p50 / p99 "
             "ms | ps CPU ms per gradient | wire MB per step | wire bytes per sample | test "
             "accuracy |\n", repeats > 1 ? " (median [min, max])" : "",
          rate > 0 ? "of workers x emulated rate | " : "");
  fprintf(f, "|---|---|---|---|---|---|---|---|---|%s---|---|---|---|\n", rate > 0 ? "---|" : "");
  double one = 0;
  for (int i = 0; i < n; i++) {
    const cell *c = &cells[i];
    const count_run *r = c->mid ? c->mid : &c->runs[0];
    /* Scale-out is against this model's and mode's first row. */
    if (i == 0 || strcmp(r->model, cells[i - 1].runs[0].model) ||
        strcmp(r->kind, cells[i - 1].runs[0].kind))
      one = c->n_ok ? c->median / r->workers : 0;
    if (c->skipped) {
      fprintf(f, "| %s | %s | %d | skipped: %s | | | | |%s | | | | |\n", r->model, r->kind,
              r->workers, c->skipped, rate > 0 ? " |" : "");
      continue;
    }
    if (!c->n_ok) {
      fprintf(f, "| %s | %s | %d | failed (status %d; logs in %s) | | | | |%s | | | | |\n",
              r->model, r->kind, r->workers, r->rc, r->dir, rate > 0 ? " |" : "");
      continue;
    }
    char sps[96], x1[32] = "-", share[32] = "-", comp[32] = "-", rt[48] = "-";
    if (repeats > 1)
      snprintf(sps, sizeof sps, "%.0f [%.0f, %.0f]%s", c->median, c->lo, c->hi,
               c->n_ok < repeats ? " (some failed)" : "");
    else
      snprintf(sps, sizeof sps, "%.0f", c->median);
    if (one > 0) snprintf(x1, sizeof x1, "%.2fx", c->median / one);
    if (r->compute_mean > 0) {
      snprintf(comp, sizeof comp, "%.0f", r->compute_mean);
      snprintf(share, sizeof share, "%.0f%%",
               100.0 * r->samples_per_sec / (r->compute_mean * r->workers));
    }
    if (r->rt_p50 >= 0) snprintf(rt, sizeof rt, "%.3f / %.3f", r->rt_p50, r->rt_p99);
    /* A job without a ps (all-reduce, the peer) has no ps CPU and no ps port to count: "-". */
    char cpu[32] = "-", wstep[32] = "-", wsample[32] = "-";
    if (r->ps_cpu_ms >= 0) snprintf(cpu, sizeof cpu, "%.3f", r->ps_cpu_ms);
    if (r->wire_step >= 0) snprintf(wstep, sizeof wstep, "%.3f", r->wire_step / 1e6);
    if (r->wire_sample >= 0) snprintf(wsample, sizeof wsample, "%.0f", r->wire_sample);
    char emu[32] = "";
    if (rate > 0) snprintf(emu, sizeof emu, "%.0f%% | ", 100.0 * c->median / (rate * r->workers));
    fprintf(f, "| %s | %s | %d | %s | %.1f | %s | %s | %s | %s%s | %s | %s | %s | %.4f |\n",
            r->model, r->kind, r->workers, sps, c->median / (r->batch * r->workers), x1,
            comp, share, emu, rt, cpu, wstep, wsample, r->accuracy);
  }
}

static int write_json(const char *path, const cell *cells, int n, int repeats,
                      const pl_run_options *o) {
  cJSON *doc = cJSON_CreateObject(), *rows = cJSON_AddArrayToObject(doc, "runs");
  cJSON_AddStringToObject(doc, "mode", o->mode);
  cJSON_AddStringToObject(doc, "device", o->device ? o->device : "auto");
  double rate = emulated_rate(o->device);
  if (rate > 0) cJSON_AddNumberToObject(doc, "emulated_samples_per_sec_per_worker", rate);
  cJSON_AddNumberToObject(doc, "epochs", o->epochs);
  cJSON_AddNumberToObject(doc, "batch_size", o->batch_size);
  cJSON_AddNumberToObject(doc, "threads_per_worker", o->threads);
  cJSON_AddNumberToObject(doc, "repeats", repeats);
  cJSON_AddStringToObject(doc, "push_compress", o->push_compress ? o->push_compress : "none");
  cJSON_AddStringToObject(doc, "pull_compress", o->pull_compress ? o->pull_compress : "none");
  for (int i = 0; i < n; i++) {
    const cell *c = &cells[i];
    const count_run *m = c->mid ? c->mid : &c->runs[0];
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "model", m->model);
    cJSON_AddStringToObject(r, "mode", m->kind);
    cJSON_AddNumberToObject(r, "workers", m->workers);
    cJSON_AddBoolToObject(r, "ok", c->n_ok == repeats);
    if (c->skipped) cJSON_AddStringToObject(r, "skipped", c->skipped);
    cJSON_AddNumberToObject(r, "samples_per_sec", c->n_ok ? c->median : 0);
    cJSON *all = cJSON_AddArrayToObject(r, "samples_per_sec_runs");
    for (int k = 0; k < repeats; k++)
      if (c->runs[k].rc == 0)
        cJSON_AddItemToArray(all, cJSON_CreateNumber(c->runs[k].samples_per_sec));
    cJSON_AddNumberToObject(r, "steps_per_sec_per_worker", m->steps_per_sec);
    if (rate > 0)
      cJSON_AddNumberToObject(r, "emulated_rate_share", c->n_ok ? c->median / (rate * m->workers) : 0);
    cJSON_AddNumberToObject(r, "compute_samples_per_sec_per_worker", m->compute_mean);
    cJSON_AddNumberToObject(r, "round_trip_p50_ms", m->rt_p50);
    cJSON_AddNumberToObject(r, "round_trip_p99_ms", m->rt_p99);
    cJSON_AddNumberToObject(r, "ps_cpu_ms_per_gradient", m->ps_cpu_ms);
    cJSON_AddNumberToObject(r, "wire_bytes_per_step", m->wire_step);
    cJSON_AddNumberToObject(r, "wire_bytes_per_sample", m->wire_sample);
    cJSON_AddNumberToObject(r, "test_accuracy", m->accuracy);
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

/* --modes: sync, async, ssp or allreduce, comma-separated, into store. How many, or -1. */
static int parse_modes(const char *arg, char *store, size_t storelen, const char **out) {
  snprintf(store, storelen, "%s", arg);
  int n = 0;
  for (char *save = NULL, *m = strtok_r(store, ",", &save); m; m = strtok_r(NULL, ",", &save)) {
    if (n == MAX_KINDS - 1 || (strcmp(m, "sync") && strcmp(m, "async") && strcmp(m, "ssp") &&
                               strcmp(m, "allreduce")))
      return -1;
    out[n++] = m;
  }
  return n > 0 ? n : -1;
}

/* One run of a cell: the job in its own directory, or the peer. 130 on Ctrl-C. */
static int run_one(count_run *r, cell *c, pl_run_options *o, const char *abs_out, int many_models,
                   int repeat, int repeats) {
  char label[128], want[PATH_MAX + 160], run[32] = "";
  int peer = r->kind == PEER_DDP;
  if (repeats > 1) snprintf(run, sizeof run, ", run %d", repeat + 1);
  snprintf(label, sizeof label, "[%s, %s, %d workers%s] ", r->model, peer ? "DDP" : r->kind,
           r->workers, run);
  if (repeats > 1) snprintf(run, sizeof run, "-run%d", repeat + 1);
  snprintf(want, sizeof want, "%s/%s%s%s-workers-%d%s", abs_out, many_models ? r->model : "",
           many_models ? "-" : "", peer ? "ddp" : r->kind, r->workers, run);
  if (pl_make_run_dir(want, r->dir, sizeof r->dir) < 0) return 1;
  printf("%srunning\n", label);
  fflush(stdout);
  o->workers = r->workers;
  if (peer) {
    r->rc = pl_peer_ddp_run(o, r->dir, r->res.summary_json, sizeof r->res.summary_json,
                            c->why, sizeof c->why);
    if (r->rc == PL_PEER_SKIPPED) {
      printf("%sskipped: %s\n", label, c->why);
      c->skipped = c->why;
      return 0;
    }
    if (r->rc) printf("%sfailed: %s\n", label, c->why);
  } else {
    o->label = label;
    o->quiet = 1;
    o->run_dir = r->dir;
    o->metrics_path = NULL;
    o->summary_path = NULL;
    r->rc = pl_run_local(o, &r->res);
    if (r->rc == 130) return 130;
  }
  if (r->rc == 0) digest(r, o->batch_size);
  return 0;
}

int pl_cmd_bench_train(int argc, char **argv) {
  const char *counts_arg = NULL, *out = "pstrain-bench-train", *json = NULL;
  const char *models_arg = NULL, *modes_arg = NULL, *peer_arg = "ddp", *repeats_arg = "1";
  /* Our own flags first; everything else is a run flag shared with `local`. One epoch unless
   * --epochs says otherwise: it comes first, so a later --epochs wins. Each cell's model and
   * mode are given as a last --model and --mode. */
  char **rest = calloc((size_t)argc + 7, sizeof *rest);
  if (!rest) {
    fprintf(stderr, "pstrain bench-train: out of memory\n");
    return 1;
  }
  int nrest = 0;
  rest[nrest++] = argv[0];
  rest[nrest++] = "--epochs";
  rest[nrest++] = "1";
  static const char *const names[] = {"--worker-counts", "--out", "--json", "--models",
                                      "--modes", "--peer", "--repeats"};
  const char **const values[] = {&counts_arg, &out, &json, &models_arg, &modes_arg, &peer_arg,
                                 &repeats_arg};
  if (pl_split_flags("bench-train", argc, argv, names, values, 7, rest, &nrest) != 0) {
    free(rest);
    return 2;
  }
  static const char usage[] =
      "Also: --worker-counts LIST (default: 1,2,4,8,12,16 up to this machine's cores), --models\n"
      "LIST (default: --model's; presets:\n"
      "every preset, each at its own input size), --modes LIST (sync, async, ssp, allreduce;\n"
      "default: --mode's), --peer ddp|none (default ddp: PyTorch DDP on the gloo backend on the\n"
      "same job, the mlp on the CPU, under /usr/bin/python3; skipped with one line where torch\n"
      "is missing), --repeats R (each cell R times in rotation; medians), --out DIR (default\n"
      "./pstrain-bench-train), --json FILE. Runs the job (1 epoch unless --epochs says\n"
      "otherwise) with each number of workers in turn and prints samples/s and the round trip\n"
      "beside each worker's compute-only rate; with --device null the workers compute nothing\n"
      "and the rows are the ceiling any device can reach.\n";
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
  static char model_store[1024], mode_store[256];
  const char *models[MAX_MODELS], *kinds[MAX_KINDS];
  int n_models = 1, n_modes = 1;
  models[0] = base.model;
  kinds[0] = base.mode;
  if (models_arg &&
      (n_models = parse_models(models_arg, model_store, sizeof model_store, models)) < 0) {
    fprintf(stderr, "pstrain bench-train: --models wants up to %d models, comma-separated, "
                    "or presets\n", MAX_MODELS);
    free(rest);
    return 2;
  }
  if (modes_arg && (n_modes = parse_modes(modes_arg, mode_store, sizeof mode_store, kinds)) < 0) {
    fprintf(stderr, "pstrain bench-train: --modes wants up to %d of sync, async, ssp and "
                    "allreduce, comma-separated\n", MAX_KINDS - 1);
    free(rest);
    return 2;
  }
  int with_peer = strcmp(peer_arg, "none") != 0;
  if (with_peer && strcmp(peer_arg, "ddp")) {
    fprintf(stderr, "pstrain bench-train: --peer wants ddp or none\n");
    free(rest);
    return 2;
  }
  int n_kinds = n_modes + with_peer;
  if (with_peer) kinds[n_modes] = PEER_DDP;
  char *end = NULL;
  long repeats = strtol(repeats_arg, &end, 10);
  if (!end || *end || repeats < 1 || repeats > MAX_REPEATS) {
    fprintf(stderr, "pstrain bench-train: --repeats wants a number in 1..%d\n", MAX_REPEATS);
    free(rest);
    return 2;
  }
  /* Not given: the counts a scale-out table is read at, up to the cores there are (a 16-core
   * host gets 12 and 16, this 2-core VM 1 and 2), so that the machine decides, not a list
   * written for another one. */
  int cores = pst_proc_cores();
  static char default_counts[64];
  if (!counts_arg) {
    static const int ladder[] = {1, 2, 4, 8, 12, 16};
    size_t used = 0;
    for (size_t i = 0; i < sizeof ladder / sizeof *ladder; i++)
      if (i == 0 || ladder[i] <= cores)
        used += (size_t)snprintf(default_counts + used, sizeof default_counts - used, "%s%d",
                                 i ? "," : "", ladder[i]);
    counts_arg = default_counts;
  }
  int counts[MAX_COUNTS];
  int n = pl_parse_int_list(counts_arg, counts, MAX_COUNTS, 1, PL_MAX_WORKERS);
  if (n <= 0) {
    fprintf(stderr, "pstrain bench-train: --worker-counts wants up to %d numbers in 1..%d, "
                    "e.g. 1,2,4,8,12,16\n", MAX_COUNTS, PL_MAX_WORKERS);
    free(rest);
    return 2;
  }
  for (int i = 0; i < n; i++)
    if (counts[i] * base.threads > cores) {
      /* Run all the same: the figures then say what sharing the cores costs. */
      printf("pstrain bench-train: %d workers of %d thread%s share this machine's %d cores\n",
             counts[i], base.threads, base.threads == 1 ? "" : "s", cores);
      break;
    }
  if (mkdir(out, 0755) < 0 && errno != EEXIST) {
    fprintf(stderr, "pstrain bench-train: cannot create %s: %s\n", out, strerror(errno));
    free(rest);
    return 1;
  }
  int n_cells = n_models * n * n_kinds;
  cell *cells = calloc((size_t)n_cells, sizeof *cells);
  count_run *all = calloc((size_t)n_cells * (size_t)repeats, sizeof *all);
  if (!cells || !all) {
    fprintf(stderr, "pstrain bench-train: out of memory\n");
    free(rest), free(cells), free(all);
    return 1;
  }
  for (int m = 0, k = 0; m < n_models; m++)
    for (int i = 0; i < n; i++)
      for (int j = 0; j < n_kinds; j++, k++) {
        cells[k].runs = &all[(size_t)k * (size_t)repeats];
        for (int r = 0; r < repeats; r++)
          cells[k].runs[r] = (count_run){.model = models[m], .kind = kinds[j],
                                         .workers = counts[i], .rc = -1};
      }
  char abs_out[PATH_MAX];
  if (!realpath(out, abs_out)) snprintf(abs_out, sizeof abs_out, "%s", out);
  printf("pstrain bench-train: %s, %d epoch%s, batch %d per worker, %s, %d thread%s per "
         "worker%s; output in %s\n",
         modes_arg ? modes_arg : base.mode, base.epochs, base.epochs == 1 ? "" : "s",
         base.batch_size, base.device ? base.device : "device auto", base.threads,
         base.threads == 1 ? "" : "s", with_peer ? ", PyTorch DDP beside it" : "", abs_out);
  /* Cells run in rotation, each repeat starting one kind later, so that a slow spell of a
   * shared machine falls on every kind alike. */
  for (int rep = 0; rep < repeats; rep++)
    for (int m = 0; m < n_models; m++) {
      /* Each model with its own spec's settings (its optimizer line) and, unless
       * --image-size says otherwise, the data resized to its own input. */
      static pst_data_flags data;
      for (int i = 0; i < n; i++)
        for (int jj = 0; jj < n_kinds; jj++) {
          int j = (jj + rep) % n_kinds, k = (m * n + i) * n_kinds + j;
          const char *mode = kinds[j] == PEER_DDP ? base.mode : kinds[j];
          pl_run_options o;
          rest[nrest] = "--model";
          rest[nrest + 1] = (char *)models[m];
          rest[nrest + 2] = "--mode";
          rest[nrest + 3] = (char *)mode;
          if ((rc = pl_parse_run_flags("bench-train", nrest + 4, rest, &o, &model, usage))) {
            free(rest), free(cells), free(all);
            return rc == 1 ? 0 : rc;
          }
          const pst_layer *in = &model.layers[0];
          if (models_arg && o.data_flags && !o.data_flags->image_size[0] && in->in_h > 1 &&
              in->in_w > 1) {
            data = *o.data_flags;
            snprintf(data.image_size, sizeof data.image_size, "%dx%d", in->in_h, in->in_w);
            o.data_flags = &data;
          }
          count_run *r = &cells[k].runs[rep];
          const char *unfit = kinds[j] == PEER_DDP ? pl_peer_ddp_unfit(&o) : NULL;
          if (unfit) {
            if (rep == 0 && i == 0)
              printf("[%s] PyTorch DDP: not run beside this job: %s\n", models[m], unfit);
            cells[k].unfit = 1;
            continue;
          }
          if (run_one(r, &cells[k], &o, abs_out, n_models > 1, rep, (int)repeats) == 130) {
            free(rest), free(cells), free(all);
            return 130;
          }
        }
    }
  free(rest);
  int failures = 0;
  /* The cells the peer could not run at all leave the table. */
  int kept = 0;
  for (int k = 0; k < n_cells; k++)
    if (!cells[k].unfit) cells[kept++] = cells[k];
  n_cells = kept;
  for (int k = 0; k < n_cells; k++) {
    settle(&cells[k], (int)repeats);
    if (!cells[k].skipped && cells[k].n_ok < repeats) failures++;
  }
  char title[320];
  snprintf(title, sizeof title,
           "## pstrain bench-train: %s, %s, %d epoch%s, batch %d per worker, push %s, pull %s%s",
           modes_arg ? modes_arg : base.mode, base.device ? base.device : "device auto",
           base.epochs, base.epochs == 1 ? "" : "s", base.batch_size,
           base.push_compress ? base.push_compress : "none",
           base.pull_compress ? base.pull_compress : "none",
           repeats > 1 ? ", medians of alternating runs" : "");
  printf("\n");
  double rate = emulated_rate(base.device);
  table(stdout, cells, n_cells, (int)repeats, title, rate);
  char md[PATH_MAX + 32];
  snprintf(md, sizeof md, "%s/summary.md", abs_out);
  FILE *f = fopen(md, "w");
  if (f) {
    table(f, cells, n_cells, (int)repeats, title, rate);
    fclose(f);
  }
  rc = failures ? 1 : 0;
  if (json && write_json(json, cells, n_cells, (int)repeats, &base) < 0) {
    fprintf(stderr, "pstrain bench-train: cannot write %s\n", json);
    rc = 1;
  }
  printf("\ntable: %s\n", md);
  free(cells), free(all);
  return rc;
}
