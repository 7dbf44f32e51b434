/* `pstrain compare`'s report (launcher/compare/compare_report.c): plots, tables, compare.json. */
#ifndef PSTRAIN_LAUNCHER_COMPARE_REPORT_H
#define PSTRAIN_LAUNCHER_COMPARE_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include "launcher/compare/records.h"

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
