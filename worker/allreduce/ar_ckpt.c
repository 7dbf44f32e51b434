/* Checkpoints of an all-reduce job (worker/allreduce/allreduce.h): rank 0 writes the ps's
 * format (ps/state/checkpoint.h: the weights and the optimizer's slots, named as a ps names
 * them, with its metadata keys, so that `pstrain export` reads them), and on resume rank 0
 * loads the newest and broadcasts it, so that no other rank needs the files (they may be on
 * other hosts). A resumed job replays the data's shuffles from the seed to the step it
 * resumes at (worker/position.h) and continues bit for bit as the uninterrupted one. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/log.h"
#include "ps/state/checkpoint.h"
#include "worker/allreduce/allreduce.h"

static const char *slot_name(pst_opt_kind kind, int k) {
  if (kind == PST_OPT_MOMENTUM) return "momentum";
  return k == 0 ? "m" : "v";
}

/* What a checkpoint must have been written with to be resumed here: everything that changes
 * a step's arithmetic (the epochs only with the cosine schedule, which they stretch). */
static char *settings_json(const wk_ar *a) {
  const wk_ar_job *j = &a->job;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "mode", "allreduce");
  cJSON_AddNumberToObject(o, "workers", a->size);
  cJSON_AddNumberToObject(o, "batch_size", j->batch);
  cJSON_AddStringToObject(o, "optimizer", j->optimizer);
  cJSON_AddNumberToObject(o, "lr", j->opt.lr);
  cJSON_AddNumberToObject(o, "momentum", j->opt.momentum);
  cJSON_AddNumberToObject(o, "beta1", j->opt.beta1);
  cJSON_AddNumberToObject(o, "beta2", j->opt.beta2);
  cJSON_AddNumberToObject(o, "eps", j->opt.eps);
  cJSON_AddNumberToObject(o, "weight_decay", j->opt.weight_decay);
  cJSON_AddNumberToObject(o, "clip_norm", j->clip_norm);
  cJSON_AddStringToObject(o, "lr_schedule", pst_lr_schedule_name(j->lr_schedule));
  if (j->lr_schedule == PST_LR_COSINE) cJSON_AddNumberToObject(o, "epochs", j->epochs);
  char seed[24];
  snprintf(seed, sizeof seed, "%" PRIu64, j->seed);
  cJSON_AddStringToObject(o, "seed", seed);
  char *text = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return text;
}

int wk_ar_ckpt_save(wk_ar *a, char *err, size_t errlen) {
  if (a->rank != 0 || !a->job.checkpoint_dir[0]) return 0;
  const wk_trainer *t = &a->t;
  size_t n = t->model.n_params;
  int slots = pst_opt_slots(a->job.opt.kind);
  uint64_t opt_t;
  const float *slot[2] = {NULL, NULL};
  pst_opt_state(&a->optim, 0, &opt_t, &slot[0], &slot[1]);
  pst_ckpt_tensor tens[PST_CKPT_MAX_MODEL_TENSORS * 3];
  int nt = 0;
  for (int part = 0; part <= slots; part++) {
    char prefix[64] = "";
    if (part > 0) snprintf(prefix, sizeof prefix, "optimizer/%s/", slot_name(a->job.opt.kind, part - 1));
    const float *vec = part == 0 ? pst_store_front(&a->store) : slot[part - 1];
    int rc = pst_ckpt_model_tensors(&t->model, vec, prefix, tens + nt, PST_CKPT_MAX_MODEL_TENSORS);
    if (rc < 0) {
      snprintf(err, errlen, "cannot name the model's tensors: %s", strerror(-rc));
      return rc;
    }
    nt += rc;
  }
  if (!pst_all_finite(pst_store_front(&a->store), n)) {
    snprintf(err, errlen, "step %" PRIu64 ": the weights hold non-finite values: no checkpoint",
             a->store.version);
    return -ERANGE;
  }
  char version[24], epoch[24], steps[24], fp[20], seed[24];
  snprintf(version, sizeof version, "%" PRIu64, a->store.version);
  snprintf(epoch, sizeof epoch, "%" PRIu64, a->store.version / (uint64_t)t->steps_per_epoch);
  snprintf(steps, sizeof steps, "%" PRIu64, opt_t);
  snprintf(fp, sizeof fp, "%016" PRIx64, t->model.fingerprint);
  snprintf(seed, sizeof seed, "%" PRIu64, a->job.seed);
  char *settings = settings_json(a);
  if (!settings) return -ENOMEM;
  pst_ckpt_kv meta[] = {
      {"version", version},        {"step", version},          {"epoch", epoch},
      {"optimizer_steps", steps},  {"model_spec", t->model.text}, {"model_fingerprint", fp},
      {"mode", "allreduce"},       {"seed", seed},             {"settings", settings},
  };
  char path[1024];
  int rc = pst_ckpt_write(a->job.checkpoint_dir, a->store.version, tens, nt, meta,
                          (int)(sizeof meta / sizeof meta[0]), a->job.checkpoint_keep, path,
                          sizeof path, err, errlen);
  free(settings);
  if (rc == 0) LOG_INFO("checkpoint of step %" PRIu64 ": %s", a->store.version, path);
  return rc;
}

