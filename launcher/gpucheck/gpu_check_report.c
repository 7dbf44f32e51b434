/* gpu-check's report: report.json (cJSON: the run, then each check with its verdict,
 * reason, seconds, log and figures) and report.md (the same as a table, one line per
 * check), both under --out. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "common/json_file.h"
#include "launcher/gpucheck/gpu_check_report.h"

static const char *verdict_name(pl_gc_verdict v) {
  return v == PL_GC_PASS ? "pass" : v == PL_GC_SKIP ? "not run" : "fail";
}

int pl_gc_all_pass(const pl_gc_run *run) {
  int ran = 0;
  for (int i = 0; i < run->n_checks; i++) {
    if (run->checks[i].verdict == PL_GC_FAIL) return 0;
    ran += run->checks[i].verdict == PL_GC_PASS;
  }
  return ran > 0;
}

static int write_json(const pl_gc_run *run, const char *path) {
  cJSON *doc = cJSON_CreateObject();
  if (doc == NULL) return -ENOMEM;
  cJSON_AddStringToObject(doc, "command", "pstrain gpu-check");
  cJSON_AddStringToObject(doc, "device", run->device);
  cJSON_AddBoolToObject(doc, "dry_run", run->dry_run);
  cJSON_AddStringToObject(doc, "started", run->started);
  cJSON_AddNumberToObject(doc, "seconds", run->seconds);
  cJSON_AddNumberToObject(doc, "budget_seconds", run->budget_s);
  cJSON_AddStringToObject(doc, "verdict", pl_gc_all_pass(run) ? "pass" : "fail");
  cJSON_AddStringToObject(doc, "devices", run->devices);
  cJSON *checks = cJSON_AddArrayToObject(doc, "checks");
  for (int i = 0; i < run->n_checks; i++) {
    const pl_gc_check *c = &run->checks[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", c->name);
    cJSON_AddStringToObject(o, "verdict", verdict_name(c->verdict));
    cJSON_AddStringToObject(o, "detail", c->detail);
    cJSON_AddNumberToObject(o, "seconds", c->seconds);
    cJSON_AddStringToObject(o, "log", c->log);
    cJSON_AddItemToObject(o, "figures",
                          c->figures ? cJSON_Duplicate(c->figures, 1) : cJSON_CreateObject());
    cJSON_AddItemToArray(checks, o);
  }
  int rc = pst_json_write_file(path, doc, 1);
  cJSON_Delete(doc);
  return rc;
}

/* A table cell: '|' and newlines would break the row. */
static void cell(FILE *f, const char *s) {
  for (; *s; s++) fputc(*s == '|' ? '/' : *s == '\n' ? ' ' : *s, f);
}

static int write_markdown(const pl_gc_run *run, const char *path) {
  FILE *f = fopen(path, "w");
  if (f == NULL) return -errno;
  int pass = pl_gc_all_pass(run), failed = 0;
  for (int i = 0; i < run->n_checks; i++) failed += run->checks[i].verdict == PL_GC_FAIL;
  fprintf(f, "# pstrain gpu-check: %s\n\n", pass ? "PASS" : "FAIL");
  fprintf(f, "- device: %s%s\n", run->device,
          run->dry_run ? " (dry run on the CPU: the plumbing at small sizes, learning not judged)"
                       : "");
  fprintf(f, "- started: %s, %.0f s in all", run->started, run->seconds);
  if (!run->dry_run) fprintf(f, " (budget %.0f s)", run->budget_s);
  fprintf(f, "\n- checks: %d, %d failed\n- devices:", run->n_checks, failed);
  if (run->devices[0] == '\0') fprintf(f, " none\n");
  else {
    fprintf(f, "\n");
    for (const char *p = run->devices; *p;) {
      size_t n = strcspn(p, "\n");
      fprintf(f, "  - %.*s\n", (int)n, p);
      p += n + (p[n] == '\n');
    }
  }
  fprintf(f, "\n| check | verdict | seconds | detail |\n|---|---|---|---|\n");
  for (int i = 0; i < run->n_checks; i++) {
    const pl_gc_check *c = &run->checks[i];
    fprintf(f, "| ");
    cell(f, c->name);
    fprintf(f, " | %s | %.1f | ", c->verdict == PL_GC_PASS ? "pass" : "**FAIL**", c->seconds);
    cell(f, c->detail);
    fprintf(f, " |\n");
  }
  fprintf(f, "\nEach check's output is under %s (report.json has the figures).\n", run->out);
  return fclose(f) == 0 ? 0 : -errno;
}

int pl_gc_write_report(const pl_gc_run *run) {
  char path[PATH_MAX + 16];
  snprintf(path, sizeof path, "%s/report.json", run->out);
  int rc = write_json(run, path);
  snprintf(path, sizeof path, "%s/report.md", run->out);
  int rm = write_markdown(run, path);
  return rc != 0 ? rc : rm;
}
