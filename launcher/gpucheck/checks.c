/* `pstrain gpu-check`'s checks (launcher/gpucheck/checks.h): begun and ended with one line
 * each on stdout, their figures, their folders, and why a program they ran failed. */
#include "launcher/gpucheck/checks.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/clock.h"
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
