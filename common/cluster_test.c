/* TF_CONFIG parsing, the precedence of what it fills in, and listen-address resolution. */
#include "common/cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int g_pass, g_fail;

#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (cond) {                                            \
      g_pass++;                                            \
    } else {                                               \
      g_fail++;                                            \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                        \
      fprintf(stderr, "\n");                               \
    }                                                      \
  } while (0)

/* Parses json for role; returns rc and leaves the error in err. */
static int parse(const char *json, pst_role role, char *err, size_t errlen) {
  pst_cluster cl;
  err[0] = '\0';
  int rc = pst_cluster_parse(json, role, "TF_CONFIG", &cl, err, errlen);
  if (rc == 0) pst_cluster_free(&cl);
  return rc;
}

static void expect_error(const char *json, pst_role role, const char *want) {
  char err[512];
  int rc = parse(json, role, err, sizeof err);
  CHECK(rc < 0 && strstr(err, want), "%s: want error containing \"%s\", got rc %d \"%s\"", json,
        want, rc, err);
}

static void test_parse(void) {
  char err[512];
  pst_cluster cl;
  const char *ok = "{\"cluster\": {\"ps\": [\"10.0.0.1:7070\"], \"worker\": [\"gpu1:7071\", "
                   "\"[fe80::1]:7071\"]}, \"task\": {\"type\": \"worker\", \"index\": 1},"
                   " \"environment\": \"cloud\"}";
  int rc = pst_cluster_parse(ok, PST_ROLE_WORKER, "TF_CONFIG", &cl, err, sizeof err);
  CHECK(rc == 0, "valid TF_CONFIG refused: %s", err);
  if (rc == 0) {
    CHECK(cl.n_ps == 1 && cl.n_worker == 2, "counts %d %d", cl.n_ps, cl.n_worker);
    CHECK(!strcmp(cl.ps[0], "10.0.0.1:7070"), "ps[0] = %s", cl.ps[0]);
    CHECK(cl.has_task && cl.task_index == 1 && !strcmp(cl.task_type, "worker"), "task");
    pst_cluster_free(&cl);
  }
  /* The ps needs no task (index 0 is implied). */
  CHECK(parse("{\"cluster\": {\"ps\": [\"a:1\"], \"worker\": [\"b:2\"]}}", PST_ROLE_PS, err,
              sizeof err) == 0, "ps without task: %s", err);

  expect_error("{\"cluster\": {\"ps\": [\"a:1\"], \"worker\": [\"b:2\", \"c:3\", \"x\"]}}",
               PST_ROLE_PS, "TF_CONFIG: cluster.worker[2]: 'x' is not host:port");
  expect_error("{\"cluster\": {\"ps\": [\"a:99999\"], \"worker\": [\"b:2\"]}}", PST_ROLE_PS,
               "cluster.ps[0]: 'a:99999' is not host:port");
  expect_error("{\"cluster\": {\"ps\": [7070], \"worker\": [\"b:2\"]}}", PST_ROLE_PS,
               "cluster.ps[0]: 7070 is not a \"host:port\" string");
  expect_error("{\"cluster\": {\"ps\": \"a:1\"}}", PST_ROLE_WORKER,
               "cluster.ps must be a list");
  expect_error("{\"cluster\": {\"ps\": [\"a:1\"], ", PST_ROLE_PS, "not valid JSON");
  expect_error("{\"cluster\": {\"ps\": [\"a:1\"]}} trailing", PST_ROLE_WORKER, "not valid JSON");
  expect_error("[1, 2]", PST_ROLE_PS, "must be a JSON object");
  expect_error("{\"task\": {\"type\": \"ps\"}}", PST_ROLE_PS, "no \"cluster\" object");
  expect_error("{\"cluster\": {\"worker\": [\"b:2\"]}}", PST_ROLE_WORKER, "cluster.ps is missing");
  expect_error("{\"cluster\": {\"ps\": [\"a:1\"]}}", PST_ROLE_PS, "cluster.worker is missing");
  expect_error("{\"cluster\": {\"ps\": [\"a,:1\", \"b:2\"], \"worker\": [\"c:3\"]}}", PST_ROLE_WORKER,
               "cluster.ps[0]: 'a,:1' is not host:port");
  expect_error("{\"cluster\": {\"ps\": [\"a:1\", \"a:1\"], \"worker\": [\"c:3\"]}}", PST_ROLE_WORKER,
               "cluster.ps[1] repeats cluster.ps[0] ('a:1')");
  {
    /* Up to 64 ps shards (kernels/partition.h). */
    char doc[64 * 12 + 128];
    size_t n = (size_t)snprintf(doc, sizeof doc, "{\"cluster\": {\"worker\": [\"w:1\"], \"ps\": [");
    for (int i = 0; i < 65; i++) n += (size_t)snprintf(doc + n, sizeof doc - n, "%s\"p%d:1\"", i ? "," : "", i);
    snprintf(doc + n, sizeof doc - n, "]}}");
    expect_error(doc, PST_ROLE_PS, "cluster.ps lists 65 servers; pstrain shards the weights over at most 64");
  }
  expect_error("{\"cluster\": {\"ps\": [\"a:1\"], \"worker\": [\"b:2\"]}, \"task\": {\"type\": "
               "\"worker\", \"index\": 0}}", PST_ROLE_PS,
               "task.type is 'worker' but this is pstrain-ps");
  expect_error("{\"cluster\": {\"ps\": [\"a:1\"], \"worker\": [\"b:2\"]}, \"task\": {\"type\": "
               "\"chief\", \"index\": 0}}", PST_ROLE_WORKER, "task.type 'chief' is not supported");
  expect_error("{\"cluster\": {\"ps\": [\"a:1\"], \"worker\": [\"b:2\"]}, \"task\": {\"type\": "
               "\"worker\", \"index\": 1}}", PST_ROLE_WORKER,
               "task.index 1 is out of range: cluster.worker has 1 entry");
  expect_error("{\"cluster\": {\"ps\": [\"a:1\"], \"worker\": [\"b:2\"]}, \"task\": {\"type\": "
               "\"worker\", \"index\": 0.5}}", PST_ROLE_WORKER, "task.index must be a whole number");
  expect_error("{\"cluster\": {\"ps\": [\"a:1\"], \"worker\": [\"b:2\"]}, \"task\": {\"type\": "
               "\"worker\", \"index\": -1}}", PST_ROLE_WORKER, "task.index must be a whole number");
  expect_error("{\"cluster\": {\"ps\": [\"a:1\"], \"worker\": [\"b:2\"]}, \"task\": {\"type\": "
               "\"worker\", \"index\": 1e300}}", PST_ROLE_WORKER,
               "task.index must be a whole number");
}

