/* What the ps shows to the outside while it runs: /metrics (the Prometheus text format) on
 * its own port (--metrics-listen), served by common/http.h's pst_metrics_port from the ps's
 * loop.
 *
 * Nothing here keeps figures of its own: every value is read, at scrape time, from the
 * state the ps already keeps for its log, its STATUS reply and its summary (ps_server,
 * pst_update, pst_metrics), so /metrics and those can never disagree. */
#ifndef PSTRAIN_PS_OBS_H
#define PSTRAIN_PS_OBS_H

#include "common/http.h"
#include "common/prom.h"
#include "ps/ps.h"

/* The exposition text of the ps's figures (s: a ps_server). A pst_http_render for
 * pst_metrics_port_start, which adds the process's and the port's own. */
void ps_obs_render(const void *s, pst_text *out);

/* What the training core and durable state tell observability (ps/ps.h's ps_obs_events),
 * recorded in the metrics (ps/obs/events.c); ps_server_start wires them in. */
extern const ps_obs_events ps_obs_event_handlers;

/* A STATUS message and the storage its pointers point into (the first
 * PS_STATUS_MAX_WORKERS slots; a frame's header must stay small). */
#define PS_STATUS_MAX_WORKERS 64
typedef struct {
  Pstrain__Status st;
  Pstrain__WorkerStatus ws[PS_STATUS_MAX_WORKERS], *wp[PS_STATUS_MAX_WORKERS];
} ps_status_msg;

/* The ps's status as a STATUS message, from the same state and derived figures /metrics
 * shows (the answer to STATUS_REQ, and the dashboard's /status.json). */
void ps_obs_status(ps_server *s, ps_status_msg *m);


/* The one-line status (systemd's STATUS=, the head of the status log line): the same
 * figures as STATUS and /metrics. Returns its length. */
size_t ps_obs_status_line(const ps_server *s, char *buf, size_t len);
/* ps_obs_status_line as the heartbeat's pst_status_fn (arg: the ps_server); nothing once the
 * ps is stopping, so that its final line stays. */
void ps_obs_heartbeat_line(void *arg, char *buf, size_t len);
/* The end of a run (ps_server_stop): the last checkpoint (written on the threadpool: the loop
 * ends after it), then, once that write has ended, the summary and the metrics file's last
 * word; a summary or metrics file that cannot be written makes the exit status a failure, and
 * a final checkpoint that was not written makes it PST_EXIT_CHECKPOINT. */
void ps_obs_stop_report(ps_server *s, const char *reason, int failed);

#endif
