#include "common/log.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *g_prog = "pstrain";
static int g_max_level = PST_LOG_INFO;
static int g_tty = -1;

void pst_log_init(const char *prog, int max_level) {
  g_prog = prog;
  g_max_level = max_level;
  g_tty = isatty(2);
}

void pst_log(int level, const char *fmt, ...) {
  if (level > g_max_level) return;
  if (g_tty < 0) g_tty = isatty(2);
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  /* One fprintf per line keeps lines from different processes sharing a pipe whole. */
  if (g_tty)
    fprintf(stderr, "%s: %s%s\n", g_prog,
            level <= PST_LOG_ERR ? "error: " : level == PST_LOG_WARN ? "warning: " : "", line);
  else
    fprintf(stderr, "<%d>%s: %s%s\n", level, g_prog,
            level <= PST_LOG_ERR ? "error: " : level == PST_LOG_WARN ? "warning: " : "", line);
}

void pst_log_sanitize(const void *data, size_t len, size_t max, char *out, size_t outlen) {
  const unsigned char *p = data;
  size_t o = 0;
  if (outlen == 0) return;
  for (size_t i = 0; i < len && i < max; i++) {
    char tmp[5];
    int n;
    if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\')
      n = snprintf(tmp, sizeof tmp, "%c", p[i]);
    else
      n = snprintf(tmp, sizeof tmp, "\\x%02x", p[i]);
    if (o + (size_t)n + 1 > outlen) break;
    memcpy(out + o, tmp, (size_t)n);
    o += (size_t)n;
  }
  out[o] = '\0';
}

int pst_log_level_parse(const char *name) {
  if (!strcmp(name, "error")) return PST_LOG_ERR;
  if (!strcmp(name, "warning")) return PST_LOG_WARN;
  if (!strcmp(name, "info")) return PST_LOG_INFO;
  if (!strcmp(name, "debug")) return PST_LOG_DEBUG;
  return -1;
}
