#include "proto/status_json.h"

#include <inttypes.h>
#include <stdio.h>

const char *pst_status_mode_name(Pstrain__Mode m) {
  return m == PSTRAIN__MODE__MODE_SYNC ? "sync" : m == PSTRAIN__MODE__MODE_ASYNC ? "async" : "ssp";
}

const char *pst_status_worker_state(const Pstrain__WorkerStatus *w) {
  return w->done ? "done" : w->abandoned ? "abandoned" : w->connected ? "training"
         : w->losses ? "lost" : "absent";
}

cJSON *pst_status_json(const Pstrain__Status *st, const char *ps_addr) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  cJSON_AddStringToObject(o, "ps", ps_addr);
  cJSON_AddStringToObject(o, "mode", pst_status_mode_name(st->mode));
  cJSON_AddStringToObject(o, "optimizer", st->optimizer ? st->optimizer : "");
  cJSON_AddNumberToObject(o, "learning_rate", st->learning_rate);
  cJSON_AddNumberToObject(o, "version", (double)st->version);
  cJSON_AddNumberToObject(o, "workers", st->world_size);
  cJSON_AddNumberToObject(o, "registered", st->registered);
  cJSON_AddNumberToObject(o, "finished", st->finished);
  cJSON_AddNumberToObject(o, "epochs", st->epochs);
  cJSON_AddNumberToObject(o, "epochs_evaluated", st->epochs_evaluated);
  cJSON_AddNumberToObject(o, "test_accuracy", st->test_accuracy);
  cJSON_AddNumberToObject(o, "test_loss", st->test_loss);
  cJSON_AddNumberToObject(o, "train_loss", st->train_loss);
  cJSON_AddNumberToObject(o, "samples_trained", (double)st->samples_trained);
  cJSON_AddNumberToObject(o, "samples_per_sec", st->samples_per_sec);
  cJSON_AddNumberToObject(o, "training_seconds", st->training_seconds);
  cJSON_AddNumberToObject(o, "progress", st->progress);
  cJSON_AddNumberToObject(o, "eta_seconds", st->eta_seconds);
  cJSON_AddNumberToObject(o, "gradients_applied", (double)st->gradients_applied);
  cJSON_AddNumberToObject(o, "dropped_gradients", (double)st->dropped_gradients);
  cJSON_AddNumberToObject(o, "mean_staleness", st->mean_staleness);
  cJSON_AddNumberToObject(o, "max_staleness", (double)st->max_staleness);
  cJSON_AddNumberToObject(o, "max_lead", (double)st->max_lead);
  char hex[17];
  snprintf(hex, sizeof hex, "%016" PRIx64, st->weights_checksum);
  cJSON_AddStringToObject(o, "weights_checksum", hex);
  cJSON *ws = cJSON_AddArrayToObject(o, "worker_slots");
  for (size_t i = 0; ws && i < st->n_workers; i++) {
    const Pstrain__WorkerStatus *w = st->workers[i];
    cJSON *x = cJSON_CreateObject();
    if (!x) break;
    cJSON_AddNumberToObject(x, "index", w->index);
    cJSON_AddStringToObject(x, "name", w->name ? w->name : "");
    cJSON_AddStringToObject(x, "state", pst_status_worker_state(w));
    cJSON_AddBoolToObject(x, "connected", w->connected);
    cJSON_AddBoolToObject(x, "done", w->done);
    cJSON_AddNumberToObject(x, "epoch", w->epoch);
    cJSON_AddNumberToObject(x, "last_version", (double)w->last_version);
    cJSON_AddNumberToObject(x, "staleness", (double)w->staleness);
    cJSON_AddNumberToObject(x, "lead", (double)w->lead);
    cJSON_AddNumberToObject(x, "pushes", (double)w->pushes);
    cJSON_AddNumberToObject(x, "dropped", (double)w->dropped);
    cJSON_AddNumberToObject(x, "losses", w->losses);
    cJSON_AddNumberToObject(x, "last_seen_seconds", w->last_seen_seconds);
    cJSON_AddBoolToObject(x, "waited_for", w->waited_for);
    cJSON_AddItemToArray(ws, x);
  }
  return o;
}
