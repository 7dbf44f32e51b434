/* TF_CONFIG parsing, the precedence of what it fills in, the cluster from a Kubernetes pod's
 * environment (common/k8s.h), and listen-address resolution. */
#include "common/cluster.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/k8s.h"

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

/* TF_CONFIG as Kubeflow's TFJob writes it into a worker pod: the replicas' DNS names, a
 * chief, and "environment". The chief is not pstrain's: the workers are cluster.worker. */
static void test_tfjob(void) {
  const char *doc =
      "{\"cluster\":{\"chief\":[\"mnist-chief-0.ml.svc:2222\"],"
      "\"ps\":[\"mnist-ps-0.ml.svc:2222\",\"mnist-ps-1.ml.svc:2222\"],"
      "\"worker\":[\"mnist-worker-0.ml.svc:2222\",\"mnist-worker-1.ml.svc:2222\","
      "\"mnist-worker-2.ml.svc:2222\"]},\"task\":{\"type\":\"worker\",\"index\":2},"
      "\"environment\":\"cloud\"}";
  char err[512] = "";
  char *argv[] = {"test", "--tf-config", (char *)doc, NULL};
  int rc = load(wk_opts, 3, "PSTRAIN_TEST_WK_", PST_ROLE_WORKER, 3, argv, err, sizeof err);
  CHECK(rc == 0 && !strcmp(o_ps, "mnist-ps-0.ml.svc:2222,mnist-ps-1.ml.svc:2222") &&
            o_index == 2, "TFJob worker: rc %d ps %s index %lld (%s)", rc, o_ps,
        (long long)o_index, err);
}

/* The Kubernetes tables: the cut-down ones and the two k8s options. */
static char o_k8s[PST_CFG_STR_MAX];
static int64_t o_k8s_replicas;
static pst_cfg_opt kps_opts[] = {
    PST_OPT("listen", PST_CFG_STRING, o_listen, "127.0.0.1:7070", "", 0, 0),
    PST_OPT("workers", PST_CFG_INT, &o_workers, "1", "", 1, 4096),
    PST_OPT("tf-config", PST_CFG_STRING, o_tf, "", "", 0, 0),
    PST_OPT("shard", PST_CFG_STRING, o_shard, "0/1", "", 0, 0),
    PST_K8S_OPTS(o_k8s, o_k8s_replicas),
};
static pst_cfg_opt kwk_opts[] = {
    PST_OPT("ps", PST_CFG_STRING, o_ps, "127.0.0.1:7070", "", 0, 0),
    PST_OPT("index", PST_CFG_INT, &o_index, "-1", "", -1, 4095),
    PST_OPT("tf-config", PST_CFG_STRING, o_tf, "", "", 0, 0),
    PST_K8S_OPTS(o_k8s, o_k8s_replicas),
};

/* Loads argv into a table, then applies a pod's host name and JOB_COMPLETION_INDEX. */
static int k8s_load(pst_role role, const char *host, const char *index, int argc, char **argv,
                    char *err, size_t errlen) {
  int ps = role == PST_ROLE_PS;
  pst_cfg cfg = {.prog = "test", .section = "test", .default_file = NULL,
                 .env_prefix = ps ? "PSTRAIN_TEST_PS_" : "PSTRAIN_TEST_WK_",
                 .opts = ps ? kps_opts : kwk_opts, .n_opts = ps ? 6 : 5};
  err[0] = '\0';
  int rc = pst_cfg_load(&cfg, argc, argv, err, errlen);
  if (rc == 0) rc = pst_k8s_apply(&cfg, role, host, index, o_tf[0] != 0, err, errlen);
  return rc;
}

