/* Helpers shared by the TLS tests (common/tls_test.c, common/tls_conn_test.c): checks with a
 * pass/fail tally, and a throwaway PKI made at test time. Header-only, test use only. */
#ifndef PSTRAIN_COMMON_TLS_TESTING_H
#define PSTRAIN_COMMON_TLS_TESTING_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/tls.h"
#include "common/tls_pki.h"

static int g_pass, g_fail;

static void check(int ok, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void check(int ok, int line, const char *fmt, ...) {
  if (ok) {
    g_pass++;
    return;
  }
  g_fail++;
  fprintf(stderr, "FAIL (line %d): ", line);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}
#define CHECK(cond, ...) check((cond) != 0, __LINE__, __VA_ARGS__)

static char g_dir[256];

/* dir/prefix-name, from a small ring of buffers so several can be used in one call. */
static const char *path(const char *prefix, const char *name) {
  static char ring[12][512];
  static int k;
  char *p = ring[k++ % 12];
  pst_tls_pki_path(p, 512, g_dir, prefix, name);
  return p;
}

static pst_tls_ctx *ctx(pst_tls_role role, const char *cert, const char *key, const char *ca) {
  pst_tls_ctx *c = NULL;
  char err[512];
  int rc = pst_tls_ctx_new(role, cert, key, ca, &c, err, sizeof err);
  CHECK(rc == 0, "context %s: %s", cert ? cert : "(no cert)", err);
  return c;
}

static int has(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

/* Makes CA sets "a" and "b", a garbage file x-garbage and a CA file ab-ca.pem trusting both,
 * in a new directory. Returns 0 or -1 (with a line on stderr). */
static int pki_setup(void) {
  snprintf(g_dir, sizeof g_dir, "%s/pstrain-tls-XXXXXX",
           getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp");
  char err[512];
  if (!mkdtemp(g_dir)) {
    perror("mkdtemp");
    return -1;
  }
  if (pst_tls_pki_make(g_dir, "a", err, sizeof err) < 0 ||
      pst_tls_pki_make(g_dir, "b", err, sizeof err) < 0) {
    fprintf(stderr, "%s\n", err);
    return -1;
  }
  FILE *f = fopen(path("x", "garbage"), "w");
  if (!f) return -1;
  fputs("this is not PEM\n", f);
  fclose(f);
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "cat %s %s > %s", path("a", "ca.pem"), path("b", "ca.pem"),
           path("ab", "ca.pem"));
  return system(cmd) == 0 ? 0 : -1;
}

/* Removes the directory, prints the tally and gives the exit status. */
static int pki_done(void) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", g_dir);
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail == 0 ? 0 : 1;
}

#endif