/* A cut-down option table like the daemons' own. */
static char o_listen[PST_CFG_STR_MAX], o_ps[PST_CFG_STR_MAX], o_tf[PST_CFG_STR_MAX];
static char o_shard[PST_CFG_STR_MAX];
static int64_t o_workers, o_index;

static pst_cfg_opt ps_opts[] = {
    PST_OPT("listen", PST_CFG_STRING, o_listen, "127.0.0.1:7070", "", 0, 0),
    PST_OPT("workers", PST_CFG_INT, &o_workers, "1", "", 1, 4096),
    PST_OPT("tf-config", PST_CFG_STRING, o_tf, "", "", 0, 0),
    PST_OPT("shard", PST_CFG_STRING, o_shard, "0/1", "", 0, 0),
};
static pst_cfg_opt wk_opts[] = {
    PST_OPT("ps", PST_CFG_STRING, o_ps, "127.0.0.1:7070", "", 0, 0),
    PST_OPT("index", PST_CFG_INT, &o_index, "-1", "", -1, 4095),
    PST_OPT("tf-config", PST_CFG_STRING, o_tf, "", "", 0, 0),
};

static int load(pst_cfg_opt *opts, int n, const char *env_prefix, pst_role role, int argc,
                char **argv, char *err, size_t errlen) {
  pst_cfg cfg = {.prog = "test", .section = "test", .default_file = NULL,
                 .env_prefix = env_prefix, .opts = opts, .n_opts = n};
  int rc = pst_cfg_load(&cfg, argc, argv, err, errlen);
  if (rc == 0) rc = pst_cluster_configure(&cfg, role, err, errlen);
  return rc;
}

