#include "common/cluster.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "common/k8s.h"

#define TF_CONFIG_MAX_BYTES (1 << 20)

static const char *role_prog(pst_role role) {
  return role == PST_ROLE_PS ? "pstrain-ps" : "pstrain-worker";
}

/* Checks one job's list: a non-empty array of "host:port" strings. */
static int parse_job(const cJSON *cluster, const char *job, const char *label,
                     char (**out)[PST_CLUSTER_ADDR_MAX], int *n, char *err, size_t errlen) {
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(cluster, job);
  *out = NULL;
  *n = 0;
  if (!arr) return 0;
  if (!cJSON_IsArray(arr)) {
    snprintf(err, errlen, "%s: cluster.%s must be a list of \"host:port\" strings", label, job);
    return -EINVAL;
  }
  int count = cJSON_GetArraySize(arr);
  if (count == 0) {
    snprintf(err, errlen, "%s: cluster.%s is empty", label, job);
    return -EINVAL;
  }
  if (count > 4096) {
    snprintf(err, errlen, "%s: cluster.%s lists %d entries (at most 4096)", label, job, count);
    return -EINVAL;
  }
  *out = calloc((size_t)count, sizeof **out);
  if (!*out) return -ENOMEM;
  int i = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, arr) {
    char host[256];
    int port;
    if (!cJSON_IsString(e)) {
      char *shown = cJSON_PrintUnformatted(e);
      snprintf(err, errlen, "%s: cluster.%s[%d]: %.60s is not a \"host:port\" string", label, job,
               i, shown ? shown : "?");
      free(shown);
      return -EINVAL;
    }
    /* No host name or address has a comma; the ps shards travel to the worker as one
     * comma-separated --ps list. */
    if (strlen(e->valuestring) >= PST_CLUSTER_ADDR_MAX || strchr(e->valuestring, ',') ||
        pst_parse_hostport(e->valuestring, host, sizeof host, &port) < 0) {
      snprintf(err, errlen, "%s: cluster.%s[%d]: '%.80s' is not host:port", label, job, i,
               e->valuestring);
      return -EINVAL;
    }
    for (int j = 0; j < i; j++)
      if (!strcmp((*out)[j], e->valuestring)) {
        snprintf(err, errlen, "%s: cluster.%s[%d] repeats cluster.%s[%d] ('%.80s')", label, job, i,
                 job, j, e->valuestring);
        return -EINVAL;
      }
    snprintf((*out)[i], PST_CLUSTER_ADDR_MAX, "%s", e->valuestring);
    i++;
  }
  *n = count;
  return 0;
}

static int parse_task(const cJSON *root, pst_role role, const char *label, pst_cluster *cl,
                      char *err, size_t errlen) {
  const cJSON *task = cJSON_GetObjectItemCaseSensitive(root, "task");
  if (!task) return 0;
  if (!cJSON_IsObject(task)) {
    snprintf(err, errlen, "%s: task must be an object like {\"type\": \"worker\", \"index\": 0}",
             label);
    return -EINVAL;
  }
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(task, "type");
  const cJSON *index = cJSON_GetObjectItemCaseSensitive(task, "index");
  if (!cJSON_IsString(type) || strlen(type->valuestring) >= sizeof cl->task_type) {
    snprintf(err, errlen, "%s: task.type must be \"ps\" or \"worker\"", label);
    return -EINVAL;
  }
  const char *want = role == PST_ROLE_PS ? "ps" : "worker";
  if (strcmp(type->valuestring, want) != 0) {
    if (strcmp(type->valuestring, "ps") && strcmp(type->valuestring, "worker"))
      snprintf(err, errlen, "%s: task.type '%.30s' is not supported (pstrain has \"ps\" and "
                            "\"worker\" tasks)", label, type->valuestring);
    else
      snprintf(err, errlen, "%s: task.type is '%s' but this is %s (give it a TF_CONFIG with "
                            "task.type \"%s\")", label, type->valuestring, role_prog(role), want);
    return -EINVAL;
  }
  int n = role == PST_ROLE_PS ? cl->n_ps : cl->n_worker;
  /* The range check comes first: converting an out-of-range double to int is undefined. */
  if (index && (!cJSON_IsNumber(index) || !(index->valuedouble >= 0) ||
                index->valuedouble > 1e6 ||
                index->valuedouble != (double)(int)index->valuedouble)) {
    char *shown = cJSON_PrintUnformatted(index);
    snprintf(err, errlen, "%s: task.index must be a whole number >= 0, got %.40s", label,
             shown ? shown : "?");
    free(shown);
    return -EINVAL;
  }
  int i = index ? (int)index->valuedouble : 0;
  if (n > 0 && i >= n) {
    snprintf(err, errlen, "%s: task.index %d is out of range: cluster.%s has %d entr%s", label, i,
             want, n, n == 1 ? "y" : "ies");
    return -EINVAL;
  }
  snprintf(cl->task_type, sizeof cl->task_type, "%s", want);
  cl->task_index = i;
  cl->has_task = 1;
  return 0;
}

