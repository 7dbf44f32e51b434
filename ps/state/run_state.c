/* What a checkpoint holds of the run besides its tensors (ps/state/checkpointing.c writes
 * and reads it): the settings it was made with, and the "state" JSON object, each slot's
 * position and the data handout's, and the readers of its numbers. Calls nothing of
 * checkpointing.c. */
#include "ps/state/run_state.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/shard.h"

/* ---- the state as JSON ---- */

char *ps_ckpt_settings_json(const ps_server *s) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "mode", pst_mode_name(s->opt.mode));
  cJSON_AddNumberToObject(o, "workers", s->opt.workers);
  cJSON_AddNumberToObject(o, "backup_workers", s->opt.backup_workers);
  cJSON_AddNumberToObject(o, "staleness", s->opt.staleness);
  cJSON_AddNumberToObject(o, "epochs", s->opt.epochs);
  cJSON_AddNumberToObject(o, "batch_size", s->opt.batch_size);
  cJSON_AddStringToObject(o, "optimizer", pst_opt_kind_name(s->opt.opt.kind));
  cJSON_AddNumberToObject(o, "lr", s->opt.opt.lr);
  cJSON_AddNumberToObject(o, "momentum", s->opt.opt.momentum);
  cJSON_AddNumberToObject(o, "beta1", s->opt.opt.beta1);
  cJSON_AddNumberToObject(o, "beta2", s->opt.opt.beta2);
  cJSON_AddNumberToObject(o, "eps", s->opt.opt.eps);
  cJSON_AddNumberToObject(o, "weight_decay", s->opt.opt.weight_decay);
  /* Only with the data handed out, so that other runs' checkpoints read as before. */
  if (s->opt.data_handout) {
    cJSON_AddStringToObject(o, "data_order", "ps");
    cJSON_AddNumberToObject(o, "workers_min", s->opt.workers_min);
  }
  /* Only for shards, so that an unsharded run's checkpoints read as before. */
  if (s->opt.shard_count > 1) {
    char shard[32];
    snprintf(shard, sizeof shard, "%d/%d", s->opt.shard_index, s->opt.shard_count);
    cJSON_AddStringToObject(o, "shard", shard);
  }
  char *text = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return text;
}

/* The data handout's position (issue 28): "data": {"epoch", "next", "trained": [samples of
 * epochs 1..N], "back": [[epoch, start, count], ...]}, the ranges to hand out again first. */
static int add_data_position(const ps_server *s, cJSON *o) {
  uint32_t epoch;
  uint64_t next;
  uint64_t *trained = calloc((size_t)s->plan.data.epochs + 2, sizeof *trained);
  pst_range *back = NULL;
  size_t n_back = 0;
  if (!trained || ps_data_position(s, &epoch, &next, trained, &back, &n_back) < 0) {
    free(trained);
    return -ENOMEM;
  }
  cJSON *d = cJSON_AddObjectToObject(o, "data");
  cJSON *tr = d ? cJSON_AddArrayToObject(d, "trained") : NULL;
  cJSON *bk = d ? cJSON_AddArrayToObject(d, "back") : NULL;
  int rc = d && tr && bk ? 0 : -ENOMEM;
  if (rc == 0) {
    cJSON_AddNumberToObject(d, "epoch", epoch);
    cJSON_AddNumberToObject(d, "next", (double)next);
    for (uint32_t e = 1; e <= s->plan.data.epochs; e++)
      cJSON_AddItemToArray(tr, cJSON_CreateNumber((double)trained[e]));
    for (size_t i = 0; i < n_back; i++) {
      double v[3] = {back[i].epoch, (double)back[i].start, back[i].count};
      cJSON_AddItemToArray(bk, cJSON_CreateDoubleArray(v, 3));
    }
  }
  free(trained);
  free(back);
  return rc;
}

/* Reads "data" back into the handout; a checkpoint of a job that handed out the data must
 * have it, whole and adding up (pst_handout_restore checks the books). */