static void test_configure(void) {
  char err[512] = "";
  setenv("TF_CONFIG",
         "{\"cluster\": {\"ps\": [\"ps0.example:7075\"], \"worker\": [\"w0:1\", \"w1:1\", "
         "\"w2:1\"]}, \"task\": {\"type\": \"ps\", \"index\": 0}}", 1);
  char *argv0[] = {"test", NULL};
  int rc = load(ps_opts, 4, "PSTRAIN_TEST_PS_", PST_ROLE_PS, 1, argv0, err, sizeof err);
  CHECK(rc == 0, "ps configure: %s", err);
  CHECK(!strcmp(o_listen, "0.0.0.0:7075"), "a host name listens on 0.0.0.0: %s", o_listen);
  CHECK(o_workers == 3, "workers = len(cluster.worker): %lld", (long long)o_workers);
  CHECK(ps_opts[0].source == PST_SRC_ENV && strstr(ps_opts[0].origin, "cluster.ps[0]"),
        "origin %s", ps_opts[0].origin);

  /* Flags win over TF_CONFIG. */
  char *argv1[] = {"test", "--workers", "2", "--listen", "127.0.0.1:9", NULL};
  rc = load(ps_opts, 4, "PSTRAIN_TEST_PS_", PST_ROLE_PS, 5, argv1, err, sizeof err);
  CHECK(rc == 0 && o_workers == 2 && !strcmp(o_listen, "127.0.0.1:9"), "flags win: %lld %s",
        (long long)o_workers, o_listen);

  /* --tf-config wins over the environment, and an IP literal is listened on as given. */
  char *argv2[] = {"test", "--tf-config",
                   "{\"cluster\": {\"ps\": [\"10.213.0.1:7000\"], \"worker\": [\"a:1\"]}}", NULL};
  rc = load(ps_opts, 4, "PSTRAIN_TEST_PS_", PST_ROLE_PS, 3, argv2, err, sizeof err);
  CHECK(rc == 0 && !strcmp(o_listen, "10.213.0.1:7000") && o_workers == 1,
        "--tf-config: rc %d %s %lld (%s)", rc, o_listen, (long long)o_workers, err);
  CHECK(ps_opts[0].source == PST_SRC_FLAG, "source of listen from --tf-config");

  /* The worker side, from @file. */
  char path[] = "/tmp/pstrain_cluster_test_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  if (fd >= 0) {
    const char *doc = "{\"cluster\": {\"ps\": [\"ps0.example:7075\"], \"worker\": [\"a:1\", "
                      "\"b:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 1}}\n";
    CHECK(write(fd, doc, strlen(doc)) == (ssize_t)strlen(doc), "write");
    close(fd);
    char arg[64];
    snprintf(arg, sizeof arg, "--tf-config=@%s", path);
    char *argv3[] = {"test", arg, NULL};
    rc = load(wk_opts, 3, "PSTRAIN_TEST_WK_", PST_ROLE_WORKER, 2, argv3, err, sizeof err);
    CHECK(rc == 0 && !strcmp(o_ps, "ps0.example:7075") && o_index == 1, "worker: rc %d %s %lld %s",
          rc, o_ps, (long long)o_index, err);
    char *argv4[] = {"test", arg, "--index", "0", NULL};
    rc = load(wk_opts, 3, "PSTRAIN_TEST_WK_", PST_ROLE_WORKER, 4, argv4, err, sizeof err);
    CHECK(rc == 0 && o_index == 0, "--index wins over task.index: %lld", (long long)o_index);
    unlink(path);
    rc = load(wk_opts, 3, "PSTRAIN_TEST_WK_", PST_ROLE_WORKER, 2, argv3, err, sizeof err);
    CHECK(rc < 0 && strstr(err, "cannot open @"), "missing @file: %s", err);
  }

  /* Several ps: each is a shard, and a worker is given all of them in order. */
  char *argv5[] = {"test", "--tf-config",
                   "{\"cluster\": {\"ps\": [\"10.0.0.1:7000\", \"10.0.0.2:7001\", \"h3:7002\"], "
                   "\"worker\": [\"a:1\"]}, \"task\": {\"type\": \"ps\", \"index\": 2}}", NULL};
  rc = load(ps_opts, 4, "PSTRAIN_TEST_PS_", PST_ROLE_PS, 3, argv5, err, sizeof err);
  CHECK(rc == 0 && !strcmp(o_shard, "2/3") && !strcmp(o_listen, "0.0.0.0:7002"),
        "ps shard: rc %d %s %s (%s)", rc, o_shard, o_listen, err);
  char *argv6[] = {"test", "--tf-config",
                   "{\"cluster\": {\"ps\": [\"10.0.0.1:7000\", \"h2:7001\"], \"worker\": "
                   "[\"a:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}", NULL};
  rc = load(wk_opts, 3, "PSTRAIN_TEST_WK_", PST_ROLE_WORKER, 3, argv6, err, sizeof err);
  CHECK(rc == 0 && !strcmp(o_ps, "10.0.0.1:7000,h2:7001"), "worker's shards: %s (%s)", o_ps, err);

  /* The environment's TF_CONFIG is for the ps: the worker says so. */
  rc = load(wk_opts, 3, "PSTRAIN_TEST_WK_", PST_ROLE_WORKER, 1, argv0, err, sizeof err);
  CHECK(rc < 0 && strstr(err, "task.type is 'ps' but this is pstrain-worker"), "%s", err);
  unsetenv("TF_CONFIG");
  rc = load(wk_opts, 3, "PSTRAIN_TEST_WK_", PST_ROLE_WORKER, 1, argv0, err, sizeof err);
  CHECK(rc == 0 && !strcmp(o_ps, "127.0.0.1:7070") && o_index == -1, "no TF_CONFIG: defaults");
}

static void test_resolve(void) {
  char ip[64], err[256];
  CHECK(pst_resolve_listen("0.0.0.0", ip, sizeof ip, err, sizeof err) == 0 &&
        !strcmp(ip, "0.0.0.0"), "0.0.0.0");
  CHECK(pst_resolve_listen("::1", ip, sizeof ip, err, sizeof err) == 0 && !strcmp(ip, "::1"),
        "::1");
  int rc = pst_resolve_listen("localhost", ip, sizeof ip, err, sizeof err);
  CHECK(rc == 0 && (!strcmp(ip, "127.0.0.1") || !strcmp(ip, "::1")), "localhost -> %s (%s)",
        rc == 0 ? ip : "?", err);
}

int main(void) {
  test_parse();
  test_configure();
  test_resolve();
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
