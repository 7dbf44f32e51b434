/* `pstrain compare`'s records of its runs, types only: the settings (launcher/compare/sweep.h
 * parses them), each run's figures (launcher/compare/digest.h reads them back) and what
 * launcher/compare/compare_report.h makes of them (statistics over repeats, curves and gnuplot
 * plots, the tables of summary.md and report.html). launcher/compare/compare.c runs the jobs. */
#ifndef PSTRAIN_LAUNCHER_COMPARE_RECORDS_H
#define PSTRAIN_LAUNCHER_COMPARE_RECORDS_H

#include <limits.h>
#include <stdio.h>

#define MAX_MODES 16 /* settings: modes x --encodings x --links */
#define MAX_REPEATS 20
#define MAX_TARGETS 8
#define MAX_COUNTS 8
#define MAX_STALE 64 /* staleness histogram bins: 0..MAX_STALE-2, and one for the rest */

/* One evaluation of a run: a dense one on the test subset, or (without --eval-every) an
 * epoch's on the full test set. */
typedef struct {
  double time;      /* training seconds (evaluations excluded) */
  double updates;   /* the ps version evaluated */
  double samples;   /* samples trained by then, all workers */
  double loss, accuracy;
} eval_point;

/* One run: a mode, a worker count, a seed. */
typedef struct {
  char dir[PATH_MAX];
  long long seed;
  int rc;
  int have_summary;
  double wall, train_s, eval_s, accuracy, updates, sps, ups;
  double mean_stale, max_stale, dropped, max_lead;
  double wire_step, wire_sample;  /* bytes on the ps's port per update, per sample (issue 27) */
  double rtt_lo, rtt_hi;          /* the link's round trips the launcher measured, ms, over
                                   * the workers (links.json; -1 without --link) */
  double late_mean, late_p90, late_max; /* how late the delay line's verdicts came, ms (-1: none) */
  double line_cpu, host_steal;          /* the line's share of a core, the host's steal (-1: none) */
  char delay_by[16];              /* how the link's delay was made: "netem", "delay line",
                                   * "none" (links.json; "" without --link) */
  /* Issue 39, behind --link (links.json's busiest_link): the busiest link's bytes per step
   * in its busier direction, measured and the bytes model's; training seconds per step; the
   * model's communication per step (its bytes at the rate plus its hops' delays,
   * launcher/links/place.h); the compute term, the same setting's seconds per step behind
   * --compute-link in the same repeat; and the model's whole step, compute plus
   * communication (-1: none; without a compute term, the communication alone). */
  double link_step, model_step, step_s, model_comm, compute_s, model_s;
  eval_point *pts;
  int npts, cap;
  int dense;                      /* pts are dense evaluations */
  double ttt[MAX_TARGETS];        /* time to each target (-1: not reached) */
  double stt[MAX_TARGETS];        /* samples trained by then, all workers (-1: not reached) */
} run_rec;

typedef struct {
  char label[96];                 /* "sync", "async", "ssp:2", "sync fp16/fp16 @100mbit" */
  char safe[96];                  /* the label as a file name: "ssp-2" */
  /* Issue 27: the setting's encodings and link (--encodings, --links; "" for the job's). */
  char push[48], pull[16], link[64];
  char mode[16];
  /* Issue 39: the ps's placement behind --link (--placements; "" for the job's) and its
   * shards (0: the job's --ps-shards). */
  char placement[16];
  int shards;
  int staleness;
  int staleness_lr;               /* +sa: the ps's --staleness-lr */
  run_rec reps[MAX_REPEATS];
  /* The ps's staleness histogram, every seed added up: gradients per bucket, whose upper
   * bounds are stale_bounds (the last bucket is above them). */
  double stale_hist[MAX_STALE];
  double stale_bounds[MAX_STALE];
  int stale_nb;
  /* Elastic runs (--workers MIN:MAX or --schedule): each run's throughput.dat and
   * workers.dat, plotted together in workers_vs_time.png. */
  int elastic;
} mode_run;

#endif