int pst_cluster_parse(const char *json, pst_role role, const char *label, pst_cluster *cl,
                      char *err, size_t errlen) {
  memset(cl, 0, sizeof *cl);
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithOpts(json, &end, 1);
  if (!root) {
    size_t at = end && end >= json ? (size_t)(end - json) : 0;
    snprintf(err, errlen, "%s: not valid JSON (at byte %zu: '%.20s')", label, at,
             end && end >= json ? end : "");
    return -EINVAL;
  }
  int rc = -EINVAL;
  const cJSON *cluster = cJSON_GetObjectItemCaseSensitive(root, "cluster");
  if (!cJSON_IsObject(root)) {
    snprintf(err, errlen, "%s: must be a JSON object with \"cluster\" and \"task\"", label);
    goto out;
  }
  if (!cJSON_IsObject(cluster)) {
    snprintf(err, errlen, "%s: no \"cluster\" object (want {\"cluster\": {\"ps\": [...], "
                          "\"worker\": [...]}, \"task\": {...}})", label);
    goto out;
  }
  if ((rc = parse_job(cluster, "ps", label, &cl->ps, &cl->n_ps, err, errlen)) < 0 ||
      (rc = parse_job(cluster, "worker", label, &cl->worker, &cl->n_worker, err, errlen)) < 0)
    goto out;
  rc = -EINVAL;
  if (cl->n_ps == 0) {
    snprintf(err, errlen, "%s: cluster.ps is missing (the ps's \"host:port\")", label);
    goto out;
  }
  if (cl->n_ps > PST_CLUSTER_MAX_PS) {
    snprintf(err, errlen, "%s: cluster.ps lists %d servers; pstrain shards the weights over at "
             "most %d", label, cl->n_ps, PST_CLUSTER_MAX_PS);
    goto out;
  }
  if (role == PST_ROLE_PS && cl->n_worker == 0) {
    snprintf(err, errlen, "%s: cluster.worker is missing (the ps trains with one worker per "
                          "entry)", label);
    goto out;
  }
  rc = parse_task(root, role, label, cl, err, errlen);
out:
  cJSON_Delete(root);
  if (rc < 0) pst_cluster_free(cl);
  return rc;
}

void pst_cluster_free(pst_cluster *cl) {
  free(cl->ps);
  free(cl->worker);
  cl->ps = cl->worker = NULL;
  cl->n_ps = cl->n_worker = 0;
}

