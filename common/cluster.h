/* The cluster layout TensorFlow users already write, TF_CONFIG:
 *
 *   {"cluster": {"ps": ["ps0.example:7070"],
 *                "worker": ["gpu1.example:7071", "gpu2.example:7071"]},
 *    "task": {"type": "worker", "index": 1}}
 *
 * parsed with cJSON. Both daemons take it from their tf-config option (--tf-config, the
 * config file's tf-config key or PSTRAIN_{PS,WORKER}_TF_CONFIG; the JSON itself or @FILE),
 * else from the TF_CONFIG environment variable, and fill in from it:
 *   pstrain-ps      listen  = cluster.ps[task.index] (its address when the host is an IP
 *                             literal, else 0.0.0.0 with that port)
 *                   workers = the length of cluster.worker
 *                   shard   = task.index/len(cluster.ps), when it lists several ps
 *   pstrain-worker  ps      = every entry of cluster.ps, in order, comma-separated
 *                   index   = task.index
 * Only options still at their defaults are filled in: a config file, the PSTRAIN_*
 * environment and flags all win over TF_CONFIG. Several entries in cluster.ps are ps shards
 * (kernels/partition.h), at most PST_CLUSTER_MAX_PS; a worker's own host:port in cluster.worker is checked but not used
 * (workers only connect out). Other job names ("chief", "evaluator") and top-level keys are
 * ignored. Errors name the bad entry: "TF_CONFIG: cluster.worker[2]: 'x' is not host:port". */
#ifndef PSTRAIN_COMMON_CLUSTER_H
#define PSTRAIN_COMMON_CLUSTER_H

#include <stddef.h>
#include <uv.h>

#include "common/config.h"

#define PST_CLUSTER_ADDR_MAX 272 /* host (255) + ':' + port, and brackets for IPv6 */
#define PST_CLUSTER_MAX_PS 64    /* = PST_MAX_SHARDS (kernels/partition.h) */

typedef enum { PST_ROLE_PS = 0, PST_ROLE_WORKER } pst_role;

typedef struct {
  char (*ps)[PST_CLUSTER_ADDR_MAX];     /* [n_ps] "host:port" */
  int n_ps;
  char (*worker)[PST_CLUSTER_ADDR_MAX]; /* [n_worker] */
  int n_worker;
  int has_task;
  char task_type[32];
  int task_index;
} pst_cluster;

/* Parses and checks a TF_CONFIG document for `role`. `label` starts every error message
 * ("TF_CONFIG"). Returns 0, or -EINVAL with a one-line reason in err. */
int pst_cluster_parse(const char *json, pst_role role, const char *label, pst_cluster *cl,
                      char *err, size_t errlen);
void pst_cluster_free(pst_cluster *cl);

/* Finds the TF_CONFIG (option "tf-config" of cfg, else the environment), parses it and sets
 * the options it implies that are still at their defaults; then what a Kubernetes pod's
 * environment implies (common/k8s.h: the options k8s-ps and k8s-ps-replicas, the host name,
 * JOB_COMPLETION_INDEX). Returns 0 (also when there is neither), or a negative code with a
 * one-line reason in err. */
int pst_cluster_configure(pst_cfg *cfg, pst_role role, char *err, size_t errlen);

/* Resolves a listen host (an IP literal, "0.0.0.0", or a name, looked up synchronously with
 * uv_getaddrinfo, IPv4 preferred) to a numeric address in ip[iplen]. 0 or a negative code. */
int pst_resolve_listen(const char *host, char *ip, size_t iplen, char *err, size_t errlen);

/* The peer of a connected TCP handle as "ip:port" in out[len] (for log lines), or "?" when
 * it is not known. */
void pst_tcp_peer_name(const uv_tcp_t *tcp, char *out, size_t len);

#endif
