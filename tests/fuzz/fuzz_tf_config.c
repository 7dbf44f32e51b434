/* Fuzzes the TF_CONFIG parser (common/cluster.h): the input, up to its first NUL, is a
 * TF_CONFIG document.
 *
 *  - pst_cluster_parse for the ps and for a worker: a refusal is -EINVAL with one line and
 *    nothing left allocated; an acceptance has 1 to 64 ps, a worker list for the ps,
 *    every entry "host:port", a task of this role whose index is inside its list;
 *  - pst_cluster_configure for both roles on a configuration whose tf-config option holds
 *    the document (when it fits the option, and not "@FILE": a path could name a terminal
 *    or a fifo), then every option it set must be valid: listen an address:port, workers
 *    the worker list's length, ps a host:port, index the task's;
 *  - pst_resolve_listen on the ps's host when it is an IP literal (names would go to DNS). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "common/cluster.h"
#include "common/config.h"
#include "kernels/partition.h"

#define CHECK(cond, ...)                                             \
  do {                                                               \
    if (!(cond)) {                                                   \
      fprintf(stderr, "fuzz_tf_config: check failed: %s: ", #cond); \
      fprintf(stderr, __VA_ARGS__);                                  \
      fprintf(stderr, "\n");                                         \
      abort();                                                       \
    }                                                                \
  } while (0)

#define MAX_DOC (1 << 20) /* what @FILE may hold */

static char o_tf[PST_CFG_STR_MAX], o_listen[PST_CFG_STR_MAX], o_ps[PST_CFG_STR_MAX];
static char o_shard[PST_CFG_STR_MAX];
static int64_t o_workers, o_index;

/* Errors are documented as one line. Values are echoed into them unfiltered, so a value
 * with a newline makes two: a known finding (docs/fuzzing.md, crashers/), checked only with
 * FUZZ_STRICT_ONE_LINE=1 until it is fixed, so that the fuzzer can look for anything else. */
static void check_line(const char *err) {
  static int strict = -1;
  if (strict < 0) strict = getenv("FUZZ_STRICT_ONE_LINE") && atoi(getenv("FUZZ_STRICT_ONE_LINE"));
  CHECK(err[0] != '\0', "no error message");
  CHECK(!strict || strchr(err, '\n') == NULL, "a multi-line error: \"%s\"", err);
}

static int is_ip(const char *host) {
  unsigned char tmp[16];
  return uv_inet_pton(AF_INET, host, tmp) == 0 || uv_inet_pton(AF_INET6, host, tmp) == 0;
}

static void check_cluster(const pst_cluster *cl, pst_role role, const char *json) {
  char host[256];
  int port;
  CHECK(cl->n_ps >= 1 && cl->n_ps <= 64 && cl->ps != NULL, "%d ps entries: %s", cl->n_ps, json);
  CHECK(role == PST_ROLE_WORKER || cl->n_worker >= 1, "a ps without workers: %s", json);
  CHECK(cl->n_worker >= 0 && cl->n_worker <= 4096, "%d workers", cl->n_worker);
  for (int i = 0; i < cl->n_ps; i++)
    CHECK(pst_parse_hostport(cl->ps[i], host, sizeof host, &port) == 0, "ps[%d] '%s'", i, cl->ps[i]);
  for (int i = 0; i < cl->n_worker; i++)
    CHECK(pst_parse_hostport(cl->worker[i], host, sizeof host, &port) == 0, "worker[%d] '%s'", i,
          cl->worker[i]);
  if (cl->has_task) {
    int n = role == PST_ROLE_PS ? cl->n_ps : cl->n_worker;
    CHECK(strcmp(cl->task_type, role == PST_ROLE_PS ? "ps" : "worker") == 0, "task type '%s'",
          cl->task_type);
    CHECK(cl->task_index >= 0 && (n == 0 || cl->task_index < n), "task index %d of %d",
          cl->task_index, n);
  }
}

