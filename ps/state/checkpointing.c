/* Checkpoints of the ps, and resuming from them.
 *
 * Saving: the state of the newest published version is copied on the loop (the weights and
 * the optimizer's slots, which are double-buffered so that this state is whole even in the
 * middle of a step: ps/train/optim.h) into a buffer allocated once, and written to disk on the
 * threadpool, so training stops only for the copy. One write at a time: a save that comes
 * due while one is being written waits for the next occasion, except the final one, which
 * follows it.
 *
 * What is saved: the weights under Keras-like layer names, the optimizer's slots under
 * "optimizer/<slot>/", and metadata: the version (= steps applied), the optimizer's step
 * count, the model spec and its fingerprint, the mode and its settings, the seed, and a
 * "state" JSON object with each slot's position and the evaluations so far (those two JSON
 * texts are ps/state/run_state.c's). In sync mode
 * every slot's position is the version, and a checkpoint is taken between steps, so a
 * resumed run replays exactly what an uninterrupted one does. */
#include "ps/state/checkpointing.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/shard.h"
#include "ps/state/checkpoint.h"
#include "ps/state/run_state.h"

#define SLOT_NAMES_MOMENTUM "momentum"

struct ps_ckpt_state {
  ps_server *srv;
  uv_work_t work;
  int busy;               /* a write is on the threadpool */
  int final_due;          /* the final save waits for the write in flight */
  int final_begun;        /* ps_ckpt_final was called: the next write's end is the final one */
  void (*final_done)(ps_server *s); /* called once the final save has ended, either way */
  int final_failed;       /* the final save was not written */
  char final_err[512];    /* ... and why */
  float *snap;            /* [n * (1 + slots)]: weights, then each slot */
  uint64_t snap_version;
  char *state_json, *settings_json;
  char version_s[24], opt_t_s[24], fp_s[20], seed_s[24], epoch_s[24], shard_s[32];
  char path[1024];        /* the write in flight's result */
  char last[1024];        /* the newest checkpoint written */
  char err[512];
  int rc;
  double started;         /* monotonic seconds when the write began */
  double last_time;       /* of the newest save begun */
  uint64_t last_version;  /* of the newest save begun; UINT64_MAX: none */
  uint64_t written_version; /* of `last`, the newest written (or resumed from); UINT64_MAX: none */
};

static const char *slot_name(pst_opt_kind kind, int k) {
  if (kind == PST_OPT_MOMENTUM) return "momentum";
  return k == 0 ? "m" : "v";
}

/* ---- the tensors of one part (the weights, or an optimizer slot) ---- */

/* Without shards, the model's tensors named as Keras names them. A shard's slice cuts
 * tensors (kernels/partition.h), so it is saved as one flat tensor "<prefix>shard" [n]; the
 * settings name the shard, and each shard keeps its own directory (ps/main.c). */
static int part_tensors(const ps_server *s, const float *vec, const char *prefix,
                        pst_ckpt_tensor *out, int max) {
  if (s->opt.shard_count <= 1) return pst_ckpt_model_tensors(s->model, vec, prefix, out, max);
  if (max < 1) return -ENOSPC;
  memset(out, 0, sizeof *out);
  int len = snprintf(out->name, sizeof out->name, "%sshard", prefix);
  if (len < 0 || (size_t)len >= sizeof out->name) return -ENAMETOOLONG;
  out->data = vec;
  out->count = s->core.store.n;
  out->ndim = 1;
  out->shape[0] = (int64_t)s->core.store.n;
  return 1;
}

static int read_part(const ps_server *s, const pst_ckpt *ck, const char *prefix, float *vec,
                     char *err, size_t errlen) {
  if (s->opt.shard_count <= 1) return pst_ckpt_read_model(ck, s->model, prefix, vec, err, errlen);
  char name[PST_CKPT_NAME_MAX];
  size_t count = 0;
  snprintf(name, sizeof name, "%sshard", prefix);
  const float *data = pst_ckpt_find(ck, name, &count);
  if (!data || count != s->core.store.n) {
    snprintf(err, errlen, "%s: tensor %s %s (this shard holds %zu floats)", ck->file, name,
             data ? "has another size" : "is missing", s->core.store.n);
    return data ? -EINVAL : -ENOENT;
  }
  memcpy(vec, data, count * sizeof(float));
  return 0;
}

