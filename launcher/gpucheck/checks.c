/* `pstrain gpu-check`'s checks (launcher/gpucheck/checks.h): begun and ended with one line
 * each on stdout, their figures, their folders, and why a program they ran failed. */
#include "launcher/gpucheck/checks.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/clock.h"
#include "common/json_file.h"
#include "launcher/common/helpers.h"
#include "launcher/gpucheck/gpu_check_tools.h"

pl_gc_check *pl_gc_begin(pl_gc_ctx *g, const char *fmt, ...) {
  static pl_gc_check spare; /* past PL_GC_MAX_CHECKS (not reached: the list is fixed) */
  pl_gc_check *c = g->run.n_checks < PL_GC_MAX_CHECKS ? &g->run.checks[g->run.n_checks++] : &spare;
  memset(c, 0, sizeof *c);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->name, sizeof c->name, fmt, ap);
  va_end(ap);
  c->figures = cJSON_CreateObject();
  c->seconds = pst_now(); /* the start, until pl_gc_end() */
  printf("%-44s ", c->name);
  fflush(stdout);
  return c;
}

void pl_gc_end(pl_gc_check *c, pl_gc_verdict v, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->detail, sizeof c->detail, fmt, ap);
  va_end(ap);
  c->verdict = v;
  c->seconds = pst_now() - c->seconds;
  printf("%s  %s (%.1f s)\n", v == PL_GC_PASS ? "pass" : v == PL_GC_SKIP ? "not run" : "FAIL",
         c->detail, c->seconds);
  fflush(stdout);
}

void pl_gc_figure(pl_gc_check *c, const char *key, double v) {
  if (isfinite(v)) cJSON_AddNumberToObject(c->figures, key, v);
}

/* A directory under --out for one check's files; its name from the check's own words. */
void pl_gc_check_dir(const pl_gc_ctx *g, const char *name, char *out, size_t len) {
  char slug[96];
  size_t n = 0;
  for (const char *p = name; *p && n + 1 < sizeof slug; p++)
    slug[n++] = (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '.' ? *p : '-';
  slug[n] = '\0';
  snprintf(out, len, "%s/%s", g->run.out, slug);
  mkdir(out, 0755);
}

void pl_gc_tool_argv(const pl_gc_ctx *g, pl_gc_check *c, const char *dir, const char *log,
                     const char *tool, pl_argv *a) {
  snprintf(c->log, sizeof c->log, "%s/%s", dir, log);
  a->n = 0;
  a->argv[0] = NULL;
  pl_argv_add(a, "%s", g->self);
  pl_argv_add(a, "%s", tool);
}

/* Why a program's run failed, in words: its deadline, or its status and its last line that
 * starts with prefix. */
void pl_gc_why_failed(int rc, int timed_out, double timeout, const char *log,
                       const char *prefix, char *out, size_t len) {
  char last[600];
  pl_gc_last_line(log, prefix, "logs are in", last, sizeof last);
  if (timed_out)
    snprintf(out, len, "stopped at its deadline of %.0f s; log %s", timeout, log);
  else if (rc < 0)
    snprintf(out, len, "could not be started: %s", strerror(-rc));
  else
    snprintf(out, len, "exit status %d: %s", rc, last[0] ? last : "(see its log)");
}


int pl_gc_run_train(pl_gc_check *c, char *const argv[], double timeout_s) {
  int timed_out;
  int rc = pl_gc_run_child(argv, NULL, c->log, timeout_s, &timed_out);
  if (rc == 0 && !timed_out) return 0;
  /* The launcher's own failure line names the process, and for a worker its layer,
   * operation, shape and library status (kernels/net.h). */
  char why[700];
  pl_gc_why_failed(rc, timed_out, timeout_s, c->log, "pstrain: ", why, sizeof why);
  pl_gc_end(c, PL_GC_FAIL, "%s", why);
  return -1;
}

int pl_gc_bench_train(pl_gc_ctx *g, pl_gc_check *c, const char *dir, const pl_gc_bench_run *r,
                      cJSON **doc, char *why, size_t whylen) {
  char json[PATH_MAX + 200];
  char log[128];
  snprintf(log, sizeof log, "%s.log", r->name);
  snprintf(json, sizeof json, "%s/%s.json", dir, r->name);
  pl_argv a;
  pl_gc_tool_argv(g, c, dir, log, "bench-train", &a);
  pl_argv_add(&a, "--device=%s", r->device);
  pl_argv_add(&a, "--model=%s", r->model);
  pl_argv_add(&a, "--batch-size=%d", r->batch);
  pl_argv_add(&a, "--data-dir=%s", r->data);
  if (r->layered) {
    pl_argv_add(&a, "--push-by-layer=%s", r->layered);
    pl_argv_add(&a, "--pull-by-layer=%s", r->layered);
  }
  /* bench-train's own flags take their value as the next word. */
  pl_argv_add(&a, "--worker-counts");
  pl_argv_add(&a, "%s", r->counts);
  pl_argv_add(&a, "--modes");
  pl_argv_add(&a, "%s", r->modes ? r->modes : "sync");
  pl_argv_add(&a, "--repeats");
  pl_argv_add(&a, "%d", r->repeats);
  /* pstrain alone: the PyTorch peer's rows are no GPU check. */
  pl_argv_add(&a, "--peer");
  pl_argv_add(&a, "none");
  pl_argv_add(&a, "--out");
  pl_argv_add(&a, "%s/%s", dir, r->name);
  pl_argv_add(&a, "--json");
  pl_argv_add(&a, "%s", json);
  int timed_out;
  int rc = pl_gc_run_child(a.argv, NULL, c->log, r->timeout_s, &timed_out);
  *doc = pst_json_read_file(json);
  /* Said even of a run that ended well, for a caller that finds its figures wanting. */
  pl_gc_why_failed(rc, timed_out, r->timeout_s, c->log, "pstrain: ", why, whylen);
  return rc == 0 && !timed_out ? 0 : -1;
}
