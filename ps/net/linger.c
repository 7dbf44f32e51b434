#include "ps/net/linger.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "common/http.h"
#include "common/log.h"
#include "common/notify.h"
#include "common/prom.h"

typedef struct {
  pst_metrics_port port;
  uv_signal_t sig_term, sig_int;
  char why[400];
} linger_state;

static void render(const void *arg, pst_text *out) {
  (void)arg;
  pst_prom_gauge(out, "pstrain_job_finished",
                 "1: the job has finished and this ps only waits to be stopped "
                 "(--on-finish wait).", 1);
}

static int other(void *arg, const char *path, pst_text *body, const char **type) {
  const linger_state *l = arg;
  (void)type;
  if (strcmp(path, "/readyz") != 0) return 404;
  /* Nothing to serve: a finished job takes no workers. */
  pst_text_printf(body, "finished: %s\n", l->why);
  return 503;
}

static void on_signal(uv_signal_t *h, int signum) {
  linger_state *l = h->data;
  LOG_INFO("%s: the finished ps stops", signum == SIGTERM ? "SIGTERM" : "SIGINT");
  pst_notify_stopping();
  uv_close((uv_handle_t *)&l->sig_term, NULL);
  uv_close((uv_handle_t *)&l->sig_int, NULL);
  pst_metrics_port_close(&l->port);
}

int ps_linger(const char *metrics_listen, const char *why) {
  static linger_state l;
  char err[512];
  snprintf(l.why, sizeof l.why, "%s", why);
  uv_loop_t loop;
  uv_loop_init(&loop);
  int rc = pst_metrics_port_start(&l.port, &loop, metrics_listen, render, &l, err, sizeof err);
  if (rc < 0) {
    LOG_ERR("%s", err);
    uv_loop_close(&loop);
    return PST_EXIT_FAILED;
  }
  l.port.other = other;
  l.port.other_arg = &l;
  /* The signal handles are the loop's only referenced ones: it runs until a signal. */
  uv_signal_init(&loop, &l.sig_term);
  uv_signal_init(&loop, &l.sig_int);
  l.sig_term.data = l.sig_int.data = &l;
  uv_signal_start(&l.sig_term, on_signal, SIGTERM);
  uv_signal_start(&l.sig_int, on_signal, SIGINT);
  LOG_INFO("--on-finish wait: the job has finished; waiting for SIGTERM or SIGINT to exit");
  pst_notify_status("finished: %s; waiting to be stopped (--on-finish wait)", l.why);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_run(&loop, UV_RUN_DEFAULT); /* the port's close callbacks */
  if (uv_loop_close(&loop) != 0) {
    LOG_ERR("event loop did not close cleanly");
    return PST_EXIT_FAILED;
  }
  LOG_INFO("exiting with status 0 (training finished)");
  return PST_EXIT_OK;
}
