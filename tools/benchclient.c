/* pstrain-benchclient: a worker without a model, for `pstrain bench` and the transport tests.
 *
 * It registers like a worker (HELLO with fingerprint 0 and --index), takes the ps's model
 * size from WELCOME, allocates its gradient and weight buffers once, then does rounds of
 * push (the whole gradient, zero-copy from its buffer) + pull (straight into its weight
 * buffer), timing each. After the last round it says BYE, pulls the final weights, sends a
 * last (empty) evaluation report so the ps can finish, and exits on SHUTDOWN, writing its
 * figures as one JSON line to --out.
 *
 * --check turns it into a test client:
 *   sum       every pushed value is a small integer from a pattern known to every client,
 *             so with `--optimizer sgd` the ps's arithmetic is exact and predictable: sync
 *             checks the weights after every step and at the end, async checks the final
 *             weights. In async the ps applies pushes in an order nobody knows, so a float
 *             result must not depend on it: every client pushes the elements whose initial
 *             weight is exactly 0 (the biases; integer sums there are exact in any order),
 *             and each other element is pushed by one client only, its "owner".
 *   versions  (with --role pull) every pulled vector must equal the initial weights after
 *             exactly `version` pushes of the constant --grad-value: a reply mixing two
 *             versions fails. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include <uv.h>

#include "common/clock.h"
#include "common/config.h"
#include "common/json_file.h"
#include "common/proc.h"
#include "common/log.h"
#include "model/model.h"
#include "kernels/partition.h"
#include "worker/client.h"

static char o_ps[PST_CFG_STR_MAX], o_name[PST_CFG_STR_MAX], o_out[PST_CFG_STR_MAX];
static char o_check[PST_CFG_STR_MAX], o_role[PST_CFG_STR_MAX], o_shard[PST_CFG_STR_MAX];
static int g_shard_index, g_shard_count = 1;
static int64_t o_index, o_rounds, o_warmup, o_watch_pid, o_rss_after;
static int o_pull_first;
static double o_timeout, o_grad_value, o_lr;

static pst_cfg_opt g_opts[] = {
    PST_OPT("ps", PST_CFG_STRING, o_ps, "127.0.0.1:7070", "address:port of the ps", 0, 0),
    PST_OPT("index", PST_CFG_INT, &o_index, "-1", "worker index to ask for (-1: any)", -1, 4095),
    PST_OPT("shard", PST_CFG_STRING, o_shard, "0/1", "I/K: the ps is shard I of K; rounds move its part of the weights", 0, 0),
    PST_OPT("name", PST_CFG_STRING, o_name, "bench", "name shown in the ps's log", 0, 0),
    PST_OPT("rounds", PST_CFG_INT, &o_rounds, "10", "timed push+pull rounds", 0, 100000000),
    PST_OPT("warmup", PST_CFG_INT, &o_warmup, "1", "untimed rounds first", 0, 1000000),
    PST_OPT("role", PST_CFG_STRING, o_role, "push", "push (push + pull rounds) or pull (pulls only)", 0, 0),
    PST_OPT("pull-first", PST_CFG_BOOL, &o_pull_first, "false", "send each round's PULL ahead of its push", 0, 0),
    PST_OPT("check", PST_CFG_STRING, o_check, "none", "none, sum or versions (see the source)", 0, 0),
    PST_OPT("grad-value", PST_CFG_DOUBLE, &o_grad_value, "1", "gradient value when not --check sum", 0, 0),
    PST_OPT("lr", PST_CFG_DOUBLE, &o_lr, "1", "the ps's SGD learning rate (for --check)", 0, 0),
    PST_OPT("watch-pid", PST_CFG_INT, &o_watch_pid, "0", "read this pid's VmRSS/VmHWM (the ps)", 0, INT32_MAX),
    PST_OPT("rss-after", PST_CFG_INT, &o_rss_after, "0", "read VmRSS after this many rounds too", 0, 100000000),
    PST_OPT("out", PST_CFG_STRING, o_out, "", "write the figures (one JSON line) here", 0, 0),
    PST_OPT("connect-timeout", PST_CFG_DOUBLE, &o_timeout, "30", "seconds to keep retrying the ps", 0, 0),
};

typedef enum { CHECK_NONE = 0, CHECK_SUM, CHECK_VERSIONS } check_kind;
typedef enum { PH_REGISTER = 0, PH_FIRST_PULL, PH_ROUNDS, PH_FINAL_PULL, PH_SHUTDOWN } phase;

typedef struct {
  wk_client cl;
  uv_loop_t *loop;
  check_kind check;
  int pull_only;
  phase ph;
  /* From WELCOME. */
  int index, world, sync;
  uint32_t epochs;
  size_t n;
  /* Buffers, allocated once at WELCOME. */
  float *grad;            /* [n] pushed from */
  float *w;               /* [n] pulled into */
  float *sim;             /* [n] --check: the expected weights */
  float *tmp;             /* [n] --check: scratch for the summed patterns */
  uint8_t *zero0;         /* [n] async --check sum: the initial weight is exactly 0 */
  uint64_t sim_version;   /* pushes (async) or steps (sync) applied to sim */
  uint64_t version;       /* of w */
  uint64_t last_pulled;   /* version of the pull before */
  /* Rounds. */
  long round, total;      /* rounds begun; warmup + timed */
  int push_busy, pull_busy;
  double t_round, t_pushed, t_first, t_last;
  double push_s, pull_s;  /* summed over the timed rounds */
  double *lat;            /* [rounds] seconds */
  uint64_t pulls;         /* pulls completed */
  uint64_t distinct;      /* pulls that brought another version than the pull before */
  long rss_warm_kib, rss_end_kib, hwm_kib;
  double ps_cpu0, ps_cpu_s; /* the watched pid's CPU seconds: at the first timed round, spent */
  double ps_loop0, ps_loop_s; /* the same for its main thread (the ps's event loop) */
  double cpu0, cpu_s;       /* ours, likewise */
  int exit_code;
} bench;