/* ---- saving ---- */

static void write_work(uv_work_t *req) {
  ps_ckpt_state *k = req->data;
  ps_server *s = k->srv;
  size_t n = s->core.store.n;
  pst_ckpt_tensor t[PST_CKPT_MAX_MODEL_TENSORS * 3];
  int nt = 0, slots = pst_opt_slots(s->opt.opt.kind);
  /* A checkpoint is what a ps resumes from: one holding a NaN or an infinity would carry a
   * ruined state into every run started from it (ps/train/update.h keeps that from happening;
   * this is the last line). */
  if (!pst_all_finite(k->snap, n * (size_t)(1 + slots))) {
    k->rc = -ERANGE;
    snprintf(k->err, sizeof k->err, "the weights or the optimizer's state hold non-finite values");
    return;
  }
  for (int part = 0; part <= slots; part++) {
    char prefix[64] = "";
    if (part > 0)
      snprintf(prefix, sizeof prefix, "optimizer/%s/", slot_name(s->opt.opt.kind, part - 1));
    int rc = part_tensors(s, k->snap + (size_t)part * n, prefix, t + nt,
                          PST_CKPT_MAX_MODEL_TENSORS);
    if (rc < 0) {
      k->rc = rc;
      snprintf(k->err, sizeof k->err, "cannot name the model's tensors: %s", strerror(-rc));
      return;
    }
    nt += rc;
  }
  pst_ckpt_kv meta[] = {
      {"version", k->version_s},          {"step", k->version_s},
      {"epoch", k->epoch_s},
      {"optimizer_steps", k->opt_t_s},    {"model_spec", s->model->text},
      {"model_fingerprint", k->fp_s},     {"mode", pst_mode_name(s->opt.mode)},
      {"seed", k->seed_s},                {"settings", k->settings_json},
      {"state", k->state_json},
      {"shard", k->shard_s}, /* last: only a shard's checkpoint has it (pstrain export) */
  };
  int nmeta = (int)(sizeof meta / sizeof meta[0]) - (s->opt.shard_count > 1 ? 0 : 1);
  k->rc = pst_ckpt_write(s->opt.checkpoint_dir, k->snap_version, t, nt, meta,
                         nmeta, s->opt.checkpoint_keep, k->path,
                         sizeof k->path, k->err, sizeof k->err);
}

static int save(ps_server *s);

/* The final save has ended (written, or not: final_failed says): whoever waits for it (the
 * summary, ps/obs/obs.c) goes on. */
static void final_end(ps_ckpt_state *k) {
  void (*done)(ps_server *) = k->final_done;
  k->final_done = NULL;
  if (done) done(k->srv);
}

/* The final save could not be written: the run's newest state exists nowhere on disk, and a
 * ps started again would resume from an older version (or none) and train it again. */
static void final_fail(ps_ckpt_state *k, const char *why) {
  k->final_failed = 1;
  snprintf(k->final_err, sizeof k->final_err, "%s", why);
  LOG_ERR("final checkpoint of version %" PRIu64 " not written: %s", k->srv->core.store.version, why);
  final_end(k);
}

static void after_write(uv_work_t *req, int status) {
  ps_ckpt_state *k = req->data;
  k->busy = 0;
  cJSON_free(k->state_json);
  cJSON_free(k->settings_json);
  k->state_json = k->settings_json = NULL;
  int ok = status == 0 && k->rc == 0;
  char why[sizeof k->err];
  snprintf(why, sizeof why, "%s", status < 0 ? uv_strerror(status) : k->err);
  if (!ok) {
    LOG_ERR("checkpoint of version %" PRIu64 " not written: %s", k->snap_version, why);
  } else {
    snprintf(k->last, sizeof k->last, "%s", k->path);
    k->written_version = k->snap_version;
    LOG_INFO("checkpoint written: %s (version %" PRIu64 ", %.0f ms)", k->path, k->snap_version,
             (pst_now() - k->started) * 1000.0);
  }
  if (!k->final_begun) return;
  if (k->final_due) {
    /* The write that was in flight when the run ended: the final one follows it, unless it
     * wrote the final version itself. */
    k->final_due = 0;
    if (k->written_version == k->srv->core.store.version) {
      final_end(k);
    } else if (save(k->srv) < 0) {
      final_fail(k, "it could not be started");
    }
    return;
  }
  if (ok && k->snap_version == k->srv->core.store.version)
    final_end(k);
  else
    final_fail(k, ok ? "a write of another version ended instead" : why);
}

