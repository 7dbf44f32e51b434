#include "common/k8s.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A StatefulSet's name may have at most 52 characters: its pods' controller-revision-hash
 * label adds 11 to it and a label value holds 63. */
#define K8S_SET_MAX 52

static int is_label_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
}

/* A DNS label as Kubernetes names objects (RFC 1123): lower-case letters, digits and '-',
 * starting and ending with a letter or digit. */
static int is_dns_label(const char *s, size_t n) {
  if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-') return 0;
  for (size_t i = 0; i < n; i++)
    if (!is_label_char(s[i])) return 0;
  return 1;
}

/* Dot-separated DNS labels (a Service, optionally with its namespace and domain). */
static int is_dns_name(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > 200) return 0;
  const char *p = s;
  for (;;) {
    const char *dot = strchr(p, '.');
    size_t len = dot ? (size_t)(dot - p) : strlen(p);
    if (!is_dns_label(p, len)) return 0;
    if (!dot) return 1;
    p = dot + 1;
  }
}

int pst_k8s_parse_ps(const char *spec, int replicas, pst_k8s_ps *out, char *err,
                     size_t errlen) {
  memset(out, 0, sizeof *out);
  char host[256];
  if (strchr(spec, '[') || pst_parse_hostport(spec, host, sizeof host, &out->port) < 0) {
    snprintf(err, errlen, "k8s-ps: '%.200s' is not NAME[.SERVICE]:PORT (the ps StatefulSet, "
                          "e.g. pstrain-ps:7070)", spec);
    return -EINVAL;
  }
  const char *dot = strchr(host, '.');
  size_t set_len = dot ? (size_t)(dot - host) : strlen(host);
  if (!is_dns_label(host, set_len) || set_len > K8S_SET_MAX) {
    snprintf(err, errlen, "k8s-ps: '%.*s' is not a StatefulSet name (lower-case letters, "
             "digits and '-', at most %d characters)", (int)set_len, host, K8S_SET_MAX);
    return -EINVAL;
  }
  memcpy(out->set, host, set_len);
  out->set[set_len] = '\0';
  snprintf(out->service, sizeof out->service, "%s", dot ? dot + 1 : out->set);
  if (!is_dns_name(out->service)) {
    snprintf(err, errlen, "k8s-ps: '%.200s' is not a Service's DNS name", out->service);
    return -EINVAL;
  }
  if (replicas < 1 || replicas > PST_CLUSTER_MAX_PS) {
    snprintf(err, errlen, "k8s-ps-replicas must be in 1..%d, got %d", PST_CLUSTER_MAX_PS,
             replicas);
    return -EINVAL;
  }
  out->replicas = replicas;
  return 0;
}

int pst_k8s_ordinal(const pst_k8s_ps *ps, const char *host, char *err, size_t errlen) {
  /* The pod's own name is the host name; setHostnameAsFQDN makes it the whole DNS name. */
  size_t host_len = strcspn(host, ".");
  size_t set_len = strlen(ps->set);
  const char *digits = host + set_len + 1;
  size_t n_digits = host_len > set_len + 1 ? host_len - set_len - 1 : 0;
  int ordinal = -1;
  if (strncmp(host, ps->set, set_len) == 0 && host[set_len] == '-' && n_digits > 0 &&
      n_digits <= 5 && strspn(digits, "0123456789") == n_digits &&
      (n_digits == 1 || digits[0] != '0'))
    ordinal = atoi(digits);
  if (ordinal < 0) {
    snprintf(err, errlen, "k8s-ps %.60s: this host, '%.*s', is not a pod of StatefulSet %s "
             "(%s-0 .. %s-%d)", ps->set, (int)(host_len > 80 ? 80 : host_len), host, ps->set,
             ps->set, ps->set, ps->replicas - 1);
    return -EINVAL;
  }
  if (ordinal >= ps->replicas) {
    snprintf(err, errlen, "k8s-ps %.60s: this pod, %s-%d, is beyond k8s-ps-replicas %d: give "
             "k8s-ps-replicas the StatefulSet's replicas", ps->set, ps->set, ordinal,
             ps->replicas);
    return -EINVAL;
  }
  return ordinal;
}

