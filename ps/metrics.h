/* Training figures as the ps sees them: a JSON-lines metrics file (one object per event:
 * training-loss reports, per-epoch test evaluations, the final summary) and the per-epoch
 * aggregation of the workers' evaluation shares. */
#ifndef PSTRAIN_PS_METRICS_H
#define PSTRAIN_PS_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include "common/clock.h"

typedef struct {
  double loss_sum;
  uint64_t correct, samples;
  int reports;            /* workers that reported this epoch */
  uint64_t version;       /* newest version any share was computed on */
} pst_epoch_eval;

typedef struct {
  FILE *file;             /* NULL: no metrics file */
  double t0;              /* seconds, monotonic, at start */
  int epochs;
  int workers;
  pst_epoch_eval *evals;  /* [epochs] */
  double last_test_accuracy, last_test_loss;
  int last_epoch;         /* newest epoch whose evaluation is complete */
  uint64_t samples_trained;
  double train_start, train_end; /* monotonic seconds: all registered .. all done */
} pst_metrics;

int pst_metrics_open(pst_metrics *m, const char *path, int epochs, int workers, char *err,
                     size_t errlen);
void pst_metrics_close(pst_metrics *m);
/* A worker's training-loss report. */
void pst_metrics_train(pst_metrics *m, int worker, uint32_t epoch, uint64_t step,
                       uint64_t version, uint64_t staleness, double loss_sum, uint64_t correct,
                       uint64_t samples);
/* A worker's share of the epoch's test evaluation. Returns 1 when this completed the
 * epoch's evaluation (the figures are then in last_test_*). */
int pst_metrics_eval(pst_metrics *m, int worker, uint32_t epoch, uint64_t version,
                     double loss_sum, uint64_t correct, uint64_t samples);
/* Writes the summary record (and, when summary_path is set, one JSON object there). */
int pst_metrics_summary(pst_metrics *m, const char *summary_path, const char *mode,
                        const char *model, const char *optimizer, int batch, uint64_t version,
                        uint64_t checksum, double mean_staleness, uint64_t max_staleness,
                        uint64_t applied, uint64_t dropped, uint64_t max_lead, int failed);

#endif