static void configure(const char *json, pst_role role, const pst_cluster *cl) {
  pst_cfg_opt opts[] = {
      PST_OPT("tf-config", PST_CFG_STRING, o_tf, "", "TF_CONFIG", 0, 0),
      PST_OPT("listen", PST_CFG_STRING, o_listen, "127.0.0.1:7070", "listen", 0, 0),
      PST_OPT("workers", PST_CFG_INT, &o_workers, "1", "workers", 1, 4096),
      PST_OPT("ps", PST_CFG_STRING, o_ps, "127.0.0.1:7070", "ps", 0, 0),
      PST_OPT("index", PST_CFG_INT, &o_index, "-1", "index", -1, 4095),
      PST_OPT("shard", PST_CFG_STRING, o_shard, "0/1", "shard", 0, 0),
  };
  pst_cfg c = {.prog = "pstrain-fuzz", .section = "fuzz", .env_prefix = "PSTRAIN_FUZZ_",
               .opts = opts, .n_opts = (int)(sizeof opts / sizeof opts[0])};
  char err[1024], *argv[] = {"pstrain-fuzz", NULL};
  CHECK(pst_cfg_load(&c, 1, argv, err, sizeof err) == 0, "%s", err);
  CHECK(pst_cfg_set(&c, "tf-config", json, PST_SRC_FLAG, "--tf-config", err, sizeof err) == 0,
        "%s", err);
  int rc = pst_cluster_configure(&c, role, err, sizeof err);
  if (rc < 0) {
    check_line(err);
    return;
  }
  CHECK(cl != NULL, "configure accepted what parse refused: %s", json);
  char host[256];
  int port;
  if (role == PST_ROLE_PS) {
    CHECK(pst_parse_hostport(o_listen, host, sizeof host, &port) == 0, "listen '%s'", o_listen);
    int si, sk;
    CHECK(pst_partition_parse(o_shard, &si, &sk) == 0 && sk == cl->n_ps, "shard '%s'", o_shard);
    CHECK(o_workers == cl->n_worker, "workers %lld, cluster.worker has %d", (long long)o_workers,
          cl->n_worker);
    if (is_ip(host)) {
      /* An address literal needs no lookup, but one longer than the ps's buffer for it (64,
       * ps/main.c: an IPv6 literal whose zone after '%' runs on, found by this fuzzer) is
       * refused with its reason, as the ps refuses it at start. */
      char ip[64];
      int lrc = pst_resolve_listen(host, ip, sizeof ip, err, sizeof err);
      CHECK(lrc == 0 || (lrc == -ENAMETOOLONG && strlen(host) >= sizeof ip), "%s", err);
      if (lrc < 0) check_line(err);
    }
  } else {
    /* Every shard, in order, comma-separated. */
    char list[sizeof o_ps], *save = NULL;
    int n = 0;
    memcpy(list, o_ps, sizeof list);
    for (char *a = strtok_r(list, ",", &save); a; a = strtok_r(NULL, ",", &save), n++)
      CHECK(n < cl->n_ps && !strcmp(a, cl->ps[n]) &&
                pst_parse_hostport(a, host, sizeof host, &port) == 0, "ps '%s'", o_ps);
    CHECK(n == cl->n_ps, "ps '%s' lists %d of %d", o_ps, n, cl->n_ps);
    CHECK(!cl->has_task || o_index == cl->task_index, "index %lld, task %d", (long long)o_index,
          cl->task_index);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char json[MAX_DOC + 1];
  if (size > MAX_DOC) return 0;
  memcpy(json, data, size);
  json[size] = '\0';
  for (int r = 0; r < 2; r++) {
    pst_role role = r ? PST_ROLE_WORKER : PST_ROLE_PS;
    pst_cluster cl;
    char err[1024];
    int rc = pst_cluster_parse(json, role, "TF_CONFIG", &cl, err, sizeof err);
    if (rc < 0) {
      CHECK(rc == -EINVAL || rc == -ENOMEM, "rc %d", rc);
      check_line(err);
      CHECK(cl.ps == NULL && cl.worker == NULL && cl.n_ps == 0, "a refusal left lists behind");
    } else {
      check_cluster(&cl, role, json);
    }
    if (strlen(json) < PST_CFG_STR_MAX && json[0] && json[0] != '@')
      configure(json, role, rc == 0 ? &cl : NULL);
    if (rc == 0) pst_cluster_free(&cl);
  }
  return 0;
}