/* JOB_COMPLETION_INDEX: a whole number that is a worker index. */
static int parse_index(const char *text, char *err, size_t errlen) {
  int64_t v;
  if (text[0] < '0' || text[0] > '9' || pst_parse_int(text, 0, 4095, &v) < 0) {
    snprintf(err, errlen, "%s: '%.40s' is not a worker index (0 to 4095)", PST_K8S_INDEX_ENV,
             text);
    return -EINVAL;
  }
  return (int)v;
}

int pst_k8s_apply(pst_cfg *cfg, pst_role role, const char *host, const char *job_index,
                  int tf_config, char *err, size_t errlen) {
  pst_cfg_opt *spec_opt = pst_cfg_find(cfg, "k8s-ps");
  pst_cfg_opt *rep_opt = pst_cfg_find(cfg, "k8s-ps-replicas");
  const char *spec = spec_opt ? (const char *)spec_opt->value : "";
  int rc = 0;
  if (spec[0]) {
    if (tf_config) {
      snprintf(err, errlen, "k8s-ps (%s) and TF_CONFIG both describe the cluster: give one",
               spec_opt->origin);
      return -EINVAL;
    }
    pst_k8s_ps ps;
    int replicas = rep_opt ? (int)*(int64_t *)rep_opt->value : 1;
    if ((rc = pst_k8s_parse_ps(spec, replicas, &ps, err, errlen)) < 0) return rc;
    char value[PST_CFG_STR_MAX], origin[160];
    if (role == PST_ROLE_PS) {
      int ordinal = pst_k8s_ordinal(&ps, host, err, errlen);
      if (ordinal < 0) return ordinal;
      snprintf(value, sizeof value, "0.0.0.0:%d", ps.port);
      snprintf(origin, sizeof origin, "k8s-ps %.100s", spec);
      rc = pst_cfg_set_default(cfg, "listen", value, PST_SRC_KUBERNETES, origin, err, errlen);
      if (rc == 0 && ps.replicas > 1) {
        snprintf(value, sizeof value, "%d/%d", ordinal, ps.replicas);
        snprintf(origin, sizeof origin, "host name %.64s, of k8s-ps-replicas %d", host,
                 ps.replicas);
        rc = pst_cfg_set_default(cfg, "shard", value, PST_SRC_KUBERNETES, origin, err, errlen);
      }
    } else {
      size_t used = 0;
      for (int i = 0; i < ps.replicas; i++) {
        int w = snprintf(value + used, sizeof value - used, "%s%s-%d.%s:%d", i ? "," : "",
                         ps.set, i, ps.service, ps.port);
        if (w < 0 || (size_t)w >= sizeof value - used) {
          snprintf(err, errlen, "k8s-ps %.100s: %d replicas are too many names for one ps list",
                   spec, ps.replicas);
          return -EINVAL;
        }
        used += (size_t)w;
      }
      snprintf(origin, sizeof origin, "k8s-ps %.100s, k8s-ps-replicas %d", spec, ps.replicas);
      rc = pst_cfg_set_default(cfg, "ps", value, PST_SRC_KUBERNETES, origin, err, errlen);
    }
    if (rc < 0) return rc;
  }
  if (role == PST_ROLE_WORKER && job_index && job_index[0]) {
    int index = parse_index(job_index, err, errlen);
    if (index < 0) return index;
    char value[16];
    snprintf(value, sizeof value, "%d", index);
    rc = pst_cfg_set_default(cfg, "index", value, PST_SRC_KUBERNETES, PST_K8S_INDEX_ENV, err,
                             errlen);
  }
  return rc;
}

int pst_k8s_configure(pst_cfg *cfg, pst_role role, char *err, size_t errlen) {
  char host[HOST_NAME_MAX + 1] = "";
  if (gethostname(host, sizeof host) < 0) host[0] = '\0';
  host[sizeof host - 1] = '\0';
  const char *tf = getenv("TF_CONFIG");
  pst_cfg_opt *tf_opt = pst_cfg_find(cfg, "tf-config");
  int tf_config = (tf && tf[0]) || (tf_opt && ((const char *)tf_opt->value)[0]);
  return pst_k8s_apply(cfg, role, host, getenv(PST_K8S_INDEX_ENV), tf_config, err, errlen);
}
