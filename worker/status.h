/* The worker seen from outside (status.c): the status line and /metrics, read from the
 * whole trainer. Called by main.c and the step machine; calls none of the training loop. */
#ifndef PSTRAIN_WORKER_STATUS_H
#define PSTRAIN_WORKER_STATUS_H

#include <stddef.h>

#include "common/prom.h"
#include "worker/state.h"

/* Every step of an epoch is done (t: the trainer, whose state says which): the status line
 * says so from now on, and is sent to systemd at once. */
void wk_obs_epoch_done(wk_trainer *t, double train_loss);

/* The one-line status (systemd's STATUS=, refreshed by the heartbeat): a pst_status_fn
 * (arg: the wk_trainer), from the same state as /metrics. */
void wk_obs_status_line(void *arg, char *buf, size_t len);

/* The exposition text of the worker's figures (t: a wk_trainer). A pst_http_render for
 * pst_metrics_port_start, which adds the process's and the port's own. */
void wk_obs_render(const void *t, pst_text *out);

#endif
