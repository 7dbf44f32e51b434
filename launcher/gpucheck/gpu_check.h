/* `pstrain gpu-check` (launcher/gpucheck/gpu_check.c): everything GPU-related checked on a GPU host,
 * one verdict per check, and a report in markdown and JSON. Inside the launcher only. */
#ifndef PSTRAIN_LAUNCHER_GPU_CHECK_H
#define PSTRAIN_LAUNCHER_GPU_CHECK_H

#include <limits.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#define PL_GC_MAX_CHECKS 48

typedef enum { PL_GC_PASS, PL_GC_FAIL } pl_gc_verdict;

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

/* launcher/gpucheck/gpu_check.c: a check begun (its name on stdout) and ended (its verdict and one
 * line of reason), a figure of it (numbers only; NaN left out), a folder under --out named
 * from its words, and why a program it ran failed (its deadline, or its status and its last
 * line starting with prefix). */
pl_gc_check *pl_gc_begin(pl_gc_ctx *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void pl_gc_end(pl_gc_check *c, pl_gc_verdict v, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void pl_gc_figure(pl_gc_check *c, const char *key, double v);
void pl_gc_check_dir(const pl_gc_ctx *g, const char *name, char *out, size_t len);
void pl_gc_why_failed(int rc, int timed_out, double timeout, const char *log,
                      const char *prefix, char *out, size_t len);

/* launcher/gpucheck/gpu_check_links.c: issue 27's measurement, 4 sync cnn2 workers on the device over
 * emulated links with float32, fp16 and top-k, against the targets. */
void pl_gc_check_links(pl_gc_ctx *g);

/* launcher/gpucheck/gpu_check_tools.c */

/* Runs argv[0] (a path) with env's NAME=VALUE strings added to the environment and its
 * output in log, for at most timeout_s seconds (then SIGTERM to its process group, and
 * SIGKILL 10 s later; *timed_out says so). Returns its exit status, 128 + the signal that
 * ended it, or a negative errno when it could not be started. */
int pl_gc_run_child(char *const argv[], const char *const *env, const char *log, double timeout_s,
                    int *timed_out);
/* Copies the first `train` training and `test` test samples of the IDX data set in `from`
 * (Fashion-MNIST's four files, gzip'd or not) into `to`, gzip'd. 0, or a negative errno with
 * one line in err. */
int pl_gc_subset_data(const char *from, const char *to, long train, long test, char *err,
                      size_t errlen);
/* A number field of o, or NAN. */
double pl_gc_num(const cJSON *o, const char *key);
/* The losses of the "train" records of a metrics file (JSON lines), in order, at most max.
 * Returns how many. */
int pl_gc_train_losses(const char *metrics, double *loss, int max);
/* The last line of log that starts with prefix and does not contain skip (NULL: none), or
 * "" in out. */
void pl_gc_last_line(const char *log, const char *prefix, const char *skip, char *out,
                     size_t outlen);

/* launcher/gpucheck/gpu_check_report.c */

/* Writes <out>/report.json (cJSON) and <out>/report.md from run. 0 or a negative errno. */
int pl_gc_write_report(const pl_gc_run *run);
/* 1 when every check passed. */
int pl_gc_all_pass(const pl_gc_run *run);

#endif
