/* pst_model_configure: a spec's optimizer line fills in only what the configuration left at
 * its defaults, drops its numbers when another optimizer is chosen, and skips options the
 * program does not have. */
#include "model/model_config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/testing.h"

static char g_opt[PST_CFG_STR_MAX];
static double g_lr, g_beta1;

/* A program with some of the ps's optimizer options (no momentum, no eps). */
static pst_cfg_opt g_opts[] = {
    PST_OPT("optimizer", PST_CFG_STRING, g_opt, "adam", "kind", 0, 0),
    PST_OPT("lr", PST_CFG_DOUBLE, &g_lr, "0.001", "lr", 0, 0),
    PST_OPT("beta1", PST_CFG_DOUBLE, &g_beta1, "0.9", "beta1", 0, 0),
};

/* Loads argv (after the program name) into a fresh configuration, then applies spec. */
static int configure(const char *spec, int argc, char **argv, pst_cfg *cfg, char *err,
                     size_t errlen) {
  memset(cfg, 0, sizeof *cfg);
  cfg->prog = "t";
  cfg->section = "t";
  cfg->env_prefix = "PSTRAIN_MODEL_CONFIG_TEST_";
  cfg->opts = g_opts;
  cfg->n_opts = (int)(sizeof g_opts / sizeof g_opts[0]);
  int rc = pst_cfg_load(cfg, argc, argv, err, errlen);
  if (rc < 0) return rc;
  static pst_model m;
  return pst_model_configure(cfg, spec, &m, err, errlen);
}

static const char *origin(pst_cfg *cfg, const char *name) { return pst_cfg_find(cfg, name)->origin; }

int main(void) {
  char path[] = "/tmp/model_config_test_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  FILE *f = fdopen(fd, "w");
  fputs("input 784\ndense 10 softmax\noptimizer adam lr=0.004 beta1=0.8 eps=1e-6\n", f);
  fclose(f);
  pst_cfg cfg;
  char err[256];

  /* Nothing set: the spec's kind and numbers; eps is skipped (no such option here). */
  char *none[] = {"t", NULL};
  CHECK(configure(path, 1, none, &cfg, err, sizeof err) == 0);
  CHECK(strcmp(g_opt, "adam") == 0 && g_lr == 0.004 && g_beta1 == 0.8);
  CHECK(pst_cfg_find(&cfg, "lr")->source == PST_SRC_MODEL);
  char want[200];
  snprintf(want, sizeof want, "%s:3", path);
  CHECK(strcmp(origin(&cfg, "lr"), want) == 0);

  /* A flag wins over the spec, for that option only. */
  char *lr[] = {"t", "--lr", "0.01", NULL};
  CHECK(configure(path, 3, lr, &cfg, err, sizeof err) == 0);
  CHECK(g_lr == 0.01 && g_beta1 == 0.8 && pst_cfg_find(&cfg, "lr")->source == PST_SRC_FLAG);

  /* The environment wins too. */
  setenv("PSTRAIN_MODEL_CONFIG_TEST_BETA1", "0.7", 1);
  CHECK(configure(path, 1, none, &cfg, err, sizeof err) == 0);
  CHECK(g_beta1 == 0.7 && g_lr == 0.004 && pst_cfg_find(&cfg, "beta1")->source == PST_SRC_ENV);
  unsetenv("PSTRAIN_MODEL_CONFIG_TEST_BETA1");

  /* The same kind named explicitly keeps the spec's numbers; another kind drops them all. */
  char *adam[] = {"t", "--optimizer", "adam", NULL};
  CHECK(configure(path, 3, adam, &cfg, err, sizeof err) == 0);
  CHECK(g_lr == 0.004 && g_beta1 == 0.8);
  char *sgd[] = {"t", "--optimizer", "sgd", NULL};
  CHECK(configure(path, 3, sgd, &cfg, err, sizeof err) == 0);
  CHECK(strcmp(g_opt, "sgd") == 0 && g_lr == 0.001 && g_beta1 == 0.9);
  CHECK(pst_cfg_find(&cfg, "lr")->source == PST_SRC_DEFAULT);

  /* A preset without an optimizer line changes nothing; a bad spec is one line. */
  CHECK(configure("mlp", 1, none, &cfg, err, sizeof err) == 0);
  CHECK(strcmp(g_opt, "adam") == 0 && g_lr == 0.001 && g_beta1 == 0.9);
  CHECK(configure("/nonexistent.spec", 1, none, &cfg, err, sizeof err) < 0);
  CHECK(strstr(err, "/nonexistent.spec: cannot read model file") == err && !strchr(err, '\n'));

  /* --print-config names the spec as the source. */
  CHECK(configure(path, 1, none, &cfg, err, sizeof err) == 0);
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  pst_cfg_print(&cfg, out);
  fclose(out);
  snprintf(want, sizeof want, "# model: %s:3", path);
  CHECK(buf != NULL && strstr(buf, want) != NULL);
  free(buf);
  unlink(path);
  return t_summary();
}
