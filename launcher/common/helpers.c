/* Helpers every command family of the launcher uses (launcher/common/helpers.h). */
#include "launcher/common/helpers.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>
#include <uv.h>

#include <cjson/cJSON.h>

#include "common/config.h"

int pl_find_binary(const char *name, const char *subdir, char *out, size_t outlen) {
  /* pstrain-ps -> PSTRAIN_PS_BIN, pstrain-benchclient -> PSTRAIN_BENCHCLIENT_BIN. */
  char env[64];
  const char *base = strncmp(name, "pstrain-", 8) ? name : name + 8;
  size_t n = (size_t)snprintf(env, sizeof env, "PSTRAIN_");
  for (; *base && n + 5 < sizeof env; base++) env[n++] = (char)toupper((unsigned char)*base);
  snprintf(env + n, sizeof env - n, "_BIN");
  const char *e = getenv(env);
  if (e && e[0]) {
    snprintf(out, outlen, "%s", e);
    return access(out, X_OK) == 0 ? 0 : -ENOENT;
  }
  char exe[PATH_MAX];
  size_t len = sizeof exe;
  if (uv_exepath(exe, &len) != 0) return -ENOENT;
  char *slash = strrchr(exe, '/');
  if (slash) *slash = '\0';
  snprintf(out, outlen, "%s/%s", exe, name);
  if (access(out, X_OK) == 0) return 0;
  snprintf(out, outlen, "%s/../%s/%s", exe, subdir, name);
  if (access(out, X_OK) == 0) return 0;
  return -ENOENT;
}

int pl_find_program(const char *name, const char *extra, char *out, size_t outlen) {
  const char *path = getenv("PATH");
  char dirs[4096];
  snprintf(dirs, sizeof dirs, "%s:%s", path ? path : "", extra ? extra : "");
  for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    snprintf(out, outlen, "%s/%s", d, name);
    if (access(out, X_OK) == 0) return 0;
  }
  return -ENOENT;
}

int pl_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -errno;
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

double pl_json_num(const char *line, const char *key) {
  cJSON *o = cJSON_Parse(line);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  double x = cJSON_IsNumber(v) ? v->valuedouble : -1;
  cJSON_Delete(o);
  return x;
}

void pl_argv_add(pl_argv *a, const char *fmt, ...) {
  if (a->n >= PL_MAX_ARGS) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(a->store[a->n], PATH_MAX, fmt, ap);
  va_end(ap);
  a->argv[a->n] = a->store[a->n];
  a->argv[++a->n] = NULL;
}

/* A heap copy of argv[0..n) with its NULL, or NULL. */
char **pl_argv_dup(char **argv, int n) {
  char **out = calloc((size_t)n + 1, sizeof *out);
  for (int i = 0; out && i < n; i++)
    if (!(out[i] = strdup(argv[i]))) {
      for (int j = 0; j < i; j++) free(out[j]);
      free(out);
      return NULL;
    }
  return out;
}

/* GPU ids from "0,2,3", or 0 entries when none given. */
int pl_parse_int_list(const char *s, int *out, int max, int lo, int hi) {
  int n = 0;
  while (*s && n < max) {
    size_t len = strcspn(s, ",");
    int64_t v;
    if (pst_parse_int_n(s, len, lo, hi, &v) < 0) return -EINVAL;
    out[n++] = (int)v;
    s += len + (s[len] == ',');
  }
  return *s ? -E2BIG : n;
}

void pl_last_line(const char *log, char *out, size_t outlen) {
  FILE *f = fopen(log, "r");
  out[0] = '\0';
  if (!f) return;
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    if (!line[0]) continue;
    const char *p = line[0] == '<' && line[2] == '>' ? line + 3 : line;
    snprintf(out, outlen, "%.*s", (int)outlen - 1, p);
  }
  fclose(f);
}
