/* `pstrain status HOST:PORT`: the cluster as a ps sees it, asked over the ps's own protocol
 * (a read-only STATUS_REQ, answered with STATUS), printed as a table or as JSON, once or
 * every --watch seconds. The connection is the worker's (worker/client.h): the same
 * retries, mutual TLS and cluster-secret handshake, so a ps that requires them answers
 * this command too. Each refresh is a new connection, as the ps closes connections that do
 * not register within its --hello-timeout. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include <cjson/cJSON.h>

#include "common/auth.h"
#include "common/config.h"
#include "common/log.h"
#include "common/tls_config.h"
#include "launcher/commands.h"
#include "proto/status_json.h"
#include "worker/client.h"

static char f_ps[PST_CFG_STR_MAX], f_secret_file[PST_CFG_STR_MAX], f_tls_name[PST_CFG_STR_MAX];
static pst_tls_files f_tls;
static double f_watch, f_timeout;
static int f_json;

static pst_cfg_opt g_opts[] = {
    PST_OPT("ps", PST_CFG_STRING, f_ps, "", "host:port of the ps (or the first argument)", 0, 0),
    PST_OPT("watch", PST_CFG_DOUBLE, &f_watch, "0", "refresh every this many seconds (0: once)", 0, 0),
    PST_OPT("json", PST_CFG_BOOL, &f_json, "false", "print JSON (with --watch: one object per line)", 0, 0),
    PST_OPT("timeout", PST_CFG_DOUBLE, &f_timeout, "5", "seconds to keep trying to reach the ps", 0, 0),
    PST_OPT("secret-file", PST_CFG_STRING, f_secret_file, "", "the cluster secret, when the ps has one", 0, 0),
    PST_TLS_OPTS(f_tls),
    PST_OPT("tls-name", PST_CFG_STRING, f_tls_name, "", "mutual TLS: a name the ps's certificate must carry", 0, 0),
};

typedef struct {
  uv_loop_t loop;
  wk_client client;
  int client_started;
  uv_timer_t timer;      /* the next refresh (--watch) */
  uv_signal_t sig_int;
  char host[256];
  int port;
  pst_secret secret;
  pst_tls_ctx *tls;
  int got;               /* this round's STATUS came */
  char error[300];       /* this round's ERROR from the ps */
  int stopping;
  int rc;                /* the exit code: that of the newest round */
} pl_status;

static void print_json(const Pstrain__Status *st, const char *addr) {
  cJSON *o = pst_status_json(st, addr);
  if (!o) return;
  char *text = f_watch > 0 ? cJSON_PrintUnformatted(o) : cJSON_Print(o);
  if (text) printf("%s\n", text);
  cJSON_free(text);
  cJSON_Delete(o);
}

static void format_eta(double s, char *buf, size_t len) {
  if (s < 0)
    snprintf(buf, len, "unknown");
  else if (s < 120)
    snprintf(buf, len, "%.0fs", s);
  else if (s < 7200)
    snprintf(buf, len, "%ldm%02lds", (long)s / 60, (long)s % 60);
  else
    snprintf(buf, len, "%.1fh", s / 3600);
}

