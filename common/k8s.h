/* The cluster as Kubernetes describes it to a pod, without a hand-written TF_CONFIG
 * (deploy/kubernetes/): the ps shards are the pods of a StatefulSet behind a headless
 * Service, and the workers are the pods of an Indexed Job.
 *
 *   k8s-ps = NAME[.SERVICE]:PORT      the StatefulSet NAME, whose pods NAME-0 .. NAME-(K-1)
 *   k8s-ps-replicas = K               the headless Service SERVICE (default: NAME) names as
 *                                     NAME-I.SERVICE, each listening on PORT
 *
 * from which, for options that no config file, environment variable, flag or TF_CONFIG has
 * set (the same rule as TF_CONFIG's, common/cluster.h):
 *   pstrain-ps      listen  = 0.0.0.0:PORT
 *                   shard   = I/K when K > 1, I being this pod's ordinal: its host name
 *                             (the pod's name, NAME-I) without NAME-
 *   pstrain-worker  ps      = NAME-0.SERVICE:PORT,...,NAME-(K-1).SERVICE:PORT
 * and, for a worker whether or not k8s-ps is set,
 *                   index   = $JOB_COMPLETION_INDEX, which an Indexed Job gives each pod.
 * --print-config names the source "kubernetes". The number of workers is not in a pod's
 * environment (the Job's completions are the Job's): the ps's config gives it. A ps pod
 * whose host name is not NAME-I with I < K, or a JOB_COMPLETION_INDEX that is not a worker
 * index, is a configuration error naming both. */
#ifndef PSTRAIN_COMMON_K8S_H
#define PSTRAIN_COMMON_K8S_H

#include <stddef.h>

#include "common/cluster.h"
#include "common/config.h"

/* The Indexed Job's variable; the one name for the daemons and their tests. */
#define PST_K8S_INDEX_ENV "JOB_COMPLETION_INDEX"

/* The two entries of a daemon's option table: the string `spec` (char[PST_CFG_STR_MAX]) and
 * the int64_t `replicas`. */
#define PST_K8S_OPTS(spec, replicas)                                                           \
  PST_OPT("k8s-ps", PST_CFG_STRING, spec, "",                                                  \
          "Kubernetes: the ps StatefulSet as NAME[.SERVICE]:PORT, its pods NAME-I.SERVICE "    \
          "(SERVICE: its headless Service, default NAME); empty: off", 0, 0),                  \
  PST_OPT("k8s-ps-replicas", PST_CFG_INT, &(replicas), "1",                                    \
          "Kubernetes: the replicas of that StatefulSet (the ps shards)", 1,                   \
          PST_CLUSTER_MAX_PS)

typedef struct {
  char set[64];       /* the StatefulSet's name: a DNS label of at most 52 characters */
  char service[256];  /* what follows the pod's name in its DNS name */
  int port;
  int replicas;
} pst_k8s_ps;

/* Parses a k8s-ps value for `replicas` pods. 0, or -EINVAL with a one-line reason. */
int pst_k8s_parse_ps(const char *spec, int replicas, pst_k8s_ps *out, char *err,
                     size_t errlen);

/* The ordinal of the StatefulSet pod whose host name is `host` (a pod's name, or its
 * fully qualified name): 0 .. replicas-1, or -EINVAL with a one-line reason. */
int pst_k8s_ordinal(const pst_k8s_ps *ps, const char *host, char *err, size_t errlen);

/* Fills in what the pod's environment implies for `role` (above), from this host's name
 * and JOB_COMPLETION_INDEX. Called by pst_cluster_configure after TF_CONFIG. 0 (also when
 * there is nothing to fill in), or a negative code with a one-line reason in err. */
int pst_k8s_configure(pst_cfg *cfg, pst_role role, char *err, size_t errlen);

/* pst_k8s_configure with the host name and the index variable given (NULL: unset), for
 * tests. `tf_config` says whether a TF_CONFIG was found: it and k8s-ps do not go together. */
int pst_k8s_apply(pst_cfg *cfg, pst_role role, const char *host, const char *job_index,
                  int tf_config, char *err, size_t errlen);

#endif
