/* gpu-check's figures of issue 41 (gpu_check_step.h), each run as a command of this launcher
 * and read back from its JSON:
 *  1. the GPU worker's step: `pstrain bench-train` with 1 sync worker on the GPU (layer by
 *     layer, a GPU worker's default) at batch 256, its samples/s against the compute-only
 *     rate the worker measured; then the same job on `--device null:RATE` at that rate, the
 *     emulated worker that stands for the GPU on any machine. Targets: at least 80% of the
 *     compute-only rate, and within 10 points of the emulated worker's share;
 *  2. the ps's transport: `pstrain bench --clients 1 --sizes 1M,16M`, the ps's push+pull
 *     rounds against raw TCP moving the same bytes. Target: 0.9x raw TCP at both sizes;
 *  3. CPU workers: `pstrain bench-train --device cpu --model mlp --modes sync,async` at 1, 2,
 *     4, 8 and 12 workers, on the whole data set. Targets: 12 sync workers at 200,000
 *     samples/s or more, async at least sync at every count. Only on 16 cores or more (the
 *     issue's host): elsewhere it is said not run, with the count of cores.
 * The dry run (--device cpu) takes each through its plumbing at small sizes and judges no
 * target. */
#include "launcher/gpucheck/gpu_check_step.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/json_file.h"
#include "common/proc.h"
#include "launcher/common/helpers.h"
#include "launcher/gpucheck/gpu_check_tools.h"

/* 1. The step: the batch, the share of the compute-only rate, how far from the emulated
 * worker's share (points), and the runs of each job (medians). */
#define GC_STEP_BATCH 256
#define GC_STEP_SHARE 0.80
#define GC_STEP_POINTS 10.0
#define GC_STEP_REPEATS 3
/* 2. The transport: the ps's rounds against raw TCP's. */
#define GC_TRANSPORT_RATIO 0.9
/* 3. CPU workers: the host's cores, the counts, the largest count's rate, the runs. */
#define GC_CPU_CORES 16
#define GC_CPU_COUNTS "1,2,4,8,12"
#define GC_CPU_TOP 12
#define GC_CPU_RATE 200000.0
#define GC_CPU_REPEATS 3
/* Its 10 cells x 3 runs of an epoch, about 3 s each on the host, with room. */
#define GC_CPU_DEADLINE_S 300

static const char *judged(const pl_gc_ctx *g, int met) {
  return g->run.dry_run ? "not judged in the dry run" : met ? "met" : "NOT met";
}

/* Appends to a detail line of len bytes, *used of them taken (never past the end). */
static void say(char *detail, size_t len, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void say(char *detail, size_t len, size_t *used, const char *fmt, ...) {
  if (*used >= len) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(detail + *used, len - *used, fmt, ap);
  va_end(ap);
  if (n > 0) *used += (size_t)n;
}

/* The row of a bench-train document for mode and workers, or NULL. */
static const cJSON *row(const cJSON *doc, const char *mode, int workers) {
  const cJSON *r;
  cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(doc, "runs")) {
    const char *m = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "mode"));
    if (m && !strcmp(m, mode) && (int)pl_gc_num(r, "workers") == workers &&
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok")))
      return r;
  }
  return NULL;
}

/* ---- 1. the step ---- */

