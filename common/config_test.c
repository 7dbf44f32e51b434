/* The config file's reading (common/config.c), in process: what a written file sets, the
 * line an error names, and the two ways inih alone turned a file into other settings without
 * a word (a line past its 199 bytes whose rest began with a space; an indented file). */
#include "common/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"

static char o_dir[PST_CFG_STR_MAX];
static int64_t o_workers;

static pst_cfg_opt g_opts[] = {
    PST_OPT("checkpoint-dir", PST_CFG_STRING, o_dir, "", "", 0, 0),
    PST_OPT("workers", PST_CFG_INT, &o_workers, "1", "", 1, 4096),
};

static char g_dir[64];

/* Writes text to a file of the test's folder and loads it: 0 or the loader's error code. */
static int load_text(const char *text, char *err, size_t errlen) {
  char path[128];
  snprintf(path, sizeof path, "%s/test.conf", g_dir);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fputs(text, f);
  fclose(f);
  pst_cfg cfg = {.prog = "test", .section = "test", .default_file = NULL,
                 .env_prefix = "PSTRAIN_CONFIG_TEST_", .opts = g_opts, .n_opts = 2};
  char *argv[] = {"test", "--config", path, NULL};
  err[0] = '\0';
  return pst_cfg_load(&cfg, 3, argv, err, errlen);
}

/* The origin a loaded option names ends with ":LINE". */
static int from_line(const pst_cfg_opt *o, int line) {
  const char *colon = strrchr(o->origin, ':');
  return o->source == PST_SRC_FILE && colon && atoi(colon + 1) == line;
}

int main(void) {
  char tmpl[] = "/tmp/pstrain-config-test-XXXXXX";
  if (!mkdtemp(tmpl)) {
    perror("mkdtemp");
    return 1;
  }
  snprintf(g_dir, sizeof g_dir, "%s", tmpl);
  char err[512], text[1024];

  /* 1. Plain and indented keys: each line its own key, whatever its indentation. */
  int rc = load_text("[test]\n  checkpoint-dir = /tmp/ck\n\tworkers = 4\n", err, sizeof err);
  CHECKF(rc == 0, "indented keys: %s", err);
  CHECKF(!strcmp(o_dir, "/tmp/ck") && o_workers == 4,
         "indented keys: checkpoint-dir '%s', workers %lld", o_dir, (long long)o_workers);
  CHECKF(from_line(&g_opts[0], 2) && from_line(&g_opts[1], 3), "origins %s, %s",
         g_opts[0].origin, g_opts[1].origin);

  /* 2. An indented line after a key is not more of that key's value: an unknown key in it is
   * an error of its own line. */
  rc = load_text("workers = 2\n   no-such-key = 3\n", err, sizeof err);
  CHECKF(rc < 0 && strstr(err, "test.conf:2: unknown key 'no-such-key'"), "rc %d: %s", rc, err);

  /* 3. A line past the reader's 199 characters whose rest begins with a space: refused with
   * its number, not cut in two (inih alone set checkpoint-dir to the rest, "xyz"). */
  char value[256];
  memset(value, 'a', 177);
  value[177] = '\0';
  snprintf(text, sizeof text, "workers = 3\ncheckpoint-dir = /tmp/%s xyz\nworkers = 5\n", value);
  rc = load_text(text, err, sizeof err);
  CHECKF(rc < 0 && strstr(err, "test.conf:2: a line longer than 199 characters"), "rc %d: %s",
         rc, err);

  /* 4. A line of exactly 199 characters is whole, with or without its newline; the lines
   * after it keep their numbers. */
  memset(value, 'b', 177);
  value[177] = '\0';
  snprintf(text, sizeof text, "checkpoint-dir = /tmp/%s\nworkers = 7\n", value);
  CHECKF(strlen(text) == 199 + 1 + 12, "the long line is %zu characters", strchr(text, '\n') - text);
  rc = load_text(text, err, sizeof err);
  CHECKF(rc == 0 && strlen(o_dir) == 182 && o_workers == 7 && from_line(&g_opts[1], 2),
         "rc %d (%s): checkpoint-dir of %zu characters, workers %lld from %s", rc, err,
         strlen(o_dir), (long long)o_workers, g_opts[1].origin);
  snprintf(text, sizeof text, "workers = 8\ncheckpoint-dir = /tmp/%s", value);
  rc = load_text(text, err, sizeof err);
  CHECKF(rc == 0 && strlen(o_dir) == 182 && o_workers == 8, "the last line without a newline: "
         "rc %d (%s), %zu characters", rc, err, strlen(o_dir));

  /* 5. An error's line number counts lines, not the reader's pieces. */
  rc = load_text("workers = 2\n\n# a comment\n; another\nbad line\n", err, sizeof err);
  CHECKF(rc < 0 && strstr(err, "test.conf:5:"), "rc %d: %s", rc, err);

  char path[128];
  snprintf(path, sizeof path, "%s/test.conf", g_dir);
  unlink(path);
  rmdir(g_dir);
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
