/* Helpers shared by every command family of the launcher (launcher/common/helpers.c): where
 * the daemons and other programs are, a command line being built, a free port, small parsers.
 * They call nothing else of the launcher. */
#ifndef PSTRAIN_LAUNCHER_COMMON_HELPERS_H
#define PSTRAIN_LAUNCHER_COMMON_HELPERS_H

#include <limits.h>
#include <stddef.h>

#define PL_MAX_WORKERS 256
#define PL_MAX_GPU_ID 1023 /* largest id --gpus takes */

/* Where a pstrain binary is: env PSTRAIN_<NAME>_BIN (PSTRAIN_PS_BIN, PSTRAIN_WORKER_BIN,
 * PSTRAIN_BENCHCLIENT_BIN), else beside this binary
 * (installed) or in the Bazel output layout (bazel-bin/launcher/../ps/pstrain-ps). */
int pl_find_binary(const char *name, const char *subdir, char *out, size_t outlen);
/* A command line being built: argv[0..n) and its NULL, the strings held in store. */
#define PL_MAX_ARGS 64
typedef struct {
  char *argv[PL_MAX_ARGS + 1];
  int n;
  char store[PL_MAX_ARGS][PATH_MAX];
} pl_argv;
/* Appends one argument, printf-style; past PL_MAX_ARGS arguments it is dropped. */
void pl_argv_add(pl_argv *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A heap copy of argv[0..n) with its NULL, or NULL. */
char **pl_argv_dup(char **argv, int n);
/* Where another program is (gnuplot, ip, tc): the first executable NAME in PATH's folders,
 * then in extra's (a colon-separated list, or NULL). 0, or -ENOENT. */
int pl_find_program(const char *name, const char *extra, char *out, size_t outlen);
/* The last non-empty line of a log, without its level prefix ("<6>"; "" when none). */
void pl_last_line(const char *log, char *out, size_t outlen);
/* A number field ("key":number) of a one-line JSON object, or -1 when it is absent. */
double pl_json_num(const char *line, const char *key);
/* A comma-separated list of integers in [lo, hi], at most max of them, into out. Returns how
 * many (0 for an empty string), -EINVAL on a bad entry, -E2BIG when there are more. */
int pl_parse_int_list(const char *s, int *out, int max, int lo, int hi);
/* A free TCP port on 127.0.0.1. */
int pl_free_port(void);

#endif
