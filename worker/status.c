/* The worker seen from outside: the one-line status (systemd, the heartbeat's log) and the
 * /metrics text, both built from the trainer's state (worker/state.h) and its timings
 * (worker/obs.h, which knows nothing of the trainer). */
#include "worker/status.h"

#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/notify.h"
#include "proto/wire.h"

void wk_obs_status_line(void *arg, char *buf, size_t len) {
  const wk_trainer *t = arg;
  const wk_obs *o = &t->obs;
  size_t n = 0;
  switch (t->state) {
    case WK_CONNECTING: {
      int i = 0; /* the first shard not yet reached */
      while (i < t->n_ps - 1 && t->ps[i].client.state == WK_CONN_OPEN) i++;
      snprintf(buf, len, "connecting to the ps at %s:%d (attempt %d)", t->opt.ps[i].host,
               t->opt.ps[i].port, t->ps[i].client.attempts);
      return;
    }
    case WK_REGISTERING:
      snprintf(buf, len, "registering with the ps at %s:%d%s", t->opt.ps[0].host,
               t->opt.ps[0].port, t->n_ps > 1 ? " and its other shards" : "");
      return;
    case WK_STOPPED:
      return; /* the last line stays */
    case WK_FINISHING:
      n = (size_t)snprintf(buf, len, "worker %d of %d: finished %d epochs, waiting for the ps",
                           t->index, t->world, t->epochs);
      break;
    default:
      n = (size_t)snprintf(buf, len, "worker %d of %d: epoch %d/%d, step %d/%d, version %llu",
                           t->index, t->world, t->epoch < t->epochs ? t->epoch + 1 : t->epochs,
                           t->epochs, t->step_in_epoch, t->steps_per_epoch,
                           (unsigned long long)t->version);
  }
  if (o->epochs_trained > 0 && n < len)
    snprintf(buf + n, len - n, "; epoch %d/%d trained, train loss %.4f", o->epochs_trained,
             t->epochs, o->epoch_loss);
}

void wk_obs_epoch_done(wk_trainer *t, double train_loss) {
  t->obs.epochs_trained = t->epoch + 1;
  t->obs.epoch_loss = train_loss;
  char line[256];
  line[0] = '\0';
  wk_obs_status_line(t, line, sizeof line);
  if (line[0]) pst_notify_status("%s", line);
}

/* Connections to the ps shards that are open. */
static int open_connections(const wk_trainer *t) {
  int n = 0;
  for (int i = 0; i < t->n_ps; i++) n += t->ps[i].client.state == WK_CONN_OPEN;
  return n;
}

void wk_obs_render(const void *arg, pst_text *out) {
  const wk_trainer *t = arg;
  const wk_obs *o = &t->obs;
  char labels[160];
  snprintf(labels, sizeof labels, "role=\"worker\",wire_version=\"%d\"", PST_WIRE_VERSION);
  pst_prom_family(out, "pstrain_build_info", PST_PROM_GAUGE,
                  "Always 1: the daemon's role and wire protocol version.");
  pst_prom_sample(out, "pstrain_build_info", labels, 1);
  if (t->backend) {
    char l[120];
    pst_prom_family(out, "pstrain_device_info", PST_PROM_GAUGE,
                    "Always 1: the device this worker computes on.");
    pst_prom_sample(out, "pstrain_device_info",
                    pst_prom_label(l, sizeof l, "device", t->backend->name), 1);
  }
  pst_prom_gauge(out, "pstrain_worker_index", "This worker's slot (-1 before registering).",
                 t->welcomed ? t->index : -1);
  pst_prom_gauge(out, "pstrain_ps_connected", "1 while connected to the ps (every shard).",
                 open_connections(t) == t->n_ps);
  pst_prom_gauge(out, "pstrain_model_version", "Version of the weights this worker holds.",
                 (double)t->version);
  pst_prom_counter(out, "pstrain_steps_total", "Training steps computed.", (double)t->steps);
  pst_prom_counter(out, "pstrain_gradients_discarded_total",
                   "Gradients not pushed because the connection was lost.", t->discarded);
  pst_prom_gauge(out, "pstrain_epochs", "Passes over the shard the job makes.", t->epochs);
  pst_prom_gauge(out, "pstrain_epoch", "The epoch in progress (1-based).",
                 t->epoch < t->epochs ? t->epoch + 1 : t->epochs);
  pst_prom_gauge(out, "pstrain_train_loss", "Training loss over this epoch's steps so far.",
                 t->e_samples ? t->e_loss / (double)t->e_samples : 0);
  pst_prom_gauge(out, "pstrain_train_accuracy",
                 "Training accuracy over this epoch's steps so far.",
                 t->e_samples ? (double)t->e_correct / (double)t->e_samples : 0);
  pst_prom_counter(out, "pstrain_samples_trained_total", "Training samples computed.",
                   (double)o->samples);
  double span = o->last_step_at > o->first_step_at ? o->last_step_at - o->first_step_at : 0;
  pst_prom_gauge(out, "pstrain_samples_per_second",
                 "Training samples per second, first step to newest.",
                 span > 0 ? (double)o->samples / span : 0);
  pst_prom_counter(out, "pstrain_compute_seconds_total",
                   "Seconds computing training steps.", o->compute_seconds);
  pst_prom_counter(out, "pstrain_data_seconds_total",
                   "Seconds of the compute time spent gathering training batches.",
                   o->data_seconds);
  pst_prom_counter(out, "pstrain_wait_seconds_total",
                   "Seconds between steps not computing (pulls, pushes, other workers).",
                   o->wait_seconds);
  pst_prom_hist(out, "pstrain_pull_seconds", "Seconds from PULL to the last weight chunk.",
                &o->pull_seconds);
  pst_prom_hist(out, "pstrain_push_seconds", "Seconds to send a gradient.", &o->push_seconds);
  pst_prom_hist(out, "pstrain_step_seconds", "Seconds from one step's end to the next's.",
                &o->step_seconds);
  if (t->backend && t->backend->memory_in_use)
    pst_prom_gauge(out, "pstrain_device_memory_bytes",
                   "Device (GPU) memory this worker's backend holds.",
                   (double)t->backend->memory_in_use(t->backend));
  pst_prom_gauge(out, "pstrain_open_connections", "Open connections to the ps (one per shard).",
                 open_connections(t));
}
