/* The ps's live dashboard, on its metrics port beside /metrics: `/` is one self-contained
 * HTML page (no external assets: its script and styles are inline, its charts drawn on
 * canvases) that polls `/status.json` every second and draws the training and test
 * loss/accuracy curves and each worker's progress. /status.json is the STATUS message as
 * JSON (the same object `pstrain status --json` prints, proto/status_json.h) plus the
 * curves' points. /readyz (a readiness probe) answers 200 once the ps listens, with any
 * checkpoint loaded, and 503 once it stops. */
#ifndef PSTRAIN_PS_DASHBOARD_H
#define PSTRAIN_PS_DASHBOARD_H

#include "common/prom.h"

/* A pst_http_handler (arg: the ps_server) for pst_metrics_port's `other`. */
int ps_dashboard_handle(void *arg, const char *path, pst_text *body, const char **type);

#endif