/* A checkpoint this job may resume from: its model and its settings. */
static int accept_ckpt(const pst_ckpt *ck, void *arg, char *why, size_t whylen) {
  const wk_ar *a = arg;
  const char *fp = pst_ckpt_meta(ck, "model_fingerprint"), *st = pst_ckpt_meta(ck, "settings");
  char mine[20];
  snprintf(mine, sizeof mine, "%016" PRIx64, a->t.model.fingerprint);
  char *settings = settings_json(a);
  int ok = fp && !strcmp(fp, mine) && st && settings && !strcmp(st, settings);
  if (!ok)
    snprintf(why, whylen, "written for %s (%.200s; this job: %.200s)",
             fp && !strcmp(fp, mine) ? "other settings" : "another model", st ? st : "none",
             settings ? settings : "?");
  free(settings);
  return ok ? 0 : -1;
}

static void skipped(const char *path, const char *reason, void *arg) {
  LOG_WARN("not resuming from %s: %s", path, reason);
}

int wk_ar_ckpt_resume(wk_ar *a, char *err, size_t errlen) {
  if (!a->job.checkpoint_dir[0] || !strcmp(a->job.resume, "never")) return 0;
  size_t n = a->t.model.n_params;
  int slots = pst_opt_slots(a->job.opt.kind);
  float *buf = calloc(n * (size_t)(1 + slots) + 1, sizeof(float));
  if (!buf) return -ENOMEM;
  /* hdr: found, version, optimizer steps; rank 0's, broadcast. */
  uint64_t hdr[3] = {0, 0, 0};
  int rc = 0;
  char path[1024] = "";
  if (a->rank == 0) {
    pst_ckpt ck;
    char why[512];
    rc = pst_ckpt_load_latest(a->job.checkpoint_dir, accept_ckpt, skipped, a, &ck, path, sizeof path,
                              why, sizeof why);
    if (rc == -ENOENT) {
      LOG_INFO("no checkpoint to resume from in %s: starting afresh", a->job.checkpoint_dir);
      rc = 0;
    } else if (rc < 0) {
      LOG_ERR("%s", why);
    } else {
      const char *ver = pst_ckpt_meta(&ck, "version"), *opt_t = pst_ckpt_meta(&ck, "optimizer_steps");
      for (int part = 0; part <= slots && rc == 0; part++) {
        char prefix[64] = "";
        if (part > 0) snprintf(prefix, sizeof prefix, "optimizer/%s/", slot_name(a->job.opt.kind, part - 1));
        rc = pst_ckpt_read_model(&ck, &a->t.model, prefix, buf + (size_t)part * n, why, sizeof why);
      }
      if (rc == 0 && (!ver || !opt_t)) {
        snprintf(why, sizeof why, "%s: its metadata lacks the version", path);
        rc = -EINVAL;
      }
      if (rc == 0) {
        hdr[0] = 1;
        hdr[1] = strtoull(ver, NULL, 10);
        hdr[2] = strtoull(opt_t, NULL, 10);
      } else {
        LOG_ERR("%s", why);
      }
      pst_ckpt_free(&ck);
    }
    /* A failure is said by rank 0 and travels as found = 2: every rank stops alike. */
    if (rc < 0) hdr[0] = 2;
  }
  if (pst_coll_bcast_u64(a->coll, hdr, 3, 0) < 0 ||
      (hdr[0] == 1 && pst_coll_bcast_f32(a->coll, buf, n * (size_t)(1 + slots), 0) < 0)) {
    snprintf(err, errlen, "broadcasting the checkpoint: %s", pst_coll_error(a->coll));
    free(buf);
    return -EIO;
  }
  if (hdr[0] == 2) {
    snprintf(err, errlen, "cannot resume from %s (rank 0 said why)", a->job.checkpoint_dir);
    free(buf);
    return -EINVAL;
  }
  if (hdr[0] == 1) {
    memcpy(pst_store_front(&a->store), buf, n * sizeof(float));
    a->store.version = hdr[1];
    pst_opt_restore(&a->optim, hdr[2], slots >= 1 ? buf + n : NULL, slots >= 2 ? buf + 2 * n : NULL);
    a->resumed_from = hdr[1];
    if (a->rank == 0) LOG_INFO("resuming at step %" PRIu64 " from %s", hdr[1], path);
  }
  free(buf);
  return 0;
}