static void step_model(pl_gc_ctx *g, const char *model) {
  int batch = g->run.dry_run ? g->sz.bench_batch[1] : GC_STEP_BATCH;
  int repeats = g->run.dry_run ? 1 : GC_STEP_REPEATS;
  pl_gc_check *c = pl_gc_begin(g, "step: %s batch %d, 1 worker against null:RATE", model, batch);
  char dir[PATH_MAX + 128], why[600];
  pl_gc_check_dir(g, c->name, dir, sizeof dir);
  pl_gc_bench_run run = {.name = "device", .device = g->run.device, .model = model,
                         .data = g->data, .batch = batch, .counts = "1", .repeats = repeats,
                         .timeout_s = g->sz.bench_s};
  cJSON *dev;
  int ran = pl_gc_bench_train(g, c, dir, &run, &dev, why, sizeof why);
  const cJSON *r = ran == 0 ? row(dev, "sync", 1) : NULL;
  double rate = pl_gc_num(r, "samples_per_sec");
  double compute = pl_gc_num(r, "compute_samples_per_sec_per_worker");
  if (!r || !(rate > 0) || !(compute >= 1)) {
    pl_gc_end(c, PL_GC_FAIL, "%s: %s", g->run.device,
              ran == 0 && r ? "no samples/s or no compute-only rate in its figures" : why);
    cJSON_Delete(dev);
    return;
  }
  cJSON_Delete(dev);
  /* The emulated worker paced at the rate the device itself measured while computing. */
  char emu_device[64];
  snprintf(emu_device, sizeof emu_device, "null:%.0f", compute);
  run.name = "emulated";
  run.device = emu_device;
  cJSON *emu;
  ran = pl_gc_bench_train(g, c, dir, &run, &emu, why, sizeof why);
  const cJSON *e = ran == 0 ? row(emu, "sync", 1) : NULL;
  double emu_rate = pl_gc_num(e, "samples_per_sec");
  double share = rate / compute, emu_share = emu_rate / compute;
  double points = fabs(share - emu_share) * 100;
  pl_gc_figure(c, "samples_per_sec", rate);
  pl_gc_figure(c, "compute_samples_per_sec", compute);
  pl_gc_figure(c, "compute_share", share);
  char detail[700];
  size_t used = 0;
  say(detail, sizeof detail, &used, "%s: %.0f samples/s, %.1f%% of its compute-only %.0f "
      "(target %.0f%%: %s)", g->run.device, rate, share * 100, compute, GC_STEP_SHARE * 100,
      judged(g, share >= GC_STEP_SHARE));
  if (e && emu_rate > 0) {
    pl_gc_figure(c, "emulated_samples_per_sec", emu_rate);
    pl_gc_figure(c, "emulated_share", emu_share);
    pl_gc_figure(c, "points_from_emulated", points);
    say(detail, sizeof detail, &used, "; %s %.0f samples/s, %.1f%%: %.1f points apart (target "
        "%.0f: %s)", emu_device, emu_rate, emu_share * 100, points, GC_STEP_POINTS,
        judged(g, points <= GC_STEP_POINTS));
  }
  /* bench-train's medians: each job's runs are its own, the two jobs one after the other. */
  if (repeats > 1) say(detail, sizeof detail, &used, "; each the median of %d runs", repeats);
  if (e && emu_rate > 0)
    pl_gc_end(c, PL_GC_PASS, "%s", detail);
  else
    pl_gc_end(c, PL_GC_FAIL, "%s; %s: %s", detail, emu_device,
              ran == 0 ? "no samples/s in its figures" : why);
  cJSON_Delete(emu);
}

void pl_gc_check_step(pl_gc_ctx *g) {
  step_model(g, "mlp");
  /* The dry run's plumbing is the same for both models. */
  if (!g->run.dry_run) step_model(g, "cnn2");
}

/* ---- 2. the transport ---- */

void pl_gc_check_transport(pl_gc_ctx *g) {
  const char *sizes = g->run.dry_run ? "1M" : "1M,16M";
  pl_gc_check *c = pl_gc_begin(g, "transport: pstrain bench, 1 client, %s", sizes);
  char dir[PATH_MAX + 128], json[PATH_MAX + 160];
  pl_gc_check_dir(g, c->name, dir, sizeof dir);
  snprintf(json, sizeof json, "%s/bench.json", dir);
  pl_argv a;
  pl_gc_tool_argv(g, c, dir, "bench.log", "bench", &a);
  pl_argv_add(&a, "--clients=1");
  pl_argv_add(&a, "--sizes=%s", sizes);
  pl_argv_add(&a, "--run-dir=%s", dir);
  pl_argv_add(&a, "--json=%s", json);
  if (g->run.dry_run) {
    /* The plumbing: one short run of each side. */
    pl_argv_add(&a, "--seconds=0.2");
    pl_argv_add(&a, "--repeat=1");
  }
  int timed_out;
  int rc = pl_gc_run_child(a.argv, NULL, c->log, g->sz.bench_s, &timed_out);
  cJSON *doc = rc == 0 && !timed_out ? pst_json_read_file(json) : NULL;
  char detail[700];
  size_t used = 0;
  int cells = 0, ok = doc != NULL;
  const cJSON *cell;
  cJSON_ArrayForEach(cell, cJSON_GetObjectItemCaseSensitive(doc, "cells")) {
    double bytes = pl_gc_num(cell, "bytes"), ratio = pl_gc_num(cell, "ratio");
    ok &= cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cell, "ok")) && bytes > 0 && ratio > 0;
    char key[64];
    snprintf(key, sizeof key, "ratio_%.0f_mib", bytes / 1048576.0);
    pl_gc_figure(c, key, ratio);
    say(detail, sizeof detail, &used, "%s%.0f MiB: %.2fx raw TCP (target %.1fx: %s)",
        cells ? "; " : "", bytes / 1048576.0, ratio, GC_TRANSPORT_RATIO,
        judged(g, ratio >= GC_TRANSPORT_RATIO));
    cells++;
  }
  cJSON_Delete(doc);
  if (ok && cells == (g->run.dry_run ? 1 : 2)) {
    pl_gc_end(c, PL_GC_PASS, "%s", detail);
  } else {
    char why[600];
    pl_gc_why_failed(rc, timed_out, g->sz.bench_s, c->log, "pstrain bench: ", why, sizeof why);
    pl_gc_end(c, PL_GC_FAIL, "%s%s%s", doc ? "a cell did not run" : why, used ? "; " : "",
              detail);
  }
}

