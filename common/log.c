#include "common/log.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"

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

/* The crash handler may only use async-signal-safe calls: write(2) of bytes prepared here. */
static void on_fatal(int sig) {
  const char *name = sig == SIGSEGV ? "SIGSEGV (invalid memory access)"
                     : sig == SIGBUS ? "SIGBUS (bus error)"
                     : sig == SIGFPE ? "SIGFPE (arithmetic fault)"
                     : sig == SIGILL ? "SIGILL (illegal instruction)"
                                     : "SIGABRT (aborted)";
  const char *parts[] = {g_tty > 0 ? "" : "<2>", g_prog, ": error: crashed with ", name,
                         "; exiting\n"};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
    ssize_t rc = write(2, parts[i], strlen(parts[i]));
    (void)rc;
  }
  /* SA_RESETHAND restored the default action: die of the same signal. */
  raise(sig);
}

void pst_log_guard_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &sa, NULL);
  sa.sa_handler = on_fatal;
  sa.sa_flags = (int)SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  const int fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
  for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++) sigaction(fatal[i], &sa, NULL);
}

int pst_ratelimit_ok(pst_ratelimit *rl, int burst, double period) {
  double now = pst_now();
  if (now - rl->window_start >= period) {
    if (rl->suppressed > 0)
      pst_log(PST_LOG_WARN, "%llu similar log lines suppressed in the last %.0f s",
              (unsigned long long)rl->suppressed, now - rl->window_start);
    rl->window_start = now;
    rl->in_window = 0;
    rl->suppressed = 0;
  }
  if (rl->in_window < burst) {
    rl->in_window++;
    return 1;
  }
  rl->suppressed++;
  return 0;
}