static void fail(bench *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(bench *b, const char *fmt, ...) {
  char why[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  if (b->exit_code == 0) LOG_ERR("%s", why);
  b->exit_code = 1;
  wk_client_close(&b->cl, NULL);
}

static void send_simple(bench *b, Pstrain__MsgType type, uint64_t version, int last) {
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  h.type = type;
  h.version = version;
  h.last = last != 0;
  wk_client_send(&b->cl, &h);
}

/* ---- the value patterns of --check sum ---- */

/* Client i's gradient element e in round r: small integers, so sums are exact. sync: every
 * client pushes every element. async: every client pushes the elements that start at 0, the
 * element's owner (e mod N) alone pushes the others. */
static float pattern(const bench *b, int i, long r, size_t e) {
  if (b->sync) return (float)((int)((e * 7 + (size_t)i * 13 + (size_t)r * 5) % 11) - 5);
  if (!b->zero0[e] && e % (size_t)b->world != (size_t)i) return 0.0f;
  return (float)((int)((e * 3 + (size_t)r * 7 + (size_t)i * 5) % 9) - 4);
}

/* One SGD step on sim, written like ps/train/optim.c's (weight decay 0) so the result is bit-equal:
 * w -= lr * (g * gscale + 0 * w). */
static void sim_apply(bench *b, const float *g, float gscale) {
  const float lr = (float)o_lr, wd = 0.0f;
  for (size_t e = 0; e < b->n; e++) {
    float gi = g[e] * gscale + wd * b->sim[e];
    b->sim[e] = b->sim[e] - lr * gi;
  }
}

/* sync --check sum: the step of round r is the sum of every client's pattern. */
static void sim_sync_round(bench *b, long r) {
  for (size_t e = 0; e < b->n; e++) {
    float s = 0.0f;
    for (int i = 0; i < b->world; i++) s += pattern(b, i, r, e);
    b->tmp[e] = s;
  }
  sim_apply(b, b->tmp, 1.0f);
}

static int compare(bench *b, const char *what) {
  for (size_t e = 0; e < b->n; e++)
    if (b->w[e] != b->sim[e]) {
      fail(b, "%s: version %" PRIu64 " element %zu of %zu is %.9g, expected %.9g", what,
           b->version, e, b->n, b->w[e], b->sim[e]);
      return -1;
    }
  return 0;
}

/* ---- rounds ---- */

static void finish(bench *b) {
  b->cpu_s = pst_proc_self_cpu_s() - b->cpu0;
  if (o_watch_pid > 0) {
    double c = pst_proc_cpu_s((long)o_watch_pid);
    b->ps_cpu_s = c >= 0 && b->ps_cpu0 >= 0 ? c - b->ps_cpu0 : -1;
    double l = pst_proc_thread_cpu_s((long)o_watch_pid, (long)o_watch_pid);
    b->ps_loop_s = l >= 0 && b->ps_loop0 >= 0 ? l - b->ps_loop0 : -1;
    b->rss_end_kib = pst_proc_status_kib((long)o_watch_pid, "VmRSS");
    b->hwm_kib = pst_proc_status_kib((long)o_watch_pid, "VmHWM");
  }
  b->ph = PH_FINAL_PULL;
  send_simple(b, PSTRAIN__MSG_TYPE__BYE, b->version, 0);
  send_simple(b, PSTRAIN__MSG_TYPE__PULL, 0, 1);
}

static void send_pull(bench *b) {
  b->pull_busy = 1;
  send_simple(b, PSTRAIN__MSG_TYPE__PULL, b->sync ? b->version + 1 : 0, 0);
}

static void start_round(bench *b) {
  if (b->round == b->total) {
    finish(b);
    return;
  }
  b->t_round = pst_now();
  if (b->round == o_warmup) {
    b->t_first = b->t_round;
    b->cpu0 = pst_proc_self_cpu_s();
    if (o_watch_pid > 0) {
      b->ps_cpu0 = pst_proc_cpu_s((long)o_watch_pid);
      b->ps_loop0 = pst_proc_thread_cpu_s((long)o_watch_pid, (long)o_watch_pid);
    }
  }
  /* Sent ahead of the push, a sync PULL for the next version lets the ps stream each chunk
   * of it back as soon as that chunk is final, while the rest of the push still arrives. */
  if (o_pull_first) send_pull(b);
  if (!b->pull_only) {
    if (b->check == CHECK_SUM)
      for (size_t e = 0; e < b->n; e++) b->grad[e] = pattern(b, b->index, b->round, e);
    int rc = wk_client_push(&b->cl, b->version, b->grad);
    if (rc < 0) {
      fail(b, "push failed: %s", uv_strerror(rc));
      return;
    }
    b->push_busy = 1;
  }
  b->t_pushed = b->t_round;
  /* Otherwise it is queued behind the push: the ps sees it once the push is in. */
  if (!o_pull_first) send_pull(b);
}

static void maybe_end_round(bench *b) {
  if (b->push_busy || b->pull_busy || b->ph != PH_ROUNDS) return;
  double t = pst_now();
  if (b->round >= o_warmup) {
    long k = b->round - o_warmup;
    b->lat[k] = t - b->t_round;
    b->push_s += b->t_pushed - b->t_round;
    b->pull_s += t - b->t_pushed;
    b->t_last = t;
  }
  b->round++;
  if (o_watch_pid > 0 && o_rss_after > 0 && b->round == o_rss_after)
    b->rss_warm_kib = pst_proc_status_kib((long)o_watch_pid, "VmRSS");
  start_round(b);
}

/* The pull of the current phase is complete (w holds b->version). */
static void pulled(bench *b) {
  if (b->pulls++ == 0 || b->version != b->last_pulled) b->distinct++;
  b->last_pulled = b->version;
  if (b->check == CHECK_VERSIONS) {
    if (b->version < b->sim_version) {
      fail(b, "pulled version %" PRIu64 " after version %" PRIu64, b->version, b->sim_version);
      return;
    }
    while (b->sim_version < b->version) {
      sim_apply(b, b->grad, (float)b->world);
      b->sim_version++;
    }
    if (compare(b, "a pull reply mixes versions") < 0) return;
  } else if (b->check == CHECK_SUM && b->sync && b->ph != PH_FINAL_PULL) {
    while (b->sim_version < b->version) sim_sync_round(b, (long)b->sim_version++);
    if (compare(b, "sync step") < 0) return;
  }
  switch (b->ph) {
    case PH_FIRST_PULL:
      b->ph = PH_ROUNDS;
      start_round(b);
      break;
    case PH_ROUNDS:
      b->pull_busy = 0;
      maybe_end_round(b);
      break;
    case PH_FINAL_PULL: {
      if (b->check == CHECK_SUM) {
        if (b->sync) {
          while (b->sim_version < (uint64_t)b->total) sim_sync_round(b, (long)b->sim_version++);
        } else {
          /* Any order gives the same floats (see the top of this file): rounds, then
           * clients. */
          float *g = b->tmp;
          for (long r = 0; r < b->total; r++)
            for (int i = 0; i < b->world; i++) {
              for (size_t e = 0; e < b->n; e++) g[e] = pattern(b, i, r, e);
              sim_apply(b, g, (float)b->world);
            }
        }
        if (compare(b, "final weights") < 0) return;
      }
      /* The last evaluation report (empty) lets the ps finish the run. */
      Pstrain__Header h = PSTRAIN__HEADER__INIT;
      Pstrain__Report rep = PSTRAIN__REPORT__INIT;
      rep.epoch = b->epochs;
      rep.is_eval = 1;
      h.type = PSTRAIN__MSG_TYPE__REPORT;
      h.report = &rep;
      wk_client_send(&b->cl, &h);
      b->ph = PH_SHUTDOWN;
      break;
    }
    default:
      break;
  }
}

/* ---- registration ---- */

/* The push's chunks, as the ps cuts its part of the vector (along the model's layers since
 * issue 26). */
static int prepare_push(bench *b, const Pstrain__Welcome *wl) {
  pst_model m;
  char err[512];
  if (wl->layer_chunks && pst_model_parse(wl->model_spec, "ps model", &m, err, sizeof err) < 0)
    return -EINVAL;
  return wk_client_prepare_push(&b->cl, &m, wl->shard_count > 1 ? wl->shard_offset : 0, b->n,
                                wl->chunk_floats, wl->layer_chunks);
}

static int setup(bench *b, const Pstrain__Welcome *wl) {
  b->index = (int)wl->worker_index;
  b->world = (int)wl->world_size;
  b->sync = wl->mode == PSTRAIN__MODE__MODE_SYNC;
  b->epochs = wl->epochs;
  /* A shard's rounds move its part of the vector (kernels/partition.h). */
  b->n = wl->shard_count > 1 ? wl->shard_floats : wl->n_params;
  if (b->n == 0 || wl->chunk_floats == 0 || b->world < 1) {
    fail(b, "WELCOME with %zu parameters, chunk %u, world %d", b->n, wl->chunk_floats, b->world);
    return -1;
  }
  size_t bytes = (b->n * sizeof(float) + 63) & ~(size_t)63;
  b->grad = aligned_alloc(64, bytes);
  b->w = aligned_alloc(64, bytes);
  if (b->check != CHECK_NONE) {
    b->sim = aligned_alloc(64, bytes);
    b->tmp = aligned_alloc(64, bytes);
  }
  if (!b->grad || !b->w || (b->check != CHECK_NONE && (!b->sim || !b->tmp)) ||
      prepare_push(b, wl) < 0) {
    fail(b, "cannot allocate buffers for %zu parameters", b->n);
    return -1;
  }
  /* Writing every page now keeps page faults out of the timed rounds. */
  for (size_t e = 0; e < b->n; e++) b->grad[e] = (float)o_grad_value;
  memset(b->w, 0, b->n * sizeof(float));
  if (b->check != CHECK_NONE) {
    pst_model m;
    char err[512];
    /* A shard's expected weights are its part of the whole model's initial ones. */
    size_t lo = wl->shard_count > 1 ? wl->shard_offset : 0;
    float *whole = NULL;
    err[0] = 0;
    if (pst_model_parse(wl->model_spec, "ps model", &m, err, sizeof err) < 0 ||
        lo + b->n > m.n_params || (wl->shard_count <= 1 && m.n_params != b->n) ||
        !(whole = malloc(m.n_params * sizeof(float)))) {
      fail(b, "cannot rebuild the ps's initial weights: %s", err[0] ? err : "sizes differ");
      return -1;
    }
    pst_model_init_params(&m, wl->seed, whole);
    memcpy(b->sim, whole + lo, b->n * sizeof(float));
    free(whole);
    b->zero0 = malloc(b->n);
    if (!b->zero0) {
      fail(b, "cannot allocate buffers for %zu parameters", b->n);
      return -1;
    }
    for (size_t e = 0; e < b->n; e++) b->zero0[e] = b->sim[e] == 0.0f;
  }
  return 0;
}

/* ---- client callbacks ---- */

static void on_connected(wk_client *c) {
  bench *b = c->data;
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  Pstrain__Hello hello = PSTRAIN__HELLO__INIT;
  hello.worker_name = o_name;
  hello.model_fingerprint = 0;
  hello.requested_index = (int32_t)o_index;
  if (g_shard_count > 1) {
    hello.shard_index = (uint32_t)g_shard_index;
    hello.shard_count = (uint32_t)g_shard_count;
  }
  h.type = PSTRAIN__MSG_TYPE__HELLO;
  h.hello = &hello;
  b->ph = PH_REGISTER;
  wk_client_send(c, &h);
}

static int on_payload(wk_client *c, const Pstrain__Header *h, float **dst) {
  bench *b = c->data;
  if (h->type != PSTRAIN__MSG_TYPE__WEIGHTS || b->w == NULL || h->offset > b->n ||
      h->count > b->n - h->offset) {
    snprintf(c->rd.err, sizeof c->rd.err, "unexpected tensor chunk (offset %" PRIu64 ")", h->offset);
    return -EPROTO;
  }
  *dst = b->w + h->offset;
  return 0;
}

static int on_frame(wk_client *c, const Pstrain__Header *h) {
  bench *b = c->data;
  switch (h->type) {
    case PSTRAIN__MSG_TYPE__WELCOME:
      if (b->ph != PH_REGISTER || setup(b, h->welcome) < 0) return 0;
      b->ph = PH_FIRST_PULL;
      send_simple(b, PSTRAIN__MSG_TYPE__PULL, 0, 0);
      return 0;
    case PSTRAIN__MSG_TYPE__WEIGHTS:
      if (h->last) {
        b->version = h->version;
        pulled(b);
      }
      return 0;
    case PSTRAIN__MSG_TYPE__ERROR:
      fail(b, "the ps refused us: %s", h->error ? h->error->reason : "no reason given");
      return 0;
    case PSTRAIN__MSG_TYPE__SHUTDOWN:
      if (b->ph != PH_SHUTDOWN || (h->shutdown && h->shutdown->failed))
        fail(b, "the ps stopped: %s", h->shutdown ? h->shutdown->reason : "no reason given");
      else
        wk_client_close(c, NULL);
      return 0;
    case PSTRAIN__MSG_TYPE__ACK:
    case PSTRAIN__MSG_TYPE__HEARTBEAT: /* the ps says it is alive while it has nothing to send */
    case PSTRAIN__MSG_TYPE__STATUS:
      return 0;
    default:
      snprintf(c->rd.err, sizeof c->rd.err, "unexpected message type %d", (int)h->type);
      return -EPROTO;
  }
}

static void on_push_sent(wk_client *c) {
  bench *b = c->data;
  b->push_busy = 0;
  b->t_pushed = pst_now();
  maybe_end_round(b);
}

static void on_closed(wk_client *c, const char *why) {
  bench *b = c->data;
  if (why) {
    if (b->exit_code == 0) LOG_ERR("%s", why);
    b->exit_code = 1;
  } else if (b->ph != PH_SHUTDOWN && b->exit_code == 0) {
    LOG_ERR("connection closed before the run finished");
    b->exit_code = 1;
  }
}

static const wk_client_cbs client_cbs = {on_connected, on_payload, on_frame, on_push_sent,
                                         on_closed};

/* The figures file `pstrain bench` reads (launcher/bench/bench.c, load_client). */
static int write_out(const bench *b, const char *path) {
  long timed = b->total - o_warmup;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "index", b->index);
  cJSON_AddNumberToObject(o, "world", b->world);
  cJSON_AddNumberToObject(o, "n_params", (double)b->n);
  cJSON_AddNumberToObject(o, "bytes", (double)(b->n * sizeof(float)));
  cJSON_AddNumberToObject(o, "rounds", (double)timed);
  cJSON_AddNumberToObject(o, "pull_only", b->pull_only);
  cJSON_AddNumberToObject(o, "t_first", b->t_first);
  cJSON_AddNumberToObject(o, "t_last", b->t_last);
  cJSON_AddNumberToObject(o, "push_s", b->push_s);
  cJSON_AddNumberToObject(o, "pull_s", b->pull_s);
  cJSON_AddNumberToObject(o, "pulls", (double)b->pulls);
  cJSON_AddNumberToObject(o, "distinct_versions", (double)b->distinct);
  cJSON_AddNumberToObject(o, "ps_rss_warm_kib", (double)b->rss_warm_kib);
  cJSON_AddNumberToObject(o, "ps_rss_end_kib", (double)b->rss_end_kib);
  cJSON_AddNumberToObject(o, "ps_hwm_kib", (double)b->hwm_kib);
  cJSON_AddNumberToObject(o, "ps_cpu_s", b->ps_cpu_s);
  cJSON_AddNumberToObject(o, "ps_loop_cpu_s", b->ps_loop_s);
  cJSON_AddNumberToObject(o, "cpu_s", b->cpu_s);
  cJSON_AddBoolToObject(o, "ok", b->exit_code == 0);
  cJSON *lat = cJSON_AddArrayToObject(o, "lat_s");
  for (long k = 0; k < timed && b->lat; k++) cJSON_AddItemToArray(lat, cJSON_CreateNumber(b->lat[k]));
  int rc = pst_json_write_file(path, o, 0);
  cJSON_Delete(o);
  return rc;
}

int main(int argc, char **argv) {
  char err[512];
  pst_cfg cfg = {
      .prog = "pstrain-benchclient",
      .section = "benchclient",
      .env_prefix = "PSTRAIN_BENCHCLIENT_",
      .usage_extra = "Push+pull rounds against a pstrain-ps, for `pstrain bench` and tests.\n",
      .opts = g_opts,
      .n_opts = (int)(sizeof g_opts / sizeof g_opts[0]),
  };
  pst_log_init("pstrain-benchclient", PST_LOG_WARN);
  if (pst_cfg_load(&cfg, argc, argv, err, sizeof err) < 0) {
    LOG_ERR("%s", err);
    return 2;
  }
  if (cfg.help) return 0;
  static bench b;
  char host[256];
  int port;
  if (pst_parse_hostport(o_ps, host, sizeof host, &port) < 0) {
    LOG_ERR("--ps: '%.200s' is not address:port", o_ps);
    return 2;
  }
  if (pst_partition_parse(o_shard, &g_shard_index, &g_shard_count) < 0) {
    LOG_ERR("--shard: '%.100s' is not I/K", o_shard);
    return 2;
  }
  if (!strcmp(o_check, "none")) b.check = CHECK_NONE;
  else if (!strcmp(o_check, "sum")) b.check = CHECK_SUM;
  else if (!strcmp(o_check, "versions")) b.check = CHECK_VERSIONS;
  else {
    LOG_ERR("--check: '%.100s' is not none, sum or versions", o_check);
    return 2;
  }
  if (strcmp(o_role, "push") && strcmp(o_role, "pull")) {
    LOG_ERR("--role: '%.100s' is not push or pull", o_role);
    return 2;
  }
  b.pull_only = !strcmp(o_role, "pull");
  if ((b.check == CHECK_VERSIONS) != b.pull_only) {
    LOG_ERR("--check versions goes with --role pull, and only with it");
    return 2;
  }
  b.total = (long)(o_warmup + o_rounds);
  b.lat = calloc((size_t)o_rounds + 1, sizeof *b.lat);
  if (!b.lat) return 1;

  uv_loop_t loop;
  uv_loop_init(&loop);
  b.loop = &loop;
  if (wk_client_start(&b.cl, &loop, host, port, o_timeout, NULL, NULL, NULL, &client_cbs, &b) < 0) {
    LOG_ERR("cannot start the client");
    return 1;
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  wk_client_free(&b.cl);
  if (uv_loop_close(&loop) != 0) LOG_WARN("event loop did not close cleanly");
  if (o_out[0] && write_out(&b, o_out) < 0) {
    LOG_ERR("cannot write %s", o_out);
    b.exit_code = 1;
  }
  free(b.grad);
  free(b.w);
  free(b.sim);
  free(b.tmp);
  free(b.zero0);
  free(b.lat);
  return b.exit_code;
}