int ps_ckpt_restore_data_position(ps_server *s, const cJSON *st, const char *path, char *err,
                                  size_t errlen) {
  const cJSON *d = cJSON_GetObjectItemCaseSensitive(st, "data");
  const cJSON *tr = cJSON_GetObjectItemCaseSensitive(d, "trained");
  const cJSON *bk = cJSON_GetObjectItemCaseSensitive(d, "back");
  if (!cJSON_IsObject(d) || !cJSON_IsArray(tr) || !cJSON_IsArray(bk) ||
      cJSON_GetArraySize(tr) != (int)s->plan.data.epochs) {
    snprintf(err, errlen, "%s: its metadata lacks the data position of a job whose ps hands out "
             "the data", path);
    return -EINVAL;
  }
  uint64_t *trained = calloc((size_t)s->plan.data.epochs + 2, sizeof *trained);
  size_t n_back = (size_t)cJSON_GetArraySize(bk);
  pst_range *back = calloc(n_back + 1, sizeof *back);
  if (!trained || !back) {
    free(trained);
    free(back);
    return -ENOMEM;
  }
  int rc = 0, e = 1;
  const cJSON *j;
  /* Numbers beyond 2^53 or negative would not round-trip: refused as the books would be. */
  cJSON_ArrayForEach(j, tr) {
    double v = cJSON_IsNumber(j) ? j->valuedouble : -1;
    if (!(v >= 0 && v <= 9007199254740992.0)) rc = -EINVAL;
    else trained[e] = (uint64_t)v;
    e++;
  }
  size_t i = 0;
  cJSON_ArrayForEach(j, bk) {
    const cJSON *a = cJSON_GetArrayItem(j, 0), *b = cJSON_GetArrayItem(j, 1),
                *c = cJSON_GetArrayItem(j, 2);
    if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) != 3 || !cJSON_IsNumber(a) ||
        !cJSON_IsNumber(b) || !cJSON_IsNumber(c) || !(a->valuedouble >= 0) ||
        !(a->valuedouble < 4294967296.0) || !(b->valuedouble >= 0) ||
        !(b->valuedouble <= 9007199254740992.0) || !(c->valuedouble >= 0) ||
        !(c->valuedouble < 4294967296.0)) {
      rc = -EINVAL;
      break;
    }
    back[i].epoch = (uint32_t)a->valuedouble;
    back[i].start = (uint64_t)b->valuedouble;
    back[i].count = (uint32_t)c->valuedouble;
    i++;
  }
  double ep = ps_ckpt_jnum(d, "epoch"), nx = ps_ckpt_jnum(d, "next");
  char why[256] = "a number out of range";
  if (rc == 0 && (!(ep >= 0 && ep < 4294967296.0) || !(nx >= 0 && nx <= 9007199254740992.0)))
    rc = -EINVAL;
  if (rc == 0)
    rc = pst_handout_restore(&s->plan.data, (uint32_t)ep, (uint64_t)nx, trained, back, n_back, why,
                             sizeof why);
  if (rc == -EINVAL)
    snprintf(err, errlen, "%s: its data position is not one this job could reach: %s", path, why);
  else if (rc < 0)
    snprintf(err, errlen, "%s: cannot restore its data position: %s", path, strerror(-rc));
  else
    LOG_INFO("data position restored: fresh ranges from epoch %u at sample %" PRIu64 " of its "
             "order, %zu ranges to hand out again first, %u epochs complete", s->plan.data.epoch,
             s->plan.data.next, s->plan.data.n_back, s->plan.data.complete);
  free(trained);
  free(back);
  return rc;
}

char *ps_ckpt_state_json(const ps_server *s) {
  cJSON *o = cJSON_CreateObject();
  cJSON *ws = cJSON_AddArrayToObject(o, "workers");
  for (int i = 0; i < s->opt.workers; i++) {
    const ps_worker *w = &s->roster.workers[i];
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "index", i);
    cJSON_AddStringToObject(j, "name", w->name);
    cJSON_AddNumberToObject(j, "position", (double)ps_slot_position(s, i));
    cJSON_AddNumberToObject(j, "epoch", w->epoch);
    cJSON_AddNumberToObject(j, "pushes", (double)w->pushes);
    cJSON_AddNumberToObject(j, "dropped", (double)w->dropped);
    /* Steps published without its share (issue 43): a resumed job still knows its shard was
     * not all trained. */
    cJSON_AddNumberToObject(j, "skipped_steps", (double)w->skipped_steps);
    cJSON_AddNumberToObject(j, "last_version", (double)w->last_version);
    cJSON_AddNumberToObject(j, "evals_done", w->evals_done);
    cJSON_AddBoolToObject(j, "done", w->done);
    cJSON_AddBoolToObject(j, "abandoned", w->abandoned);
    cJSON_AddNumberToObject(j, "losses", w->losses);
    cJSON_AddItemToArray(ws, j);
  }
  cJSON *ev = cJSON_AddArrayToObject(o, "evals");
  for (int e = 1; e <= s->opt.epochs; e++) {
    const pst_epoch_eval *x = &s->obs.metrics.evals[e];
    if (x->reports == 0) continue;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "epoch", e);
    cJSON_AddNumberToObject(j, "loss_sum", x->loss_sum);
    cJSON_AddNumberToObject(j, "correct", (double)x->correct);
    cJSON_AddNumberToObject(j, "samples", (double)x->samples);
    cJSON_AddNumberToObject(j, "reports", x->reports);
    cJSON_AddNumberToObject(j, "version", (double)x->version);
    cJSON_AddBoolToObject(j, "complete", x->complete);
    cJSON_AddItemToArray(ev, j);
  }
  if (s->opt.data_handout && add_data_position(s, o) < 0) {
    cJSON_Delete(o);
    return NULL;
  }
  cJSON_AddNumberToObject(o, "samples_trained", (double)s->obs.metrics.samples_trained);
  cJSON_AddNumberToObject(o, "staleness_sum", (double)s->core.upd.staleness_sum);
  cJSON_AddNumberToObject(o, "staleness_max", (double)s->core.upd.staleness_max);
  cJSON_AddNumberToObject(o, "pushes", (double)s->core.upd.pushes);
  cJSON_AddNumberToObject(o, "dropped", (double)s->core.upd.dropped);
  cJSON_AddNumberToObject(o, "partial_steps", (double)s->core.upd.partial_steps);
  cJSON_AddNumberToObject(o, "max_lead", (double)s->core.max_lead);
  char *text = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return text;
}

double ps_ckpt_jnum(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

int ps_ckpt_jbool(const cJSON *o, const char *key) {
  return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key));
}

