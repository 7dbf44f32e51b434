/* Fuzzes the daemons' configuration loader (common/config.h: pst_cfg_load and friends):
 * the INI config file (through inih) and the command line.
 *
 * Input: two bytes (little-endian) of file length L, then L bytes of config file (written
 * to a temporary file and named with --config), then the command line: NUL-separated
 * arguments (at most 64). The option table has one option of every type (string, bounded
 * and unbounded integers, double, bool), named like the ps's and the worker's. A --config
 * among the arguments is pointed at the same file. The environment is not fuzzed: glibc
 * keeps every value ever given to setenv.
 *
 * Checks besides "no crash, no leak, no UB": a failure gives a negative code and one
 * line; a success leaves every option in range (bounded integers within their bounds,
 * doubles finite, strings NUL-terminated and shorter than PST_CFG_STR_MAX) with a
 * source and origin; and printing the configuration and the usage works. Then the
 * last argument goes through pst_cfg_set, pst_cfg_set_default and pst_parse_hostport. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"

#define CHECK(cond, ...)                                          \
  do {                                                            \
    if (!(cond)) {                                                \
      fprintf(stderr, "fuzz_config: check failed: %s: ", #cond); \
      fprintf(stderr, __VA_ARGS__);                               \
      fprintf(stderr, "\n");                                      \
      abort();                                                    \
    }                                                             \
  } while (0)

#define MAX_ARGS 64

static char o_listen[PST_CFG_STR_MAX], o_mode[PST_CFG_STR_MAX], o_model[PST_CFG_STR_MAX];
static int64_t o_workers, o_seed, o_index;
static double o_lr, o_interval;
static int o_log_placement, o_verbose;

static pst_cfg_opt g_opts[] = {
    PST_OPT("listen", PST_CFG_STRING, o_listen, "127.0.0.1:7070", "address:port", 0, 0),
    PST_OPT("mode", PST_CFG_STRING, o_mode, "sync", "update mode", 0, 0),
    PST_OPT("model", PST_CFG_STRING, o_model, NULL, "model", 0, 0),
    PST_OPT("workers", PST_CFG_INT, &o_workers, "1", "workers", 1, 4096),
    PST_OPT("seed", PST_CFG_INT, &o_seed, "42", "seed", 0, INT64_MAX),
    PST_OPT("index", PST_CFG_INT, &o_index, "-1", "worker index", 0, 0),
    PST_OPT("lr", PST_CFG_DOUBLE, &o_lr, "0.001", "learning rate", 0, 0),
    PST_OPT("status-interval", PST_CFG_DOUBLE, &o_interval, NULL, "seconds", 0, 0),
    PST_OPT("log-placement", PST_CFG_BOOL, &o_log_placement, "false", "log placement", 0, 0),
    PST_OPT("verbose", PST_CFG_BOOL, &o_verbose, NULL, "verbose", 0, 0),
};
#define N_OPTS ((int)(sizeof g_opts / sizeof g_opts[0]))

/* Errors are documented as one line. Values are echoed into them unfiltered, so a value
 * with a newline makes two: a known finding (docs/fuzzing.md, crashers/), checked only with
 * FUZZ_STRICT_ONE_LINE=1 until it is fixed, so that the fuzzer can look for anything else. */
static void check_line(const char *err) {
  static int strict = -1;
  if (strict < 0) strict = getenv("FUZZ_STRICT_ONE_LINE") && atoi(getenv("FUZZ_STRICT_ONE_LINE"));
  CHECK(err[0] != '\0', "no error message");
  CHECK(!strict || strchr(err, '\n') == NULL, "a multi-line error: \"%s\"", err);
}

