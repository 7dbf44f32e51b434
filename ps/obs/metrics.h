/* Training figures as the ps sees them: a JSON-lines metrics file (one object per event:
 * training-loss reports, per-epoch test evaluations, the final summary) and the per-epoch
 * aggregation of the workers' evaluation shares. */
#ifndef PSTRAIN_PS_METRICS_H
#define PSTRAIN_PS_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include "common/clock.h"
#include "common/prom.h"
#include "ps/obs/tensorboard.h"

typedef struct {
  double loss_sum;
  uint64_t correct, samples;
  int reports;            /* workers that reported this epoch */
  uint64_t version;       /* newest version any share was computed on */
  int complete;           /* the figures are final (pst_metrics_eval_complete) */
  /* Shares set aside as implausible (pst_metrics_eval_set_aside): out of the figures above,
   * kept here for the figure with them. */
  double aside_loss_sum;
  uint64_t aside_correct, aside_samples;
  int aside;
  /* Seconds the workers' training steps of this epoch waited for their batches, summed over
   * the workers (their training reports say it; they all precede the epoch's evaluation). */
  double data_wait;
} pst_epoch_eval;

/* One dense evaluation on the test subset (issue 16): the workers' shares of point p, taken
 * at their step p x eval_every, each on the weights it had just pulled. */
typedef struct {
  double loss_sum;
  uint64_t correct, samples;
  int reports;
  uint64_t version_min, version_max; /* of the weights the shares evaluated */
  uint32_t epoch;         /* the epoch in progress */
  int asked;              /* the ps asked for it: it was taken then */
  double time, train_time; /* since start, and training seconds, when first asked */
  int written;
} pst_subset_eval;

/* One training report, for the dashboard's curves. */
typedef struct {
  uint64_t version;
  float loss, accuracy;
} pst_train_point;

/* Training reports kept for the curves: when full, every second one is dropped and only
 * every second report after that is kept, so the curves always span the whole run. */
#define PST_METRICS_HISTORY 512

/* A worker's evaluation share that is implausible against the other workers' of the same
 * epoch (ps/train/liveness.c): flagged in the summary and left out of the epoch's figures (the
 * summary gives the figure with them beside). */
typedef struct {
  int worker;
  uint32_t epoch;
  uint64_t correct, samples;      /* the flagged share's */
  double median_accuracy;         /* the median share's of that epoch */
  double z;                       /* the accuracy's difference in standard errors */
  double loss, median_loss;       /* the share's mean loss, and the median share's */
} pst_eval_flag;

/* What the summary record says about a run besides the metrics' own figures. */
typedef struct {
  const char *mode, *model, *optimizer;
  int batch;
  int staleness_lr;       /* async/ssp: learning rates divided by 1 + staleness */
  const char *lr_schedule; /* --lr-schedule: constant or cosine */
  int lr_linear;          /* --lr-scaling linear */
  double lr_last;         /* the newest step's learning rate, its schedule's share applied */
  uint64_t version;
  /* The whole model's checksum (FNV-1a 64 over every parameter), and who computed it: "ps"
   * (this ps holds them all), "workers" (a shard: from their evaluations of the last epoch,
   * proto/pstrain.proto), or NULL when neither could (the summary then leaves it out). */
  uint64_t checksum;
  const char *checksum_from;
  int shard_index, shard_count; /* this ps's part: shard_index of shard_count (0 of 1: all) */
  uint64_t shard_checksum;      /* of this ps's part alone */
  double mean_staleness;
  uint64_t max_staleness, applied, dropped, max_lead;
  int failed;             /* aborted */
  int stopped;            /* stopped on request before finishing */
  const char *stop_reason;
  uint64_t resumed_from;  /* version a resumed ps started from (0: a fresh start) */
  int resumed;
  uint64_t partial_steps; /* sync steps applied without some lost worker's share */
  int workers_lost;       /* losses of a worker over the run */
  /* The data handout (issue 28; data_order "ps", else "shards" and the rest 0): workers that
   * left on purpose, the most training at once, and the ranges handed out and returned. */
  const char *data_order;
  int workers_departed, workers_most;
  uint64_t ranges_handed, ranges_returned;
  int workers_abandoned;  /* slots whose rejoin timeout ran out */
  uint64_t rejected;      /* gradients or reports refused as invalid */
  const uint32_t *rejected_per_slot; /* [slots]: of them, each slot's (all its holders') */
  int slots;
  const char *evaluated_by; /* "workers" (each its test slice) or "ps" (--eval-on ps) */
  /* The job's encodings on the wire (common/codec.h names). */
  const char *push_encoding, *pull_encoding;
  double topk_warmup;     /* top-k pushes: the warm-up's epochs (0: none) */
  double topk_momentum;   /* top-k pushes: the momentum the workers keep (0: none) */
  uint64_t evals_missed;  /* evaluation shares not reported within --eval-timeout */
  uint64_t unsafe_updates; /* chunks whose update would not have been finite: kept */
  /* The norm that follows the job (ps/train/update.h): its factor (0: off), pushes it rejected, the
   * largest norm / running median and the largest warm-up RMS of the pushes it accepted. */
  double norm_factor;
  uint64_t norm_rejected;
  double norm_ratio_max, norm_warmup_rms_max;
  const pst_eval_flag *flags;
  int n_flags;
  const char *checkpoint; /* the newest checkpoint written, or "" */
  const char *checkpoint_final_error; /* why the final checkpoint was not written, or NULL */
  /* Samples never trained (issue 43): in all, and per slot (untrained_steps[i] x batch;
   * NULL or all 0: none). A job with any is not finished. */
  uint64_t untrained_samples;
  const uint64_t *untrained_steps; /* [n_untrained] */
  int n_untrained;
} pst_run_summary;

