/* The end of a connection's life in the ps: closed, gracefully or at once, with its I/O jobs
 * taken back first and the layers above told through the hooks ps/server.c wires
 * (ps_conn_hooks: the pull path's reply); its silence and heartbeats; the rate-limited log
 * lines about connections. Below everything in ps/net/ but send.c: it calls no file above. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/cluster.h"
#include "common/log.h"
#include "proto/wire.h"
#include "ps/net/conn.h"

/* Lines about bad connections: 10 per 10 s, then a count of what was suppressed. */
#define CONN_LOG_BURST 10
#define CONN_LOG_PERIOD 10.0

void ps_log_conn(ps_net *n, const char *fmt, ...) {
  if (!pst_ratelimit_ok(&n->conn_log, CONN_LOG_BURST, CONN_LOG_PERIOD)) return;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  LOG_WARN("%s", line);
}

static void on_conn_closed(uv_handle_t *h) {
  ps_conn *c = h->data;
  ps_server *s = c->srv;
  if (c->prev) c->prev->next = c->next;
  else s->net->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  s->net->n_conns--;
  pst_reader_free(&c->rd);
  pst_ring_free(&c->ring);
  for (ps_deferred *d = c->deferred, *next; d; d = next) {
    next = d->next;
    free(d);
  }
  free(c->recv);
  free(c->wreq);
  free(c->wbatch);
  free(c->whead);
  free(c->delta_ref);
  free(c->delta_buf);
  free(c->delta_sent);
  free(c);
}

static void on_shutdown_done(uv_shutdown_t *req, int status) {
  ps_conn *c = req->data;
  (void)status;
  pst_tls_stream_close(&c->io, on_conn_closed);
}

void ps_conn_close(ps_conn *c, const char *why, int hard) {
  if (c->state == CONN_CLOSING) {
    /* A graceful close still waiting for its write job, now wanted at once. */
    if (hard && c->close_deferred) {
      ps_io_cancel(c->srv->net->io, &c->wjob);
      c->srv->net->hooks.write_job_ended(c);
      ps_conn_finish_close(c, 1);
    }
    return;
  }
  int was_worker = c->state == CONN_WORKER;
  c->state = CONN_CLOSING;
  /* Before anything learns of the loss: a payload an I/O thread is reading goes to its place
   * in the sum, which the step may go on without from here. */
  if (ps_io_busy(&c->rjob)) ps_io_cancel(c->srv->net->io, &c->rjob);
  c->pending = 0;
  c->pull_waiting = 0;
  c->srv->net->hooks.reply_abandoned(c);
  if (c->reading) pst_tls_stream_read_stop(&c->io);
  c->reading = 0;
  if (why && !was_worker) ps_log_conn(c->srv->net, "connection from %s closed: %s", c->peer, why);
  if (was_worker) ps_worker_lost(c->srv, c->worker, why);
  if (ps_io_busy(&c->wjob)) {
    if (!hard) {
      /* Its chunks, then what waited behind them (an ERROR, a SHUTDOWN), then the
       * shutdown: ps_pull_job_done finishes the close. */
      c->close_deferred = 1;
      return;
    }
    ps_io_cancel(c->srv->net->io, &c->wjob);
    c->srv->net->hooks.write_job_ended(c);
  }
  ps_conn_finish_close(c, hard);
}

void ps_conn_finish_close(ps_conn *c, int hard) {
  c->close_deferred = 0;
  c->shutdown_req.data = c;
  /* With TLS the shutdown sends the queued writes, then close_notify, then the FIN. */
  if (hard || pst_tls_stream_shutdown(&c->io, &c->shutdown_req, on_shutdown_done) < 0)
    pst_tls_stream_close(&c->io, on_conn_closed);
}

void ps_conn_drop(ps_conn *c, const char *why) {
  ps_send_error(c, why);
  ps_conn_close(c, why, 1);
}

void ps_conn_watch(ps_server *s, double now) {
  double quiet = s->opt.worker_timeout / 4.0;
  Pstrain__Header hb = PSTRAIN__HEADER__INIT;
  hb.type = PSTRAIN__MSG_TYPE__HEARTBEAT;
  for (ps_conn *c = s->net->conns, *next; c; c = next) {
    next = c->next;
    if (c->state != CONN_WORKER) continue;
    /* A connection the ps itself stopped reading (a chunk held back for sync order) is not
     * silent: its bytes wait in the socket. One whose payload an I/O thread is reading is
     * silent only while no byte of it comes. */
    if (ps_io_busy(&c->rjob)) {
      size_t got = ps_io_progress(&c->rjob);
      if (got != c->rjob_seen) c->last_rx = now;
      c->rjob_seen = got;
    } else if (!c->reading) {
      c->last_rx = now;
    }
    if (now - c->last_rx > s->opt.worker_timeout) {
      char why[96];
      snprintf(why, sizeof why, "no message for %.1f s (--worker-timeout %g)", now - c->last_rx,
               s->opt.worker_timeout);
      ps_conn_close(c, why, 1);
      continue;
    }
    if (now - c->last_tx > quiet) ps_send_header(c, &hb);
  }
}
