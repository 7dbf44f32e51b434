#include "ps/metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int pst_metrics_open(pst_metrics *m, const char *path, int epochs, int workers, char *err,
                     size_t errlen) {
  memset(m, 0, sizeof *m);
  m->t0 = pst_now();
  m->epochs = epochs;
  m->workers = workers;
  m->evals = calloc((size_t)epochs + 1, sizeof *m->evals);
  if (!m->evals) return -ENOMEM;
  if (path && path[0]) {
    m->file = fopen(path, "w");
    if (!m->file) {
      snprintf(err, errlen, "%s: cannot write the metrics file: %s", path, strerror(errno));
      free(m->evals);
      m->evals = NULL;
      return -errno;
    }
    /* Line-buffered, so a launcher tailing the file sees each record whole and at once. */
    setvbuf(m->file, NULL, _IOLBF, 0);
  }
  return 0;
}

void pst_metrics_close(pst_metrics *m) {
  if (m->file) fclose(m->file);
  m->file = NULL;
  free(m->evals);
  m->evals = NULL;
}

void pst_metrics_train(pst_metrics *m, int worker, uint32_t epoch, uint64_t step,
                       uint64_t version, uint64_t staleness, double loss_sum, uint64_t correct,
                       uint64_t samples) {
  m->samples_trained += samples;
  if (!m->file || samples == 0) return;
  fprintf(m->file,
          "{\"time\":%.3f,\"event\":\"train\",\"epoch\":%u,\"step\":%" PRIu64
          ",\"version\":%" PRIu64 ",\"worker\":%d,\"staleness\":%" PRIu64
          ",\"loss\":%.6f,\"accuracy\":%.6f,\"samples\":%" PRIu64 "}\n",
          pst_now() - m->t0, epoch, step, version, worker, staleness, loss_sum / (double)samples,
          (double)correct / (double)samples, samples);
}

int pst_metrics_eval(pst_metrics *m, int worker, uint32_t epoch, uint64_t version,
                     double loss_sum, uint64_t correct, uint64_t samples) {
  if (epoch < 1 || (int)epoch > m->epochs) return 0;
  pst_epoch_eval *e = &m->evals[epoch];
  e->loss_sum += loss_sum;
  e->correct += correct;
  e->samples += samples;
  if (version > e->version) e->version = version;
  if (++e->reports < m->workers || e->samples == 0) return 0;
  m->last_epoch = (int)epoch;
  m->last_test_loss = e->loss_sum / (double)e->samples;
  m->last_test_accuracy = (double)e->correct / (double)e->samples;
  if (m->file)
    fprintf(m->file,
            "{\"time\":%.3f,\"event\":\"eval\",\"epoch\":%u,\"version\":%" PRIu64
            ",\"worker\":-1,\"loss\":%.6f,\"accuracy\":%.6f,\"samples\":%" PRIu64 "}\n",
            pst_now() - m->t0, epoch, e->version, m->last_test_loss, m->last_test_accuracy,
            e->samples);
  (void)worker;
  return 1;
}

/* Copies s into out as the inside of a JSON string. */
static void json_escape(const char *s, char *out, size_t outlen) {
  size_t o = 0;
  for (; *s && o + 7 < outlen; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') {
      out[o++] = '\\';
      out[o++] = (char)ch;
    } else if (ch < 0x20) {
      o += (size_t)snprintf(out + o, outlen - o, "\\u%04x", ch);
    } else {
      out[o++] = (char)ch;
    }
  }
  out[o] = '\0';
}

static void write_summary(FILE *f, pst_metrics *m, const char *mode, const char *model,
                          const char *optimizer, int batch, uint64_t version, uint64_t checksum,
                          double mean_st, uint64_t max_st, uint64_t applied, uint64_t dropped,
                          uint64_t max_lead, int failed, double wall, double sps) {
  char model_json[512];
  json_escape(model, model_json, sizeof model_json);
  fprintf(f,
          "{\"event\":\"summary\",\"mode\":\"%s\",\"model\":\"%s\",\"optimizer\":\"%s\","
          "\"workers\":%d,\"epochs\":%d,\"epochs_evaluated\":%d,\"batch_size\":%d,"
          "\"test_accuracy\":%.6f,\"test_loss\":%.6f,\"samples_per_sec\":%.1f,"
          "\"wall_seconds\":%.3f,\"samples\":%" PRIu64 ",\"updates\":%" PRIu64
          ",\"weights_checksum\":\"%016" PRIx64 "\",\"mean_staleness\":%.4f,"
          "\"max_staleness\":%" PRIu64 ",\"gradients_applied\":%" PRIu64 ",\"dropped_gradients\":%" PRIu64
          ",\"max_lead\":%" PRIu64 ",\"failed\":%s}\n",
          mode, model_json, optimizer, m->workers, m->epochs, m->last_epoch, batch,
          m->last_test_accuracy, m->last_test_loss, sps, wall, m->samples_trained, version,
          checksum, mean_st, max_st, applied, dropped, max_lead, failed ? "true" : "false");
}

int pst_metrics_summary(pst_metrics *m, const char *summary_path, const char *mode,
                        const char *model, const char *optimizer, int batch, uint64_t version,
                        uint64_t checksum, double mean_staleness, uint64_t max_staleness,
                        uint64_t applied, uint64_t dropped, uint64_t max_lead, int failed) {
  double end = m->train_end > 0 ? m->train_end : pst_now();
  double wall = m->train_start > 0 ? end - m->train_start : 0;
  double sps = wall > 0 ? (double)m->samples_trained / wall : 0;
  if (m->file)
    write_summary(m->file, m, mode, model, optimizer, batch, version, checksum, mean_staleness,
                  max_staleness, applied, dropped, max_lead, failed, wall, sps);
  if (summary_path && summary_path[0]) {
    FILE *f = fopen(summary_path, "w");
    if (!f) return -errno;
    write_summary(f, m, mode, model, optimizer, batch, version, checksum, mean_staleness,
                  max_staleness, applied, dropped, max_lead, failed, wall, sps);
    fclose(f);
  }
  return 0;
}