/* ---- 3. CPU workers ---- */

void pl_gc_check_cpu_workers(pl_gc_ctx *g) {
  const char *counts = g->run.dry_run ? "1" : GC_CPU_COUNTS;
  pl_gc_check *c = pl_gc_begin(g, "cpu workers: mlp, sync and async, %s", counts);
  int cores = pst_proc_cores();
  pl_gc_figure(c, "cores", cores);
  if (!g->run.dry_run && cores < GC_CPU_CORES) {
    pl_gc_end(c, PL_GC_SKIP, "this host lets the process use %d cores; the figures are for %d "
              "(12 workers, the ps and the launcher)", cores, GC_CPU_CORES);
    return;
  }
  char dir[PATH_MAX + 128], why[600];
  pl_gc_check_dir(g, c->name, dir, sizeof dir);
  /* The whole data set on a GPU host: its samples/s are the issue's. */
  pl_gc_bench_run run = {.name = "bench", .device = "cpu", .model = "mlp",
                         .data = g->run.dry_run ? g->data : g->full_data,
                         .batch = g->sz.pair_batch, .counts = counts, .modes = "sync,async",
                         .repeats = g->run.dry_run ? 1 : GC_CPU_REPEATS,
                         .timeout_s = g->run.dry_run ? g->sz.bench_s : GC_CPU_DEADLINE_S};
  cJSON *doc;
  int ok = pl_gc_bench_train(g, c, dir, &run, &doc, why, sizeof why) == 0, slower = 0, list[8];
  int n = pl_parse_int_list(counts, list, 8, 1, 64);
  char detail[700];
  size_t used = 0;
  double top = NAN;
  for (int i = 0; i < n && ok; i++) {
    const cJSON *s = row(doc, "sync", list[i]), *a = row(doc, "async", list[i]);
    double sync = pl_gc_num(s, "samples_per_sec"), async = pl_gc_num(a, "samples_per_sec");
    if (!(sync > 0 && async > 0)) {
      ok = 0;
      snprintf(why, sizeof why, "no samples/s for %d worker%s", list[i], list[i] == 1 ? "" : "s");
      break;
    }
    char key[64];
    snprintf(key, sizeof key, "sync_%d_samples_per_sec", list[i]);
    pl_gc_figure(c, key, sync);
    snprintf(key, sizeof key, "async_%d_samples_per_sec", list[i]);
    pl_gc_figure(c, key, async);
    say(detail, sizeof detail, &used, "%s%d: sync %.0f, async %.0f", i ? "; " : "", list[i], sync,
        async);
    slower += async < sync;
    if (list[i] == GC_CPU_TOP) top = sync;
  }
  cJSON_Delete(doc);
  if (!ok) {
    pl_gc_end(c, PL_GC_FAIL, "%s%s%s", why, used ? "; " : "", detail);
    return;
  }
  say(detail, sizeof detail, &used, " samples/s (async at least sync at every count: %s",
      judged(g, slower == 0));
  if (!g->run.dry_run)
    say(detail, sizeof detail, &used, "; %d sync workers at %.0f or more: %s", GC_CPU_TOP,
        GC_CPU_RATE, judged(g, top >= GC_CPU_RATE));
  say(detail, sizeof detail, &used, ")");
  pl_gc_end(c, PL_GC_PASS, "%s", detail);
}