/* Reads @FILE (a TF_CONFIG kept in a file) into a new string. */
static char *read_file(const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "TF_CONFIG: cannot open @%s: %s", path, strerror(errno));
    return NULL;
  }
  char *buf = malloc(TF_CONFIG_MAX_BYTES + 1);
  size_t n = buf ? fread(buf, 1, TF_CONFIG_MAX_BYTES + 1, f) : 0;
  int bad = ferror(f);
  fclose(f);
  if (!buf || bad || n > TF_CONFIG_MAX_BYTES) {
    snprintf(err, errlen, "TF_CONFIG: cannot read @%s: %s", path,
             !buf ? "out of memory" : bad ? "read error" : "larger than 1 MiB");
    free(buf);
    return NULL;
  }
  buf[n] = '\0';
  return buf;
}

static int is_ip_literal(const char *host) {
  unsigned char tmp[16];
  return uv_inet_pton(AF_INET, host, tmp) == 0 || uv_inet_pton(AF_INET6, host, tmp) == 0;
}

/* TF_CONFIG's part of pst_cluster_configure. */
static int tf_config_configure(pst_cfg *cfg, pst_role role, char *err, size_t errlen) {
  pst_cfg_opt *opt = pst_cfg_find(cfg, "tf-config");
  const char *text = opt && ((char *)opt->value)[0] ? (const char *)opt->value : NULL;
  pst_cfg_source src = text ? opt->source : PST_SRC_ENV;
  char label[PST_CFG_STR_MAX + 64] = "TF_CONFIG";
  if (text) {
    snprintf(label, sizeof label, "TF_CONFIG from %s", opt->origin);
  } else {
    text = getenv("TF_CONFIG");
    if (!text || !text[0]) return 0;
  }
  char *owned = NULL;
  if (text[0] == '@') {
    owned = read_file(text + 1, err, errlen);
    if (!owned) return -EINVAL;
    size_t n = strlen(label);
    snprintf(label + n, sizeof label - n, " (%.300s)", text);
    text = owned;
  }
  pst_cluster cl;
  int rc = pst_cluster_parse(text, role, label, &cl, err, errlen);
  free(owned);
  if (rc < 0) return rc;

  char value[PST_CLUSTER_ADDR_MAX + 16], host[256];
  int port;
  if (role == PST_ROLE_PS) {
    int i = cl.has_task ? cl.task_index : 0;
    pst_parse_hostport(cl.ps[i], host, sizeof host, &port);
    /* A name may resolve to an address this host does not have (or to several), so the
     * ps listens on every interface then; an IP literal is taken as meant. */
    if (!is_ip_literal(host))
      snprintf(value, sizeof value, "0.0.0.0:%d", port);
    else if (strchr(host, ':'))
      snprintf(value, sizeof value, "[%s]:%d", host, port);
    else
      snprintf(value, sizeof value, "%s:%d", host, port);
    char origin[64], count[16];
    snprintf(origin, sizeof origin, "TF_CONFIG cluster.ps[%d]", i);
    snprintf(count, sizeof count, "%d", cl.n_worker);
    if ((rc = pst_cfg_set_default(cfg, "listen", value, src, origin, err, errlen)) == 0)
      rc = pst_cfg_set_default(cfg, "workers", count, src, "TF_CONFIG len(cluster.worker)", err,
                               errlen);
    if (rc == 0 && cl.n_ps > 1) {
      snprintf(value, sizeof value, "%d/%d", i, cl.n_ps);
      rc = pst_cfg_set_default(cfg, "shard", value, src, "TF_CONFIG task.index/len(cluster.ps)",
                               err, errlen);
    }
  } else {
    /* Every shard, in order, comma-separated: the worker's --ps list. */
    char list[PST_CFG_STR_MAX];
    size_t used = 0;
    list[0] = 0;
    for (int i = 0; i < cl.n_ps && rc == 0; i++) {
      int w = snprintf(list + used, sizeof list - used, "%s%s", i ? "," : "", cl.ps[i]);
      if (w < 0 || (size_t)w >= sizeof list - used) {
        snprintf(err, errlen, "%s: cluster.ps is too long for one --ps list", label);
        rc = -EINVAL;
      } else {
        used += (size_t)w;
      }
    }
    if (rc == 0)
      rc = pst_cfg_set_default(cfg, "ps", list, src, "TF_CONFIG cluster.ps", err, errlen);
    if (rc == 0 && cl.has_task) {
      snprintf(value, sizeof value, "%d", cl.task_index);
      rc = pst_cfg_set_default(cfg, "index", value, src, "TF_CONFIG task.index", err, errlen);
    }
  }
  pst_cluster_free(&cl);
  return rc;
}