static void test_k8s(void) {
  char err[512];
  pst_k8s_ps ps;
  CHECK(pst_k8s_parse_ps("pstrain-ps:7070", 2, &ps, err, sizeof err) == 0 &&
            !strcmp(ps.set, "pstrain-ps") && !strcmp(ps.service, "pstrain-ps") &&
            ps.port == 7070 && ps.replicas == 2, "pstrain-ps:7070: %s", err);
  CHECK(pst_k8s_parse_ps("ps.train-svc.ml:70", 1, &ps, err, sizeof err) == 0 &&
            !strcmp(ps.set, "ps") && !strcmp(ps.service, "train-svc.ml"), "NAME.SERVICE");
  const char *bad[] = {"pstrain-ps", "Pstrain:7070", "-ps:7070", "ps.:7070", "ps..x:7070",
                       "ps:0", "[::1]:7070", "a_b:7070",
                       "a2345678901234567890123456789012345678901234567890123:1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    CHECK(pst_k8s_parse_ps(bad[i], 1, &ps, err, sizeof err) < 0 && strstr(err, "k8s-ps"),
          "'%s' accepted", bad[i]);
  CHECK(pst_k8s_parse_ps("ps:1", 65, &ps, err, sizeof err) < 0, "65 replicas accepted");

  /* Ordinals from host names: the pod's name, or its whole DNS name. */
  pst_k8s_parse_ps("pstrain-ps:7070", 12, &ps, err, sizeof err);
  CHECK(pst_k8s_ordinal(&ps, "pstrain-ps-0", err, sizeof err) == 0, "ordinal 0");
  CHECK(pst_k8s_ordinal(&ps, "pstrain-ps-11.pstrain-ps.ml.svc.cluster.local", err, sizeof err) ==
            11, "ordinal from an FQDN");
  const char *not_pods[] = {"pstrain-ps", "pstrain-ps-", "pstrain-ps-01", "pstrain-ps-1a",
                            "pstrain-psx-1", "pstrain-ps-x", "other-0", ""};
  for (size_t i = 0; i < sizeof not_pods / sizeof not_pods[0]; i++)
    CHECK(pst_k8s_ordinal(&ps, not_pods[i], err, sizeof err) < 0 &&
              strstr(err, "is not a pod of StatefulSet pstrain-ps"),
          "'%s' taken for a pod (%s)", not_pods[i], err);
  CHECK(pst_k8s_ordinal(&ps, "pstrain-ps-12", err, sizeof err) < 0 &&
            strstr(err, "beyond k8s-ps-replicas 12"), "ordinal 12 of 12: %s", err);

  /* The ps: listen on the StatefulSet's port, its shard from the host name. */
  char *argv0[] = {"test", "--k8s-ps", "pstrain-ps:7075", "--k8s-ps-replicas", "3", NULL};
  int rc = k8s_load(PST_ROLE_PS, "pstrain-ps-2", NULL, 5, argv0, err, sizeof err);
  CHECK(rc == 0 && !strcmp(o_listen, "0.0.0.0:7075") && !strcmp(o_shard, "2/3"),
        "k8s ps: rc %d listen %s shard %s (%s)", rc, o_listen, o_shard, err);
  CHECK(kps_opts[0].source == PST_SRC_KUBERNETES && kps_opts[3].source == PST_SRC_KUBERNETES &&
            strstr(kps_opts[3].origin, "pstrain-ps-2"), "sources %d %d, origin %s",
        (int)kps_opts[0].source, (int)kps_opts[3].source, kps_opts[3].origin);
  /* One replica: no shard; a flag wins over the pod's environment. */
  char *argv1[] = {"test", "--k8s-ps", "pstrain-ps:7075", "--listen", "10.0.0.1:1", NULL};
  rc = k8s_load(PST_ROLE_PS, "pstrain-ps-0", NULL, 5, argv1, err, sizeof err);
  CHECK(rc == 0 && !strcmp(o_listen, "10.0.0.1:1") && !strcmp(o_shard, "0/1") &&
            kps_opts[3].source == PST_SRC_DEFAULT, "flags win: %s %s", o_listen, o_shard);
  rc = k8s_load(PST_ROLE_PS, "laptop", NULL, 3, argv0, err, sizeof err);
  CHECK(rc < 0 && strstr(err, "'laptop'"), "a host that is no pod: %s", err);
  /* k8s-ps and TF_CONFIG are two descriptions of one cluster: refused. */
  char *argv2[] = {"test", "--k8s-ps", "pstrain-ps:7075", "--tf-config", "{}", NULL};
  rc = k8s_load(PST_ROLE_PS, "pstrain-ps-0", NULL, 5, argv2, err, sizeof err);
  CHECK(rc < 0 && strstr(err, "TF_CONFIG"), "k8s-ps with TF_CONFIG: %s", err);

  /* A worker: every shard's DNS name, its index from the Indexed Job. */
  char *argv3[] = {"test", "--k8s-ps", "pstrain-ps.pstrain-ps.ml:7075", "--k8s-ps-replicas", "2",
                   NULL};
  rc = k8s_load(PST_ROLE_WORKER, "pstrain-worker-3-x7k2p", "3", 5, argv3, err, sizeof err);
  CHECK(rc == 0 &&
            !strcmp(o_ps, "pstrain-ps-0.pstrain-ps.ml:7075,pstrain-ps-1.pstrain-ps.ml:7075") &&
            o_index == 3, "k8s worker: rc %d ps %s index %lld (%s)", rc, o_ps,
        (long long)o_index, err);
  CHECK(kwk_opts[0].source == PST_SRC_KUBERNETES && kwk_opts[1].source == PST_SRC_KUBERNETES &&
            !strcmp(kwk_opts[1].origin, PST_K8S_INDEX_ENV), "worker sources");
  /* JOB_COMPLETION_INDEX without k8s-ps (a TF_CONFIG or --ps names the ps), and bad ones. */
  char *argv4[] = {"test", "--ps", "ps0:1", NULL};
  rc = k8s_load(PST_ROLE_WORKER, "w", "0", 3, argv4, err, sizeof err);
  CHECK(rc == 0 && o_index == 0 && !strcmp(o_ps, "ps0:1"), "index alone: %s", err);
  char *argv5[] = {"test", "--index", "1", NULL};
  rc = k8s_load(PST_ROLE_WORKER, "w", "4", 3, argv5, err, sizeof err);
  CHECK(rc == 0 && o_index == 1, "--index wins over JOB_COMPLETION_INDEX: %lld",
        (long long)o_index);
  const char *bad_index[] = {"-1", "4096", "1x", " 1", "1.0"};
  for (size_t i = 0; i < sizeof bad_index / sizeof bad_index[0]; i++) {
    rc = k8s_load(PST_ROLE_WORKER, "w", bad_index[i], 3, argv4, err, sizeof err);
    CHECK(rc < 0 && strstr(err, PST_K8S_INDEX_ENV), "JOB_COMPLETION_INDEX '%s': %s",
          bad_index[i], err);
  }
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

/* host:port as every flag and TF_CONFIG entry is read (common/config.h): a bracket only around
 * a whole IPv6 address, so that what is written back as an address parses again. A long
 * IPv6 literal is refused at listen with its reason. */
static void test_hostport(void) {
  char host[256], ip[64], err[256];
  int port;
  CHECK(pst_parse_hostport("[::1]:70", host, sizeof host, &port) == 0 && !strcmp(host, "::1") &&
        port == 70, "[::1]:70");
  CHECK(pst_parse_hostport("a.b:1", host, sizeof host, &port) == 0 && !strcmp(host, "a.b"), "a.b:1");
  CHECK(pst_parse_hostport("d::1]:70", host, sizeof host, &port) < 0, "d::1]:70 accepted");
  CHECK(pst_parse_hostport("[d::[1]:70", host, sizeof host, &port) < 0, "[d::[1]:70 accepted");
  CHECK(pst_parse_hostport("a[b:70", host, sizeof host, &port) < 0, "a[b:70 accepted");
  char lit[128];
  snprintf(lit, sizeof lit, "::%%%s", "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijkl");
  CHECK(pst_resolve_listen(lit, ip, sizeof ip, err, sizeof err) == -ENAMETOOLONG &&
        strstr(err, "too long") && !strchr(err, '\n'), "a long literal: %s", err);
}

/* The one integer parser (issue 43): whole decimal integers in range, nothing else; and a
 * PST_CFG_INT option read through it, from a flag and from the environment. */
static void test_parse_int(void) {
  int64_t v = 7;
  CHECK(pst_parse_int("42", 1, 100, &v) == 0 && v == 42, "42 -> %lld", (long long)v);
  CHECK(pst_parse_int("-3", -5, 5, &v) == 0 && v == -3, "-3 -> %lld", (long long)v);
  CHECK(pst_parse_int("+3", -5, 5, &v) == 0 && v == 3, "+3 -> %lld", (long long)v);
  CHECK(pst_parse_int("9223372036854775807", INT64_MIN, INT64_MAX, &v) == 0 && v == INT64_MAX,
        "INT64_MAX -> %lld", (long long)v);
  v = 7;
  const char *bad[] = {"", " 2", "2 ", "1e300", "1.5", "2x", "x2", "0x10", "+", "-", "1,2", "\t3"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    CHECK(pst_parse_int(bad[i], INT64_MIN, INT64_MAX, &v) == -EINVAL && v == 7,
          "'%s' accepted as %lld", bad[i], (long long)v);
  CHECK(pst_parse_int(NULL, 0, 1, &v) == -EINVAL, "NULL accepted");
  CHECK(pst_parse_int("9223372036854775808", INT64_MIN, INT64_MAX, &v) == -ERANGE && v == 7,
        "overflow accepted");
  CHECK(pst_parse_int("-99999999999999999999", INT64_MIN, INT64_MAX, &v) == -ERANGE && v == 7,
        "underflow accepted");
  CHECK(pst_parse_int("0", 1, 4096, &v) == -ERANGE && pst_parse_int("4097", 1, 4096, &v) == -ERANGE &&
        v == 7, "out of range accepted");
  CHECK(pst_parse_int_n("12:34", 2, 1, 100, &v) == 0 && v == 12, "12 of 12:34 -> %lld", (long long)v);
  CHECK(pst_parse_int_n("1.5:3", 3, 1, 100, &v) == -EINVAL, "1.5 of 1.5:3 accepted");
  CHECK(pst_parse_int_n("", 0, 1, 100, &v) == -EINVAL, "an empty part accepted");
  char err[256] = "";
  CHECK(pst_parse_int_flag("--workers", "2x", 1, 4096, &v, err, sizeof err) == -EINVAL &&
        strstr(err, "--workers") && !strchr(err, '\n'), "flag error: %s", err);
  /* Through the option table: --workers 1e300, 1.5 and 2x were once read as 1, 1 and 2. */
  const char *flags[] = {"1e300", "1.5", "2x", "", "99999999999999999999", "0"};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
    char *argv[] = {"test", "--workers", (char *)flags[i], NULL};
    pst_cfg cfg = {.prog = "test", .section = "test", .env_prefix = "PSTRAIN_TEST_INT_",
                   .opts = ps_opts, .n_opts = 4};
    err[0] = '\0';
    CHECK(pst_cfg_load(&cfg, 3, argv, err, sizeof err) < 0 && strstr(err, "workers") &&
              !strchr(err, '\n'), "--workers '%s' accepted (%s)", flags[i], err);
  }
  char *argv[] = {"test", NULL};
  pst_cfg cfg = {.prog = "test", .section = "test", .env_prefix = "PSTRAIN_TEST_INT_",
                 .opts = ps_opts, .n_opts = 4};
  setenv("PSTRAIN_TEST_INT_WORKERS", "3.0", 1);
  CHECK(pst_cfg_load(&cfg, 1, argv, err, sizeof err) < 0 && strstr(err, "PSTRAIN_TEST_INT_WORKERS"),
        "WORKERS=3.0 from the environment accepted (%s)", err);
  setenv("PSTRAIN_TEST_INT_WORKERS", "3", 1);
  CHECK(pst_cfg_load(&cfg, 1, argv, err, sizeof err) == 0 && o_workers == 3,
        "WORKERS=3 from the environment: %s", err);
  unsetenv("PSTRAIN_TEST_INT_WORKERS");
}

int main(void) {
  test_parse_int();
  test_hostport();
  test_parse();
  test_configure();
  test_tfjob();
  test_k8s();
  test_resolve();
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