/* The round trip (issue 26): each worker step's exposed wait, from the last byte of its push
 * leaving the worker to the first byte of its next weights reaching it, and where it went.
 * The worker measures the whole (and says it on its next push); the ps its own part: the
 * seconds it spent summing shares, in optimizer passes and writing reply chunks from the
 * push's first chunk on (work on the push's first chunks holds its last bytes in the socket),
 * and the rest of the time from the push in whole to the reply's first chunk about to be
 * written, queued (behind other work, or waiting for other workers' shares). What is left of
 * the whole is the wire, both ways (the kernels' socket buffers, the network). On a link
 * slower than the ps, work on a push's first chunks overlaps the rest of its transfer and is
 * counted all the same, so the wire is then the smaller for it. */
typedef enum {
  PST_RT_EXPOSED = 0,
  PST_RT_WIRE,
  PST_RT_QUEUED,
  PST_RT_SUM,
  PST_RT_OPTIMIZER,
  PST_RT_SENDING,
  PST_RT_PARTS
} pst_rt_part;

/* The parts' names in the summary and /metrics ("exposed", "wire", ...). */
extern const char *const pst_rt_part_names[PST_RT_PARTS];

typedef struct {
  FILE *file;             /* NULL: no metrics file */
  char path[512];
  double t0;              /* seconds, monotonic, at start */
  int epochs;
  int workers;
  pst_epoch_eval *evals;  /* [epochs] */
  double last_test_accuracy, last_test_loss;
  /* The same with the shares set aside as implausible put back (the figures above when none
   * was), for the summary. */
  double last_accuracy_with_flagged, last_loss_with_flagged;
  int last_epoch;         /* newest epoch whose evaluation is complete */
  uint64_t samples_trained;
  uint64_t samples_resumed; /* of samples_trained, those trained before a resume */
  double data_wait;       /* seconds the workers' steps waited for data, summed over them */
  double train_start, train_end; /* monotonic seconds: all registered .. all done */
  double cpu_start, cpu_end;     /* this process's CPU seconds at those moments */
  /* Live figures that only /metrics shows (ps/obs/obs.c renders them with the rest). */
  double last_train_loss, last_train_accuracy; /* the newest training-loss report */
  pst_hist staleness;     /* versions behind, per gradient applied */
  pst_hist step_seconds;  /* seconds between consecutive versions */
  pst_hist push_seconds;  /* a gradient's first chunk in .. its last chunk taken */
  pst_hist pull_seconds;  /* a PULL in .. its reply's last chunk written (waits included) */
  double last_step_at;    /* monotonic seconds of the newest version (0: none yet) */
  /* On the ps's training port, all connections, for the summary (the connections count them:
   * ps/net/net.h). */
  uint64_t bytes_in, bytes_out;
  /* Payload bytes through shared memory with workers on this host (proto/ring.h), which the
   * figures above do not count. */
  uint64_t shm_in, shm_out;
  /* The round trip's parts over the workers' steps (seconds). */
  pst_quant round_trip[PST_RT_PARTS];
  /* TensorBoard scalars (--tensorboard): the caller's event file, or NULL; the learning
   * rate they show; the staleness histogram's count and sum at the last record, so each
   * record shows the mean staleness of the gradients applied since the one before. */
  pst_tb *tb;
  double lr;
  /* Dense evaluations: points 1..subset_n (index p-1), and each slot's newest point. */
  pst_subset_eval *subset;
  uint32_t subset_n;
  uint32_t *subset_done;  /* [workers] */
  double eval_seconds;    /* the workers' evaluation time, summed over them */
  pst_train_point history[PST_METRICS_HISTORY];
  int history_n;
  uint32_t history_stride, history_skip; /* keep one report in stride */
  uint64_t tb_stale_count;
  double tb_stale_sum;
} pst_metrics;

