/* What rank 0 of an all-reduce job writes (worker/allreduce/allreduce.h): the metrics lines
 * and the summary, with a sync ps's names and meanings (ps/obs/metrics.c) where they have
 * one, so that `pstrain local`, compare and the tests read either job alike. The other
 * ranks write nothing. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/clock.h"
#include "worker/allreduce/allreduce.h"

int wk_ar_metrics_open(wk_ar *a, char *err, size_t errlen) {
  if (a->rank != 0 || !a->job.metrics_path[0]) return 0;
  /* A resumed job goes on with the file it had (a launcher follows it from its end). */
  a->metrics = fopen(a->job.metrics_path, a->resumed_from > 0 ? "a" : "w");
  if (!a->metrics) {
    snprintf(err, errlen, "--metrics %s: %s", a->job.metrics_path, strerror(errno));
    return -errno;
  }
  setvbuf(a->metrics, NULL, _IOLBF, 0); /* a launcher follows it line by line */
  return 0;
}

/* Training time so far: the wall time less the evaluations, as the ps's train_time. */
static double train_time(const wk_ar *a) {
  double s = pst_now() - a->t0 - a->eval_seconds;
  return s > 0 ? s : 0;
}

void wk_ar_metrics_train(wk_ar *a, double loss_sum, double correct, double samples) {
  if (!a->metrics || !(samples > 0)) return;
  const wk_trainer *t = &a->t;
  fprintf(a->metrics,
          "{\"time\":%.3f,\"event\":\"train\",\"epoch\":%d,\"step\":%" PRIu64 ",\"version\":%" PRIu64
          ",\"worker\":-1,\"staleness\":0,\"loss\":%.6f,\"accuracy\":%.6f,\"samples\":%.0f"
          ",\"train_time\":%.3f}\n",
          pst_now() - a->t0, t->epoch + 1, t->steps, a->store.version, loss_sum / samples,
          correct / samples, samples, train_time(a));
}

void wk_ar_metrics_eval(wk_ar *a, int epoch, double loss_sum, double correct, double samples) {
  if (!a->metrics || !(samples > 0)) return;
  fprintf(a->metrics,
          "{\"time\":%.3f,\"event\":\"eval\",\"epoch\":%d,\"version\":%" PRIu64
          ",\"worker\":-1,\"loss\":%.6f,\"accuracy\":%.6f,\"samples\":%.0f,\"shares\":%d"
          ",\"train_time\":%.3f}\n",
          pst_now() - a->t0, epoch, a->store.version, loss_sum / samples, correct / samples,
          samples, a->size, train_time(a));
}

void wk_ar_metrics_subset(wk_ar *a, uint32_t point, double loss_sum, double correct,
                          double samples, double asked, double asked_train_time) {
  if (!a->metrics || !(samples > 0)) return;
  /* Every rank evaluated the same weights (the sum of this step applied): version and
   * version_min are one, and every rank's part is in (shares). */
  fprintf(a->metrics,
          "{\"time\":%.3f,\"event\":\"eval_subset\",\"point\":%u,\"epoch\":%d,\"version\":%" PRIu64
          ",\"version_min\":%" PRIu64 ",\"worker\":-1,\"loss\":%.6f,\"accuracy\":%.6f,\"samples\":%.0f"
          ",\"shares\":%d,\"train_time\":%.3f,\"eval_seconds\":%.3f}\n",
          asked, point, a->t.epoch + 1, a->store.version, a->store.version, loss_sum / samples,
          correct / samples, samples, a->size, asked_train_time, a->eval_seconds);
}

static void add_hex(cJSON *o, const char *key, uint64_t v) {
  char hex[17];
  snprintf(hex, sizeof hex, "%016" PRIx64, v);
  cJSON_AddStringToObject(o, key, hex);
}

