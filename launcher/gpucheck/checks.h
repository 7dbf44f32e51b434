/* `pstrain gpu-check` (launcher/gpucheck/gpu_check.c): everything GPU-related checked on a GPU host,
 * one verdict per check, and a report in markdown and JSON. Its checks, their sizes and the
 * run's context (launcher/gpucheck/checks.c), shared by every part of gpucheck/. */
#ifndef PSTRAIN_LAUNCHER_GPUCHECK_CHECKS_H
#define PSTRAIN_LAUNCHER_GPUCHECK_CHECKS_H

#include <limits.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "launcher/common/helpers.h"

#define PL_GC_MAX_CHECKS 48

/* SKIP: a check this host cannot run (too few GPUs, no Open MPI), with the reason; it fails
 * nothing, and the report says it did not run. */
typedef enum { PL_GC_PASS, PL_GC_FAIL, PL_GC_SKIP } pl_gc_verdict;

/* One check: a name, a verdict with its one-line reason, how long it took, where its output
 * is, and its figures (a cJSON object, owned; numbers only). */
typedef struct {
  char name[96];
  pl_gc_verdict verdict;
  char detail[700];
  double seconds;
  char log[PATH_MAX + 192];
  cJSON *figures;
} pl_gc_check;

typedef struct {
  char device[32];      /* what is checked: "cuda:0", or "cpu" for the dry run */
  int dry_run;          /* --device cpu: the plumbing on the CPU, at small sizes */
  char out[PATH_MAX];   /* the report and every check's output */
  char started[32];     /* UTC, ISO 8601 */
  double seconds;       /* the whole run */
  double budget_s;      /* the time the whole run should stay within on one GPU */
  char devices[1024];   /* the devices found, one per line */
  pl_gc_check checks[PL_GC_MAX_CHECKS];
  int n_checks;
} pl_gc_run;

/* How big each check is: on a GPU, a few hundred steps per preset; in the dry run, a few. */
typedef struct {
  long train, test;          /* samples in the check's copy of the data */
  int batch;                 /* the presets' batch */
  int report_every;          /* steps between loss reports: the points of the loss curve */
  int pair_batch;            /* the two workers' batch */
  int bench_batch[2];        /* bench-train's batches */
  const char *bench_counts;  /* bench-train's worker counts */
  double min_accuracy;       /* a preset's test accuracy at least (chance is 0.1); 0: not judged */
  double parity_s, train_s, bench_s, links_s; /* deadlines */
} pl_gc_sizes;

/* One run of the command: its report, its sizes, and what its checks need. */
typedef struct {
  pl_gc_run run;
  pl_gc_sizes sz;
  int device_index;          /* N of cuda:N */
  char self[PATH_MAX];       /* this launcher, which runs `local` and `bench-train` */
  char data[PATH_MAX + 16];  /* the data the runs use: the copy under --out */
  const char *full_data;     /* --data-dir itself: the slow-links job's, on a GPU */
  double t0;
} pl_gc_ctx;

/* launcher/gpucheck/checks.c: a check begun (its name on stdout) and ended (its verdict and one
 * line of reason), a figure of it (numbers only; NaN left out), a folder under --out named
 * from its words, and why a program it ran failed (its deadline, or its status and its last
 * line starting with prefix). */
pl_gc_check *pl_gc_begin(pl_gc_ctx *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void pl_gc_end(pl_gc_check *c, pl_gc_verdict v, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void pl_gc_figure(pl_gc_check *c, const char *key, double v);
void pl_gc_check_dir(const pl_gc_ctx *g, const char *name, char *out, size_t len);
/* Check c's run of `pstrain TOOL`: its output to dir/LOG (c->log), and a's arguments this
 * program and TOOL, anything a held before dropped. */
void pl_gc_tool_argv(const pl_gc_ctx *g, pl_gc_check *c, const char *dir, const char *log,
                     const char *tool, pl_argv *a);
void pl_gc_why_failed(int rc, int timed_out, double timeout, const char *log,
                      const char *prefix, char *out, size_t len);
/* Runs a `pstrain` training job for check c (its output to c->log) within timeout_s: 0 when
 * it ended well, else -1 with c ended as failed and why (the launcher's own last line). */
int pl_gc_run_train(pl_gc_check *c, char *const argv[], double timeout_s);

/* One `pstrain bench-train` run of a check: 1 epoch on `data`, the PyTorch peer left out. */
typedef struct {
  const char *name;    /* its files under the check's folder: NAME.log, NAME.json, NAME/ */
  const char *device, *model, *data;
  int batch;
  const char *counts;  /* --worker-counts */
  const char *modes;   /* --modes; NULL: sync */
  int repeats;
  const char *layered; /* "true" or "false": --push-by-layer and --pull-by-layer; NULL: the
                        * device's default (on for GPU and null devices) */
  double timeout_s;
} pl_gc_bench_run;
/* Runs it for check c (c->log is its log) in dir. *doc is its JSON wherever it was written,
 * even by a run that failed (NULL otherwise; the caller deletes it). 0 when the run ended
 * well, else -1; why says how it ended either way (its deadline, or its status and the
 * launcher's last line). */
int pl_gc_bench_train(pl_gc_ctx *g, pl_gc_check *c, const char *dir, const pl_gc_bench_run *r,
                      cJSON **doc, char *why, size_t whylen);

#endif