static void print_table(const Pstrain__Status *st, const char *addr) {
  char eta[32];
  format_eta(st->eta_seconds, eta, sizeof eta);
  printf("ps %s: %s, %s lr %g; version %" PRIu64 "; %u/%u workers registered, %u finished\n",
         addr, pst_status_mode_name(st->mode), st->optimizer && st->optimizer[0] ? st->optimizer : "?",
         st->learning_rate, st->version, st->registered, st->world_size, st->finished);
  printf("progress %.1f%%, ETA %s; %.0f samples/s; train loss %.4f", st->progress * 100, eta,
         st->samples_per_sec, st->train_loss);
  if (st->epochs_evaluated > 0)
    printf("; test accuracy %.4f after epoch %u/%u", st->test_accuracy, st->epochs_evaluated,
           st->epochs);
  printf("\nstaleness mean %.2f, max %" PRIu64 "; %" PRIu64 " gradients applied, %" PRIu64
         " dropped\n\n", st->mean_staleness, st->max_staleness, st->gradients_applied,
         st->dropped_gradients);
  printf("%-6s %-20s %-9s %5s %9s %5s %5s %8s %7s %6s %9s %s\n", "worker", "name", "state",
         "epoch", "version", "stale", "lead", "pushes", "dropped", "losses", "last seen",
         "step waits");
  for (size_t i = 0; i < st->n_workers; i++) {
    const Pstrain__WorkerStatus *w = st->workers[i];
    char seen[24];
    if (w->last_seen_seconds < 0) snprintf(seen, sizeof seen, "-");
    else snprintf(seen, sizeof seen, "%.1fs", w->last_seen_seconds);
    printf("%-6u %-20.20s %-9s %5u %9" PRIu64 " %5" PRIu64 " %5" PRIu64 " %8" PRIu64 " %7" PRIu64
           " %6u %9s %s\n", w->index, w->name && w->name[0] ? w->name : "-",
           pst_status_worker_state(w), w->epoch, w->last_version, w->staleness, w->lead,
           w->pushes, w->dropped, w->losses, seen, w->waited_for ? "yes" : "");
  }
}

/* ---- one round: connect, STATUS_REQ, STATUS, close ---- */

static void start_round(pl_status *p);

static void on_connected(wk_client *c) {
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  h.type = PSTRAIN__MSG_TYPE__STATUS_REQ;
  if (wk_client_send(c, &h) < 0) wk_client_close(c, "cannot send the status request");
}

static int on_payload(wk_client *c, const Pstrain__Header *h, float **dst) {
  snprintf(c->rd.err, sizeof c->rd.err, "unexpected tensor payload");
  return -EPROTO;
}

static int on_frame(wk_client *c, const Pstrain__Header *h) {
  pl_status *p = c->data;
  char addr[300];
  snprintf(addr, sizeof addr, "%s:%d", p->host, p->port);
  if (h->type == PSTRAIN__MSG_TYPE__STATUS && h->status) {
    if (f_watch > 0 && !f_json && isatty(STDOUT_FILENO)) printf("\033[H\033[2J");
    if (f_json) print_json(h->status, addr);
    else print_table(h->status, addr);
    if (f_watch > 0 && !f_json) printf("\n");
    fflush(stdout);
    p->got = 1;
    wk_client_close(c, NULL);
  } else if (h->type == PSTRAIN__MSG_TYPE__ERROR) {
    snprintf(p->error, sizeof p->error, "the ps refused: %.200s",
             h->error && h->error->reason ? h->error->reason : "no reason given");
    wk_client_close(c, p->error);
  }
  return 0; /* anything else (a HEARTBEAT) is ignored */
}

static void on_push_sent(wk_client *c) {}

static void on_timer(uv_timer_t *t) {
  pl_status *p = t->data;
  if (!p->stopping) start_round(p);
}

static void stop(pl_status *p) {
  if (p->stopping) return;
  p->stopping = 1;
  uv_close((uv_handle_t *)&p->timer, NULL);
  uv_close((uv_handle_t *)&p->sig_int, NULL);
  if (p->client_started && p->client.state != WK_CONN_CLOSED) wk_client_close(&p->client, NULL);
}

static void on_closed(wk_client *c, const char *why) {
  pl_status *p = c->data;
  if (!p->got && !p->stopping) {
    fprintf(stderr, "pstrain status: %s:%d: %s\n", p->host, p->port,
            why ? why : "the ps closed the connection without answering");
  }
  p->rc = p->got ? 0 : 1;
  if (f_watch > 0 && !p->stopping)
    uv_timer_start(&p->timer, on_timer, (uint64_t)(f_watch * 1000), 0);
  else
    stop(p);
}