static void check_options(const pst_cfg *c) {
  for (int i = 0; i < c->n_opts; i++) {
    const pst_cfg_opt *o = &c->opts[i];
    CHECK(memchr(o->origin, '\0', sizeof o->origin) != NULL, "%s: origin not terminated", o->name);
    CHECK(o->source >= PST_SRC_DEFAULT && o->source <= PST_SRC_KUBERNETES, "%s: source %d", o->name,
          (int)o->source);
    switch (o->type) {
      case PST_CFG_STRING:
        CHECK(memchr(o->value, '\0', PST_CFG_STR_MAX) != NULL, "%s: not terminated", o->name);
        break;
      case PST_CFG_INT: {
        int64_t v = *(int64_t *)o->value;
        CHECK(o->min == o->max || (v >= o->min && v <= o->max), "%s = %lld out of bounds", o->name,
              (long long)v);
        break;
      }
      case PST_CFG_DOUBLE:
        CHECK(isfinite(*(double *)o->value), "%s = %g", o->name, *(double *)o->value);
        break;
      case PST_CFG_BOOL:
        CHECK(*(int *)o->value == 0 || *(int *)o->value == 1, "%s = %d", o->name, *(int *)o->value);
        break;
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char path[64];
  static FILE *devnull;
  if (!path[0]) {
    /* One file per fuzzing process (-jobs/-workers run several side by side), in memory
     * where there is a tmpfs: on disk, writing it was most of a run. */
    snprintf(path, sizeof path, "%s/fuzz_config.%d.ini",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (int)getpid());
    devnull = fopen("/dev/null", "w");
  }
  if (size < 2) return 0;
  size_t flen = (size_t)data[0] | (size_t)data[1] << 8;
  data += 2;
  size -= 2;
  if (flen > size) flen = size;

  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  CHECK(fd >= 0, "%s: %s", path, strerror(errno));
  CHECK(write(fd, data, flen) == (ssize_t)flen, "write");
  close(fd);

  /* argv: the program, --config FILE, then the fuzzed arguments. */
  static char args[65536 + 1];
  size_t alen = size - flen;
  if (alen > sizeof args - 1) alen = sizeof args - 1;
  memcpy(args, data + flen, alen);
  args[alen] = '\0';
  char *argv[MAX_ARGS + 4];
  int argc = 0;
  argv[argc++] = "pstrain-fuzz";
  argv[argc++] = "--config";
  argv[argc++] = path;
  /* A --config among them names our file too: another path could be /dev/zero or a
   * terminal, which would read forever (no bug, just a hang of the harness). */
  static char config_eq[80];
  snprintf(config_eq, sizeof config_eq, "--config=%s", path);
  for (size_t i = 0; i < alen && argc < MAX_ARGS + 3;) {
    char *tok = args + i;
    i += strlen(tok) + 1;
    if (strncmp(tok, "--config=", 9) == 0) {
      argv[argc++] = config_eq;
    } else if (strcmp(tok, "--config") == 0) {
      argv[argc++] = tok;
      if (i < alen && argc < MAX_ARGS + 3) {
        argv[argc++] = path;
        i += strlen(args + i) + 1;
      }
    } else {
      argv[argc++] = tok;
    }
  }
  argv[argc] = NULL;

  pst_cfg c = {
      .prog = "pstrain-fuzz",
      .section = "fuzz",
      .default_file = NULL,
      .env_prefix = "PSTRAIN_FUZZ_",
      .usage_extra = "fuzzing\n",
      .opts = g_opts,
      .n_opts = N_OPTS,
  };
  char err[512];
  /* --help prints the usage to stdout: send it where the fuzzer's output is not. */
  fflush(stdout);
  int saved = dup(1);
  if (devnull) dup2(fileno(devnull), 1);
  int rc = pst_cfg_load(&c, argc, argv, err, sizeof err);
  fflush(stdout);
  if (saved >= 0) {
    dup2(saved, 1);
    close(saved);
  }
  if (rc < 0) {
    check_line(err);
  } else {
    CHECK(rc == 0, "rc %d", rc);
    check_options(&c);
    if (devnull) {
      pst_cfg_print(&c, devnull);
      pst_cfg_usage(&c, devnull);
    }
  }

  /* The last argument as a value for each option, from code (TF_CONFIG does this). */
  const char *text = argc > 3 ? argv[argc - 1] : "";
  for (int i = 0; i < N_OPTS; i++) {
    if (pst_cfg_set(&c, g_opts[i].name, text, PST_SRC_ENV, "fuzz", err, sizeof err) < 0)
      check_line(err);
    if (pst_cfg_set_default(&c, g_opts[i].name, text, PST_SRC_MODEL, "fuzz", err, sizeof err) < 0)
      check_line(err);
  }
  check_options(&c);
  CHECK(pst_cfg_find(&c, text) == NULL || text[0], "found an option without a name");
  char host[256];
  int port = -1;
  if (pst_parse_hostport(text, host, sizeof host, &port) == 0)
    CHECK(port >= 1 && port <= 65535 && host[0] != '\0' && strlen(host) < sizeof host,
          "host '%s' port %d from '%s'", host, port, text);
  return 0;
}
