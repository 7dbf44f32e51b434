/* `pstrain compare`'s shared pieces: the records of its runs (launcher/compare/compare.c runs the
 * jobs and reads their figures) and what launcher/compare/compare_report.c makes of them (statistics
 * over repeats, curves and gnuplot plots, the tables of summary.md and report.html). */
#ifndef PSTRAIN_LAUNCHER_COMPARE_H
#define PSTRAIN_LAUNCHER_COMPARE_H

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
  double late_mean, late_max;     /* how late the delay line's verdicts came, ms (-1: none) */
  char delay_by[16];              /* how the link's delay was made: "netem", "delay line",
                                   * "none" (links.json; "" without --link) */
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

/* The curve plots of each worker count, PL_CMP_CURVE_PLOTS of them: file names without
 * the worker-count prefix and ".png". */
#define PL_CMP_CURVE_PLOTS 6
extern const char *const pl_cmp_plot_names[PL_CMP_CURVE_PLOTS];
/* Plots of one worker count's modes (files under out named from prefix); 0 or -1. */
int pl_cmp_plot_count(const char *out, const char *prefix, mode_run *modes, int n, int repeats,
                      int dense, int eval_samples, int workers);
/* Samples/s and accuracy against the worker counts (scaling.png); 0 or -1. */
int pl_cmp_plot_scaling(const char *out, mode_run (*grid)[MAX_MODES], const int *counts,
                        int ncounts, int n, int repeats);
/* The table of medians and [min, max] over the repeats, as Markdown and as HTML. */
void pl_cmp_md_table(FILE *f, mode_run *modes, int n, int repeats, const double *targets,
                     int ntargets);
void pl_cmp_html_table(FILE *f, mode_run *modes, int n, int repeats, const double *targets,
                       int ntargets);
/* <out>/compare.json: every setting's runs and their figures (times to the targets, final
 * accuracy, samples/s, wire bytes, measured round trips) for programs to read (gpu-check's
 * slow-links check). 0 or a negative errno. */
int pl_cmp_write_json(const char *path, mode_run (*grid)[MAX_MODES], const int *counts,
                      int ncounts, int n, int repeats, const double *targets, int ntargets);
/* One worker count's plots in summary.md (their names) and report.html (inlined), or, where
 * they were not drawn (no gnuplot), a line saying so in each. */
void pl_cmp_plots_section(FILE *md, FILE *html, const char *out, const char *prefix,
                          const mode_run *modes, int n, int drawn);
/* An image inlined as a data: URI (report.html stands alone); text escaped for HTML. */
int pl_cmp_html_image(FILE *f, const char *dir, const char *name);
void pl_cmp_html_text(FILE *f, const char *s);
/* The command as run, the machine, and its load average, for the report's header. */
void pl_cmp_command_line(char *out, size_t len, int argc, char **argv);
void pl_cmp_machine_line(char *out, size_t len);
void pl_cmp_load_line(char *out, size_t len);

#endif