/* Copies the state of the published version and starts writing it: 0, or a negative code
 * (logged) when the write could not be started. */
static int save(ps_server *s) {
  ps_ckpt_state *k = s->ckpt;
  size_t n = s->core.store.n;
  uint64_t t;
  const float *s1, *s2;
  int in_step = s->opt.mode == PST_MODE_SYNC ? s->core.upd.step_open : s->core.upd.owner != -1;
  pst_opt_state(&s->core.optim, in_step, &t, &s1, &s2);
  memcpy(k->snap, pst_store_front(&s->core.store), n * sizeof(float));
  if (s1) memcpy(k->snap + n, s1, n * sizeof(float));
  if (s2) memcpy(k->snap + 2 * n, s2, n * sizeof(float));
  k->snap_version = s->core.store.version;
  snprintf(k->version_s, sizeof k->version_s, "%" PRIu64, s->core.store.version);
  snprintf(k->opt_t_s, sizeof k->opt_t_s, "%" PRIu64, t);
  /* Epochs trained through: by the steps where the data's size is known (sync), else the
   * newest epoch evaluated. */
  int spe = s->facts.data_known ? pst_steps_per_epoch((int)s->facts.train_n, s->opt.workers, s->opt.batch_size) : 0;
  snprintf(k->epoch_s, sizeof k->epoch_s, "%" PRIu64,
           s->opt.data_handout ? (uint64_t)s->plan.data.complete
           : s->opt.mode == PST_MODE_SYNC && spe > 0 ? s->core.store.version / (uint64_t)spe
                                                      : (uint64_t)s->obs.metrics.last_epoch);
  snprintf(k->fp_s, sizeof k->fp_s, "%016" PRIx64, s->model->fingerprint);
  snprintf(k->seed_s, sizeof k->seed_s, "%" PRIu64, s->opt.seed);
  snprintf(k->shard_s, sizeof k->shard_s, "%d/%d", s->opt.shard_index, s->opt.shard_count);
  k->state_json = ps_ckpt_state_json(s);
  k->settings_json = ps_ckpt_settings_json(s);
  if (!k->state_json || !k->settings_json) {
    LOG_ERR("checkpoint of version %" PRIu64 " not written: out of memory", s->core.store.version);
    cJSON_free(k->state_json);
    cJSON_free(k->settings_json);
    k->state_json = k->settings_json = NULL;
    return -ENOMEM;
  }
  k->busy = 1;
  k->rc = 0;
  k->started = k->last_time = pst_now();
  k->last_version = s->core.store.version;
  k->work.data = k;
  int rc = uv_queue_work(s->loop, &k->work, write_work, after_write);
  if (rc < 0) {
    k->busy = 0;
    LOG_ERR("checkpoint of version %" PRIu64 " not written: %s", s->core.store.version, uv_strerror(rc));
  }
  return rc;
}

/* Saving needs a directory: a ps resumed from a --resume file alone writes none. */
static ps_ckpt_state *saving(ps_server *s) {
  return s->ckpt && s->opt.checkpoint_dir[0] && !s->ckpt->busy ? s->ckpt : NULL;
}

void ps_ckpt_published(ps_server *s) {
  s->events.published(s); /* every new version passes here */
  ps_ckpt_state *k = saving(s);
  if (!k || s->opt.checkpoint_every == 0 || s->life.stopping) return;
  if (s->core.store.version % s->opt.checkpoint_every == 0 && s->core.store.version != k->last_version)
    save(s);
}

void ps_ckpt_tick(ps_server *s) {
  ps_ckpt_state *k = saving(s);
  if (!k || !(s->opt.checkpoint_seconds > 0) || s->life.stopping) return;
  if (pst_now() - k->last_time >= s->opt.checkpoint_seconds && s->core.store.version != k->last_version)
    save(s);
}