int pst_cluster_configure(pst_cfg *cfg, pst_role role, char *err, size_t errlen) {
  /* TF_CONFIG first: a TFJob's pods may also carry what Kubernetes itself sets. */
  int rc = tf_config_configure(cfg, role, err, errlen);
  return rc < 0 ? rc : pst_k8s_configure(cfg, role, err, errlen);
}

int pst_resolve_listen(const char *host, char *ip, size_t iplen, char *err, size_t errlen) {
  if (is_ip_literal(host)) {
    if ((size_t)snprintf(ip, iplen, "%s", host) >= iplen) {
      snprintf(err, errlen, "--listen: address '%.200s' is too long", host);
      return -ENAMETOOLONG;
    }
    return 0;
  }
  uv_loop_t loop;
  int rc = uv_loop_init(&loop);
  if (rc < 0) {
    snprintf(err, errlen, "--listen: cannot resolve '%.200s': %s", host, uv_strerror(rc));
    return rc;
  }
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  uv_getaddrinfo_t req;
  /* No callback: uv_getaddrinfo answers synchronously, which is what a daemon that has not
   * started serving yet wants. */
  rc = uv_getaddrinfo(&loop, &req, NULL, host, NULL, &hints);
  if (rc < 0) {
    snprintf(err, errlen, "--listen: cannot resolve '%.200s': %s", host, uv_strerror(rc));
  } else {
    const struct addrinfo *pick = NULL;
    for (const struct addrinfo *a = req.addrinfo; a && !pick; a = a->ai_next)
      if (a->ai_family == AF_INET) pick = a;
    for (const struct addrinfo *a = req.addrinfo; a && !pick; a = a->ai_next)
      if (a->ai_family == AF_INET6) pick = a;
    if (!pick) {
      snprintf(err, errlen, "--listen: '%.200s' has no IPv4 or IPv6 address", host);
      rc = -EADDRNOTAVAIL;
    } else if (pick->ai_family == AF_INET) {
      rc = uv_ip4_name((const struct sockaddr_in *)pick->ai_addr, ip, iplen);
    } else {
      rc = uv_ip6_name((const struct sockaddr_in6 *)pick->ai_addr, ip, iplen);
    }
    if (rc < 0)
      snprintf(err, errlen, "--listen: cannot use the address of '%.200s': %s", host,
               uv_strerror(rc));
    uv_freeaddrinfo(req.addrinfo);
  }
  uv_loop_close(&loop);
  return rc;
}

void pst_tcp_peer_name(const uv_tcp_t *tcp, char *out, size_t len) {
  struct sockaddr_storage sa;
  int n = sizeof sa;
  snprintf(out, len, "?");
  if (uv_tcp_getpeername(tcp, (struct sockaddr *)&sa, &n) != 0) return;
  char ip[48] = "?";
  int port = 0;
  if (sa.ss_family == AF_INET) {
    uv_ip4_name((struct sockaddr_in *)&sa, ip, sizeof ip);
    port = ntohs(((struct sockaddr_in *)&sa)->sin_port);
  } else if (sa.ss_family == AF_INET6) {
    uv_ip6_name((struct sockaddr_in6 *)&sa, ip, sizeof ip);
    port = ntohs(((struct sockaddr_in6 *)&sa)->sin6_port);
  }
  snprintf(out, len, "%s:%d", ip, port);
}