static const wk_client_cbs g_cbs = {on_connected, on_payload, on_frame, on_push_sent, on_closed};

static void start_round(pl_status *p) {
  if (p->client_started) wk_client_free(&p->client);
  p->got = 0;
  p->error[0] = '\0';
  p->client_started = 1;
  int rc = wk_client_start(&p->client, &p->loop, p->host, p->port, f_timeout, &p->secret,
                           p->tls, f_tls_name, &g_cbs, p);
  if (rc < 0) {
    fprintf(stderr, "pstrain status: cannot start a connection: %s\n", strerror(-rc));
    p->client_started = 0;
    p->rc = 1;
    stop(p);
  }
}

static void on_signal(uv_signal_t *h, int signum) { stop(h->data); }

int pl_cmd_status(int argc, char **argv) {
  char err[600];
  /* The first argument may be the ps's address; the rest are flags. */
  char *args[argc + 1];
  int n = 0;
  for (int i = 0; i < argc; i++) {
    if (i == 1 && argv[i][0] != '-') snprintf(f_ps, sizeof f_ps, "%s", argv[i]);
    else args[n++] = argv[i];
  }
  args[n] = NULL;
  char positional[PST_CFG_STR_MAX];
  snprintf(positional, sizeof positional, "%s", f_ps);
  pst_cfg cfg = {.prog = "pstrain status", .section = "status", .env_prefix = "PSTRAIN_STATUS_",
                 .usage_extra =
                     "usage: pstrain status HOST:PORT [--watch SECONDS] [--json]\n"
                     "Asks a running pstrain-ps for its status (workers, versions, staleness,\n"
                     "throughput) over its own protocol. Exit 1 when it cannot be reached.\n",
                 .opts = g_opts, .n_opts = (int)(sizeof g_opts / sizeof g_opts[0])};
  if (pst_cfg_load(&cfg, n, args, err, sizeof err) < 0) {
    fprintf(stderr, "pstrain status: %s\n", err);
    return 2;
  }
  if (cfg.help) return 0;
  if (positional[0]) snprintf(f_ps, sizeof f_ps, "%s", positional);
  static pl_status p;
  memset(&p, 0, sizeof p);
  if (!f_ps[0] || pst_parse_hostport(f_ps, p.host, sizeof p.host, &p.port) < 0) {
    fprintf(stderr, "pstrain status: give the ps as HOST:PORT ('%.200s' is not)\n", f_ps);
    return 2;
  }
  if (!(f_watch >= 0 && f_watch <= 86400) || !(f_timeout > 0 && f_timeout <= 3600)) {
    fprintf(stderr, "pstrain status: --watch must be 0 to 86400 and --timeout 0 to 3600 s\n");
    return 2;
  }
  /* Quiet unless something fails: the client's retry notices are not this command's output. */
  pst_log_init("pstrain status", PST_LOG_WARN);
  signal(SIGPIPE, SIG_IGN);
  if (pst_secret_load(f_secret_file, &p.secret, err, sizeof err) < 0 ||
      pst_tls_config_load(PST_TLS_CLIENT, &f_tls, &p.tls, NULL, 0, err, sizeof err) < 0) {
    fprintf(stderr, "pstrain status: %s\n", err);
    return 2;
  }
  uv_loop_init(&p.loop);
  uv_timer_init(&p.loop, &p.timer);
  p.timer.data = &p;
  uv_signal_init(&p.loop, &p.sig_int);
  p.sig_int.data = &p;
  uv_signal_start(&p.sig_int, on_signal, SIGINT);
  start_round(&p);
  uv_run(&p.loop, UV_RUN_DEFAULT);
  if (p.client_started) wk_client_free(&p.client);
  pst_tls_ctx_free(p.tls);
  if (uv_loop_close(&p.loop) != 0) {
    fprintf(stderr, "pstrain status: the event loop did not close cleanly\n");
    return 1;
  }
  return p.rc;
}