int wk_ar_summary(wk_ar *a, double process_seconds, char *err, size_t errlen) {
  if (a->rank != 0) return 0;
  const wk_trainer *t = &a->t;
  double wall = pst_now() - a->t0, train = wall - a->eval_seconds;
  double samples = (double)(t->steps - a->resumed_from) * (double)t->batch * (double)a->size;
  cJSON *o = cJSON_CreateObject();
  if (!o) return -ENOMEM;
  cJSON_AddStringToObject(o, "event", "summary");
  cJSON_AddStringToObject(o, "mode", "allreduce");
  cJSON_AddStringToObject(o, "model", a->job.model);
  cJSON_AddStringToObject(o, "optimizer", a->job.optimizer);
  cJSON_AddStringToObject(o, "lr_schedule", pst_lr_schedule_name(a->job.lr_schedule));
  cJSON_AddStringToObject(o, "lr_scaling", "none");
  uint64_t v = a->store.version;
  cJSON_AddNumberToObject(o, "learning_rate_last",
                          a->job.opt.lr * pst_update_lr_decay_at(&a->upd, v > 0 ? v - 1 : 0));
  cJSON_AddNumberToObject(o, "workers", a->size);
  cJSON_AddNumberToObject(o, "epochs", t->epochs);
  cJSON_AddNumberToObject(o, "epochs_evaluated", a->epochs_evaluated);
  cJSON_AddNumberToObject(o, "batch_size", t->batch);
  cJSON_AddNumberToObject(o, "test_accuracy", a->test_accuracy);
  cJSON_AddNumberToObject(o, "test_loss", a->test_loss);
  cJSON_AddNumberToObject(o, "samples_per_sec", train > 0 ? samples / train : 0);
  cJSON_AddNumberToObject(o, "wall_seconds", wall);
  cJSON_AddNumberToObject(o, "eval_seconds", a->eval_seconds);
  cJSON_AddNumberToObject(o, "training_seconds", train > 0 ? train : 0);
  cJSON_AddNumberToObject(o, "process_seconds", process_seconds);
  cJSON_AddNumberToObject(o, "samples", samples);
  cJSON_AddNumberToObject(o, "data_wait_seconds", a->data_wait);
  cJSON_AddNumberToObject(o, "updates", (double)v);
  cJSON_AddNumberToObject(o, "resumed_from", (double)a->resumed_from);
  add_hex(o, "weights_checksum", a->checksum);
  cJSON_AddStringToObject(o, "weights_checksum_from", "ranks");
  cJSON *ranks = cJSON_AddArrayToObject(o, "rank_checksums");
  for (int r = 0; r < a->size; r++) {
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, a->rank_checksums[r]);
    cJSON_AddItemToArray(ranks, cJSON_CreateString(hex));
  }
  /* What summed, and what a step's time went to (rank 0's; the others' are in their logs). */
  cJSON_AddStringToObject(o, "allreduce_algorithm", pst_coll_alg_name(a->job.alg));
  cJSON_AddStringToObject(o, "allreduce", a->alg_desc);
  cJSON_AddNumberToObject(o, "bucket_kib", a->job.bucket_kib);
  cJSON_AddNumberToObject(o, "buckets", a->n_buckets);
  double steps = t->steps > a->resumed_from ? (double)(t->steps - a->resumed_from) : 1;
  cJSON *ms = cJSON_AddObjectToObject(o, "step_ms");
  cJSON_AddNumberToObject(ms, "compute", a->compute_seconds / steps * 1e3);
  cJSON_AddNumberToObject(ms, "sum", a->sum_seconds / steps * 1e3);
  cJSON_AddNumberToObject(ms, "optimizer", a->opt_seconds / steps * 1e3);
  /* Bytes a rank hands the library per step (its share of the model); what crosses each link
   * is the algorithm's business (a ring: 2 (N-1)/N of it each way). */
  cJSON_AddNumberToObject(o, "allreduce_bytes_per_step", (double)t->model.n_params * sizeof(float));
  /* Every step sums one fresh gradient of every rank: nothing stale, nothing dropped. */
  cJSON_AddNumberToObject(o, "mean_staleness", 0);
  cJSON_AddNumberToObject(o, "max_staleness", 0);
  cJSON_AddNumberToObject(o, "dropped_gradients", 0);
  cJSON_AddNumberToObject(o, "clipped", (double)a->clipped);
  cJSON_AddNumberToObject(o, "unsafe_updates", (double)a->upd.unsafe_chunks);
  cJSON_AddBoolToObject(o, "failed", 0);
  cJSON_AddBoolToObject(o, "finished", 1);
  char *text = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  if (!text) return -ENOMEM;
  int rc = 0;
  if (a->metrics) fprintf(a->metrics, "%s\n", text);
  if (a->job.summary_path[0]) {
    FILE *f = fopen(a->job.summary_path, "w");
    if (!f || fprintf(f, "%s\n", text) < 0 || fclose(f) != 0) {
      snprintf(err, errlen, "--summary-json %s: %s", a->job.summary_path, strerror(errno));
      rc = -EIO;
    }
  }
  printf("done: test accuracy %.4f after %d epochs, %.0f samples/s (training), %.1f s wall, "
         "weights %016" PRIx64 " on all %d ranks\n", a->test_accuracy, a->epochs_evaluated,
         train > 0 ? samples / train : 0, wall, a->checksum, a->size);
  fflush(stdout);
  free(text);
  return rc;
}