/* Training starts (every slot has had a worker) and ends (the last evaluation is in): the
 * wall clock and this process's CPU time, for the summary's speed and CPU per gradient. */
void pst_metrics_mark_start(pst_metrics *m);
void pst_metrics_mark_end(pst_metrics *m);
/* append: a resumed run adds to the file it wrote before instead of starting it anew. */
int pst_metrics_open(pst_metrics *m, const char *path, int epochs, int workers, int append,
                     char *err, size_t errlen);
void pst_metrics_close(pst_metrics *m);
/* 0, or -EIO when a record could not be written to the metrics file (a full disk). */
int pst_metrics_check(pst_metrics *m);
/* A worker's training-loss report; data_wait: of its compute time, the seconds its steps
 * waited for their batches. */
void pst_metrics_train(pst_metrics *m, int worker, uint32_t epoch, uint64_t step,
                       uint64_t version, uint64_t staleness, double loss_sum, uint64_t correct,
                       uint64_t samples, double data_wait);
/* A gradient was applied whole (its staleness, and the seconds from its first chunk to its
 * last being taken); a pull's reply has left (seconds since the PULL); a new version was
 * published. */
void pst_metrics_applied(pst_metrics *m, uint64_t staleness, double seconds);
/* The data handout (issue 28): a range of epoch `epoch`'s order, positions [start, start +
 * count), handed to `worker` for the step on `version`, trained, or returned to the pool
 * (what: "handed", "trained", "returned"). One "data" line each, in the order they happen. */
void pst_metrics_range(pst_metrics *m, const char *what, int worker, uint64_t version,
                       uint32_t epoch, uint64_t start, uint32_t count);
/* The data handout: epoch `epoch` has every one of its `samples` samples trained (at
 * `version`); epoch 0: the handout starts (a "data_epoch" line each, for `pstrain local
 * --schedule` and the plots). */
void pst_metrics_data_epoch(pst_metrics *m, uint32_t epoch, uint64_t version, uint64_t samples,
                            uint32_t epochs);
/* The workers training changed (one joined, left or was lost): a "workers" line with the
 * count, the version then, why, which slot, and (joined) the version of the first step it
 * takes part in. */
void pst_metrics_workers(pst_metrics *m, int workers, uint64_t version, const char *why,
                         int worker, uint64_t from);
void pst_metrics_pulled(pst_metrics *m, double seconds);
void pst_metrics_step(pst_metrics *m);
/* One worker step's round trip: its exposed wait as the worker measured it and the ps's
 * parts of it (pst_rt_part); the wire is what is left. A part that measurement noise would
 * make negative counts as 0. */
void pst_metrics_round_trip(pst_metrics *m, double exposed, double queued, double sum,
                            double optimizer, double sending);
/* Adds a worker's share of the epoch's test evaluation (epoch 1..epochs; others ignored). */
/* A share already given to pst_metrics_eval set aside as implausible, before the epoch is
 * complete: the epoch's figures are then those of the other shares, and the figure with it
 * is kept for the summary (test_accuracy_with_flagged). Nothing once the epoch is complete. */
void pst_metrics_eval_set_aside(pst_metrics *m, uint32_t epoch, double loss_sum,
                                uint64_t correct, uint64_t samples);
void pst_metrics_eval(pst_metrics *m, uint32_t epoch, uint64_t version, double loss_sum,
                      uint64_t correct, uint64_t samples);
/* A worker's share of dense evaluation `point` (1-based), taken on weights of `version`.
 * Once every worker's share is in, an "eval_subset" record is written. */
void pst_metrics_subset(pst_metrics *m, int worker, uint32_t point, uint64_t version,
                        uint32_t epoch, double loss_sum, uint64_t correct, uint64_t samples);
/* The ps asked a worker for point `point` (the first ask sets the point's time). */
void pst_metrics_subset_asked(pst_metrics *m, uint32_t point);
/* Seconds a worker spent evaluating (either kind): taken out of the training time. */
void pst_metrics_eval_time(pst_metrics *m, double seconds);
/* The ps has every share it will get for the epoch (one from each worker still there):
 * makes the figures final (last_test_*, an eval record). Returns 1 if it did now, 0 if the
 * epoch was complete already or has no samples. */
int pst_metrics_eval_complete(pst_metrics *m, uint32_t epoch);
/* Writes the summary record (and, when summary_path is set, one JSON object there).
 * Returns 0, or a negative code when the summary file cannot be written. */
int pst_metrics_summary(pst_metrics *m, const char *summary_path, const pst_run_summary *r);

#endif