int ps_ckpt_final(ps_server *s, const char *why, void (*done)(ps_server *s)) {
  ps_ckpt_state *k = s->ckpt;
  (void)why;
  if (!k || !s->opt.checkpoint_dir[0] || k->final_begun) return 0;
  k->final_begun = 1;
  /* A save of this version that was begun and failed does not count: only one written. */
  if (!k->busy && k->written_version == s->core.store.version) return 0;
  k->final_done = done;
  if (k->busy) {
    k->final_due = 1;
    return 1;
  }
  if (save(s) < 0) {
    k->final_done = NULL;
    k->final_failed = 1;
    snprintf(k->final_err, sizeof k->final_err, "it could not be started");
    LOG_ERR("final checkpoint of version %" PRIu64 " not written: %s", s->core.store.version,
            k->final_err);
    return 0;
  }
  return 1;
}

const char *ps_ckpt_final_error(const ps_server *s) {
  return s->ckpt && s->ckpt->final_failed ? s->ckpt->final_err : NULL;
}

const char *ps_ckpt_last_path(const ps_server *s) { return s->ckpt ? s->ckpt->last : ""; }

/* ---- resuming ---- */

typedef struct {
  ps_server *srv;
} accept_arg;

/* A checkpoint is for this run when it holds the same model; one of the same model made
 * with other settings is an error (pst_ckpt_load_latest's caller reports it), not a reason
 * to start over silently. */
static int accept_ckpt(const pst_ckpt *ck, void *arg, char *why, size_t whylen) {
  ps_server *s = ((accept_arg *)arg)->srv;
  char fp[20];
  snprintf(fp, sizeof fp, "%016" PRIx64, s->model->fingerprint);
  const char *got = pst_ckpt_meta(ck, "model_fingerprint");
  if (!got || strcmp(got, fp) != 0) {
    snprintf(why, whylen, "another model (fingerprint %s, this ps trains %s)", got ? got : "none", fp);
    return 1;
  }
  for (int i = 0; i < ck->n_tensors; i++)
    if (!pst_all_finite(ck->tensors[i].data, ck->tensors[i].count)) {
      snprintf(why, whylen, "tensor %s holds non-finite values (NaN or infinity)",
               ck->tensors[i].name);
      return 1;
    }
  return 0;
}

static void log_skipped(const char *path, const char *reason, void *arg) {
  (void)arg;
  LOG_WARN("checkpoint %s skipped: %s", path, reason);
}

/* The settings a checkpoint was made with must be this run's: positions, shards and the
 * optimizer's state mean nothing under others. */
static int check_settings(const ps_server *s, const pst_ckpt *ck, const char *path, char *err,
                          size_t errlen) {
  char *mine = ps_ckpt_settings_json(s);
  const char *theirs = pst_ckpt_meta(ck, "settings");
  int same = mine && theirs && strcmp(mine, theirs) == 0;
  if (!same)
    snprintf(err, errlen,
             "%s was written with other settings (%.200s; this ps: %.200s): start with the same "
             "settings, or with --resume never to start over",
             path, theirs ? theirs : "none", mine ? mine : "?");
  cJSON_free(mine);
  return same ? 0 : -EINVAL;
}

static int restore(ps_server *s, const pst_ckpt *ck, const char *path, char *err, size_t errlen) {
  size_t n = s->core.store.n;
  int slots = pst_opt_slots(s->opt.opt.kind);
  float *buf = malloc(n * sizeof(float) * (size_t)(1 + slots));
  if (!buf) return -ENOMEM;
  int rc = check_settings(s, ck, path, err, errlen);
  for (int part = 0; part <= slots && rc == 0; part++) {
    char prefix[64] = "";
    if (part > 0)
      snprintf(prefix, sizeof prefix, "optimizer/%s/", slot_name(s->opt.opt.kind, part - 1));
    rc = read_part(s, ck, prefix, buf + (size_t)part * n, err, errlen);
  }
  const char *ver = pst_ckpt_meta(ck, "version"), *opt_t = pst_ckpt_meta(ck, "optimizer_steps");
  cJSON *st = rc == 0 ? cJSON_Parse(pst_ckpt_meta(ck, "state") ? pst_ckpt_meta(ck, "state") : "")
                      : NULL;
  const cJSON *ws = cJSON_GetObjectItemCaseSensitive(st, "workers");
  if (rc == 0 && (!ver || !opt_t || !cJSON_IsArray(ws) ||
                  cJSON_GetArraySize(ws) != s->opt.workers)) {
    snprintf(err, errlen, "%s: its metadata lacks the version or the workers' state", path);
    rc = -EINVAL;
  }
  if (rc == 0) {
    memcpy(pst_store_front(&s->core.store), buf, n * sizeof(float));
    s->core.store.version = strtoull(ver, NULL, 10);
    pst_opt_restore(&s->core.optim, strtoull(opt_t, NULL, 10), slots >= 1 ? buf + n : NULL,
                    slots >= 2 ? buf + 2 * n : NULL);
    int i = 0;
    const cJSON *j;
    cJSON_ArrayForEach(j, ws) {
      ps_worker *w = &s->roster.workers[i++];
      w->pushes = (uint64_t)ps_ckpt_jnum(j, "pushes");
      w->dropped = (uint64_t)ps_ckpt_jnum(j, "dropped");
      w->skipped_steps = (uint64_t)ps_ckpt_jnum(j, "skipped_steps"); /* 0 in older checkpoints */
      w->last_version = (uint64_t)ps_ckpt_jnum(j, "last_version");
      w->evals_done = (uint32_t)ps_ckpt_jnum(j, "evals_done");
      w->epoch = (uint32_t)ps_ckpt_jnum(j, "epoch");
      w->losses = (uint32_t)ps_ckpt_jnum(j, "losses");
      const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
      if (cJSON_IsString(name)) snprintf(w->name, sizeof w->name, "%s", name->valuestring);
      /* A finished slot stays finished; an abandoned one may be taken again. */
      if (ps_ckpt_jbool(j, "done") && !s->opt.data_handout) { /* handed-out data: workers join anew */
        w->done = 1;
        s->roster.finished++;
      }
    }
    s->core.upd.staleness_sum = (uint64_t)ps_ckpt_jnum(st, "staleness_sum");
    s->core.upd.staleness_max = (uint64_t)ps_ckpt_jnum(st, "staleness_max");
    s->core.upd.pushes = (uint64_t)ps_ckpt_jnum(st, "pushes");
    s->core.upd.dropped = (uint64_t)ps_ckpt_jnum(st, "dropped");
    s->core.upd.partial_steps = (uint64_t)ps_ckpt_jnum(st, "partial_steps");
    s->core.upd.steps = s->core.store.version;
    s->core.max_lead = (uint64_t)ps_ckpt_jnum(st, "max_lead");
    for (int w = 0; w < s->opt.workers; w++)
      if (s->roster.workers[w].done) {
        int published;
        pst_update_set_member(&s->core.upd, w, 0, &published);
      }
    if (s->opt.data_handout) rc = ps_ckpt_restore_data_position(s, st, path, err, errlen);
  }
  if (rc == 0) {
    s->restored.resumed = 1;
    s->restored.resumed_from = s->core.store.version;
    /* The evaluations wait for the metrics (ps_ckpt_restore_metrics). */
    s->ckpt->state_json = cJSON_PrintUnformatted(st);
  }
  cJSON_Delete(st);
  free(buf);
  return rc;
}

void ps_ckpt_restore_metrics(ps_server *s) {
  ps_ckpt_state *k = s->ckpt;
  if (!k || !k->state_json) return;
  cJSON *st = cJSON_Parse(k->state_json);
  const cJSON *j;
  cJSON_ArrayForEach(j, cJSON_GetObjectItemCaseSensitive(st, "evals")) {
    int e = (int)ps_ckpt_jnum(j, "epoch");
    if (e < 1 || e > s->opt.epochs) continue;
    pst_epoch_eval *x = &s->obs.metrics.evals[e];
    x->loss_sum = ps_ckpt_jnum(j, "loss_sum");
    x->correct = (uint64_t)ps_ckpt_jnum(j, "correct");
    x->samples = (uint64_t)ps_ckpt_jnum(j, "samples");
    x->reports = (int)ps_ckpt_jnum(j, "reports");
    x->version = (uint64_t)ps_ckpt_jnum(j, "version");
    if (ps_ckpt_jbool(j, "complete") && x->samples > 0) {
      x->complete = 1;
      s->obs.metrics.last_epoch = e;
      s->obs.metrics.last_test_loss = x->loss_sum / (double)x->samples;
      s->obs.metrics.last_test_accuracy = (double)x->correct / (double)x->samples;
      /* Shares set aside before the restart are not in the checkpoint: the figure with them
       * is the figure. */
      s->obs.metrics.last_loss_with_flagged = s->obs.metrics.last_test_loss;
      s->obs.metrics.last_accuracy_with_flagged = s->obs.metrics.last_test_accuracy;
    }
  }
  s->obs.metrics.samples_trained = (uint64_t)ps_ckpt_jnum(st, "samples_trained");
  s->obs.metrics.samples_resumed = s->obs.metrics.samples_trained;
  cJSON_Delete(st);
  cJSON_free(k->state_json);
  k->state_json = NULL;
}

/* Whether dir holds checkpoint files (of any run). */
static int has_checkpoints(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  struct dirent *e;
  uint64_t v;
  int found = 0;
  while (!found && (e = readdir(d)) != NULL) found = pst_ckpt_parse_name(e->d_name, &v) == 0;
  closedir(d);
  return found;
}

/* Old checkpoints this run does not resume from would share the directory with its own,
 * and the retention keeps the highest versions: this run's could be the ones removed. */
static int refuse_foreign(const char *dir, const char *why, char *err, size_t errlen) {
  snprintf(err, errlen,
           "--checkpoint-dir %.300s holds checkpoints %s: remove them, or choose another "
           "directory", dir, why);
  return -EEXIST;
}

int ps_ckpt_open(ps_server *s, char *err, size_t errlen) {
  const char *dir = s->opt.checkpoint_dir ? s->opt.checkpoint_dir : "";
  const char *resume = s->opt.resume ? s->opt.resume : "auto";
  int from_file = strcmp(resume, "auto") != 0 && strcmp(resume, "never") != 0;
  if (!dir[0] && !from_file) return 0;
  ps_ckpt_state *k = calloc(1, sizeof *k);
  size_t n = s->core.store.n;
  if (k) k->snap = malloc(n * sizeof(float) * (size_t)(1 + pst_opt_slots(s->opt.opt.kind)));
  if (!k || !k->snap) {
    if (k) free(k);
    snprintf(err, errlen, "cannot allocate the checkpoint buffer (%zu parameters)", n);
    return -ENOMEM;
  }
  k->srv = s;
  k->last_version = UINT64_MAX;
  k->written_version = UINT64_MAX;
  k->last_time = pst_now();
  s->ckpt = k;
  if (!strcmp(resume, "never"))
    return dir[0] && has_checkpoints(dir)
               ? refuse_foreign(dir, "of an earlier run, and --resume never starts anew", err, errlen)
               : 0;
  pst_ckpt ck;
  char path[1024] = "";
  int rc;
  if (from_file) {
    snprintf(path, sizeof path, "%s", resume);
    rc = pst_ckpt_load(path, &ck, err, errlen);
    char why[256];
    accept_arg aa = {s};
    if (rc == 0 && accept_ckpt(&ck, &aa, why, sizeof why) != 0) {
      snprintf(err, errlen, "--resume %.300s: %s", path, why);
      pst_ckpt_free(&ck);
      rc = -EINVAL;
    }
    if (rc < 0) return rc;
  } else {
    accept_arg aa = {s};
    char why[512];
    rc = pst_ckpt_load_latest(dir, accept_ckpt, log_skipped, &aa, &ck, path, sizeof path, why,
                              sizeof why);
    if (rc == -ENOENT) {
      if (has_checkpoints(dir))
        return refuse_foreign(dir, "but none this run can resume from (see above)", err, errlen);
      LOG_INFO("no checkpoint to resume from in %s: starting at version 0", dir);
      return 0;
    }
    if (rc < 0) {
      snprintf(err, errlen, "--checkpoint-dir %.300s: %s", dir, why);
      return rc;
    }
  }
  rc = restore(s, &ck, path, err, errlen);
  pst_ckpt_free(&ck);
  if (rc < 0) return rc;
  k->last_version = s->core.store.version;
  /* The file resumed from exists: the final save need not write this version again. */
  k->written_version = s->core.store.version;
  snprintf(k->last, sizeof k->last, "%s", path);
  LOG_INFO("resumed from %s: version %" PRIu64 ", %d of %d worker slots finished", path,
           s->core.store.version, s->roster.finished, s->opt.workers);
  return 0;
}

void ps_ckpt_free(ps_server *s) {
  if (!s->ckpt) return;
  cJSON_free(s->ckpt->state_json);
  cJSON_free(s->ckpt->settings_json);
  free(s->ckpt->snap);
  free(s->ckpt);
  s->ckpt = NULL;
}
