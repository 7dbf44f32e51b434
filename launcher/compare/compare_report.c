/* What `pstrain compare` makes of its runs: statistics over the repeats, the curves' data
 * files and gnuplot plots, the table of summary.md and report.html, and the lines that say
 * how and where it ran. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "common/json_file.h"
#include "common/proc.h"
#include "launcher/compare/compare_report.h"

/* ---- statistics over repeats ---- */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

typedef struct {
  double med, lo, hi;
  int n;
} spread;

static spread spread_of(double *v, int n) {
  spread s = {0, 0, 0, n};
  if (n == 0) return s;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  s.lo = v[0];
  s.hi = v[n - 1];
  s.med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  return s;
}

/* A run figure's spread over the repeats that finished. */
static spread spread_field(const mode_run *m, int repeats, size_t offset) {
  double v[MAX_REPEATS];
  int n = 0;
  for (int k = 0; k < repeats; k++)
    if (m->reps[k].have_summary) v[n++] = *(const double *)((const char *)&m->reps[k] + offset);
  return spread_of(v, n);
}

static void fmt_spread(char *out, size_t len, spread s, const char *fmt) {
  char a[24], b[24], c[24];
  if (s.n == 0) {
    snprintf(out, len, "-");
    return;
  }
  snprintf(a, sizeof a, fmt, s.med);
  if (s.n == 1) {
    snprintf(out, len, "%s", a);
    return;
  }
  snprintf(b, sizeof b, fmt, s.lo);
  snprintf(c, sizeof c, fmt, s.hi);
  snprintf(out, len, "%s [%s, %s]", a, b, c);
}

/* ---- data files and plots ---- */

/* The median curve and its min-max band, evaluation by evaluation: the i-th evaluation of
 * every repeat is at the same step, so they line up; x is their median. Columns: time,
 * samples, updates, loss median/min/max, accuracy median/min/max. */
static int write_curve(const char *path, const mode_run *m, int repeats) {
  FILE *f = fopen(path, "w");
  if (!f) return -errno;
  int most = 0;
  for (int k = 0; k < repeats; k++)
    if (m->reps[k].npts > most) most = m->reps[k].npts;
  for (int i = 0; i < most; i++) {
    double t[MAX_REPEATS], s[MAX_REPEATS], u[MAX_REPEATS], l[MAX_REPEATS], a[MAX_REPEATS];
    int n = 0;
    for (int k = 0; k < repeats; k++) {
      const run_rec *r = &m->reps[k];
      if (i >= r->npts) continue;
      t[n] = r->pts[i].time;
      s[n] = r->pts[i].samples;
      u[n] = r->pts[i].updates;
      l[n] = r->pts[i].loss;
      a[n] = r->pts[i].accuracy;
      n++;
    }
    spread st = spread_of(t, n), ss = spread_of(s, n), su = spread_of(u, n);
    spread sl = spread_of(l, n), sa = spread_of(a, n);
    fprintf(f, "%g %g %g %g %g %g %g %g %g\n", st.med, ss.med, su.med, sl.med, sl.lo, sl.hi,
            sa.med, sa.lo, sa.hi);
  }
  return fclose(f) == 0 ? 0 : -EIO;
}

const char *const pl_cmp_plot_names[PL_CMP_CURVE_PLOTS] = {
    "loss_vs_time", "accuracy_vs_time", "loss_vs_samples", "accuracy_vs_samples",
    "loss_vs_updates", "accuracy_vs_updates"};

static int run_gnuplot(const char *out, const char *script) {
  char cmd[PATH_MAX * 3];
  snprintf(cmd, sizeof cmd, "gnuplot '%s' 2>>'%s/gnuplot.log'", script, out);
  if (system(cmd) != 0) {
    fprintf(stderr, "pstrain compare: gnuplot failed (see %s/gnuplot.log; is gnuplot installed?)\n", out);
    return -EIO;
  }
  return 0;
}

/* The six curve plots and the staleness histogram of one worker count; file names start
 * with prefix ("" or "w4-"). */
int pl_cmp_plot_count(const char *out, const char *prefix, mode_run *modes, int n, int repeats,
                      int dense, int eval_samples, int workers) {
  char path[PATH_MAX + 64];
  for (int i = 0; i < n; i++) {
    snprintf(path, sizeof path, "%s/%s%s.dat", out, prefix, modes[i].safe);
    if (write_curve(path, &modes[i], repeats) < 0) return -EIO;
  }
  /* Staleness: each mode's share of the gradients applied, per bucket of the ps's histogram
   * (every seed together); buckets nobody reached are left out. */
  snprintf(path, sizeof path, "%s/%sstaleness.dat", out, prefix);
  FILE *d = fopen(path, "w");
  if (!d) return -errno;
  int top = 0;
  for (int i = 0; i < n; i++)
    for (int b = 0; b <= modes[i].stale_nb && b < MAX_STALE; b++)
      if (modes[i].stale_hist[b] > 0 && b > top) top = b;
  fprintf(d, "staleness");
  for (int i = 0; i < n; i++) fprintf(d, " %s", modes[i].label);
  fprintf(d, "\n");
  const mode_run *ref = &modes[0];
  for (int i = 1; i < n; i++)
    if (modes[i].stale_nb > ref->stale_nb) ref = &modes[i];
  for (int b = 0; b <= top; b++) {
    /* Bucket b holds (bounds[b-1], bounds[b]]: "5-6" for (4, 6]. */
    double lo = b ? ref->stale_bounds[b - 1] + 1 : 0;
    if (b >= ref->stale_nb) fprintf(d, ">%g", ref->stale_bounds[ref->stale_nb - 1]);
    else if (lo >= ref->stale_bounds[b]) fprintf(d, "%g", ref->stale_bounds[b]);
    else fprintf(d, "%g-%g", lo, ref->stale_bounds[b]);
    for (int i = 0; i < n; i++) {
      double total = 0;
      for (int c = 0; c < MAX_STALE; c++) total += modes[i].stale_hist[c];
      fprintf(d, " %g", total > 0 ? modes[i].stale_hist[b] / total : 0);
    }
    fprintf(d, "\n");
  }
  fclose(d);

  char script[PATH_MAX + 64];
  snprintf(script, sizeof script, "%s/%splots.gp", out, prefix);
  FILE *f = fopen(script, "w");
  if (!f) return -errno;
  char what[96];
  if (dense)
    snprintf(what, sizeof what, "test subset of %d", eval_samples);
  else
    snprintf(what, sizeof what, "full test set, per epoch");
  char band[48] = "";
  if (repeats > 1) snprintf(band, sizeof band, ", median and min-max of %d seeds", repeats);
  fprintf(f, "set terminal pngcairo size 960,600 font ',11'\nset grid\nset key outside right top box\n"
             "set style fill transparent solid 0.18 noborder\n");
  static const char *const xs[3][2] = {{"1", "training seconds (evaluation excluded)"},
                                       {"2", "samples trained (all workers)"},
                                       {"3", "updates (ps versions)"}};
  for (int p = 0; p < PL_CMP_CURVE_PLOTS; p++) {
    int acc = p % 2, x = p / 2;
    fprintf(f, "set output '%s/%s%s.png'\n", out, prefix, pl_cmp_plot_names[p]);
    fprintf(f, "set title \"test %s vs %s, %d worker%s (%s%s)\"\n", acc ? "accuracy" : "loss",
            x == 0 ? "time" : x == 1 ? "samples" : "updates", workers, workers > 1 ? "s" : "",
            what, band);
    fprintf(f, "set xlabel '%s'\nset ylabel 'test %s'\n", xs[x][1], acc ? "accuracy" : "loss");
    fprintf(f, "plot ");
    int ycol = acc ? 7 : 4;
    for (int i = 0; i < n; i++) {
      if (repeats > 1)
        fprintf(f, "'%s/%s%s.dat' using %s:%d:%d with filledcurves lc %d notitle, ", out, prefix,
                modes[i].safe, xs[x][0], ycol + 1, ycol + 2, i + 1);
      fprintf(f, "'%s/%s%s.dat' using %s:%d with linespoints lc %d lw 2 pt 7 ps 0.6 title '%s'%s",
              out, prefix, modes[i].safe, xs[x][0], ycol, i + 1, modes[i].label,
              i + 1 < n ? ", " : "\n");
    }
  }
  /* Elastic runs: samples/s (left axis) and the workers training (right axis) over the ps's
   * time, the first seed of each mode: what joining and leaving did to the throughput. */
  int elastic = 0;
  for (int i = 0; i < n; i++) elastic |= modes[i].elastic;
  if (elastic) {
    fprintf(f, "set output '%s/%sworkers_vs_time.png'\n", out, prefix);
    fprintf(f, "set title \"training samples/s and workers vs time, %d worker%s at first "
               "(first seed)\"\n", workers, workers > 1 ? "s" : "");
    fprintf(f, "set xlabel 'seconds since the ps started'\nset ylabel 'samples/s (all workers)'\n"
               "set y2label 'workers training'\nset y2tics 1\nset ytics nomirror\n"
               "set yrange [0:*]\nset y2range [0:*]\n");
    fprintf(f, "plot ");
    for (int i = 0; i < n; i++) {
      if (!modes[i].elastic) continue;
      fprintf(f, "'%s/throughput.dat' using 1:2 with lines lc %d lw 2 title '%s samples/s', "
                 "'%s/workers.dat' using 1:2 axes x1y2 with steps lc %d lw 2 dt 2 title '%s "
                 "workers', ",
              modes[i].reps[0].dir, i + 1, modes[i].label, modes[i].reps[0].dir, i + 1,
              modes[i].label);
    }
    fprintf(f, "NaN notitle\n");
    fprintf(f, "unset y2label\nunset y2tics\nset ytics mirror\nset autoscale y\n");
  }
  fprintf(f, "set output '%s/%sstaleness.png'\n", out, prefix);
  fprintf(f, "set title 'staleness of the gradients applied, %d worker%s (all seeds)'\n",
          workers, workers > 1 ? "s" : "");
  fprintf(f, "set xlabel 'staleness (versions behind)'\nset ylabel 'share of gradients'\n"
             "set style data histograms\nset style histogram clustered gap 1\n"
             "set style fill solid 0.8 border -1\nset yrange [0:1]\nset key inside right top\n");
  fprintf(f, "plot ");
  for (int i = 0; i < n; i++)
    fprintf(f, "'%s' using %d:xtic(1) title columnheader(%d)%s", path, i + 2, i + 2,
            i + 1 < n ? ", " : "\n");
  fclose(f);
  return run_gnuplot(out, script);
}

/* samples/s against the worker count, per mode (median, min-max bars). */
int pl_cmp_plot_scaling(const char *out, mode_run (*grid)[MAX_MODES], const int *counts,
                        int ncounts, int n, int repeats) {
  char path[PATH_MAX + 64], script[PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/scaling.dat", out);
  FILE *d = fopen(path, "w");
  if (!d) return -errno;
  for (int i = 0; i < n; i++) {
    for (int c = 0; c < ncounts; c++) {
      spread s = spread_field(&grid[c][i], repeats, offsetof(run_rec, sps));
      fprintf(d, "%d %g %g %g\n", counts[c], s.med, s.lo, s.hi);
    }
    fprintf(d, "\n\n");
  }
  fclose(d);
  snprintf(script, sizeof script, "%s/scaling.gp", out);
  FILE *f = fopen(script, "w");
  if (!f) return -errno;
  fprintf(f, "set terminal pngcairo size 960,600 font ',11'\nset grid\nset key outside right top box\n"
             "set output '%s/scaling.png'\nset title 'training samples/s vs workers (median, min-max)'\n"
             "set xlabel 'workers'\nset ylabel 'samples/s (evaluation excluded)'\nset xtics (",
          out);
  for (int c = 0; c < ncounts; c++) fprintf(f, "%s%d", c ? ", " : "", counts[c]);
  fprintf(f, ")\nset yrange [0:*]\nplot ");
  for (int i = 0; i < n; i++)
    fprintf(f, "'%s' index %d using 1:2:3:4 with yerrorlines lc %d lw 2 pt 7 title '%s'%s", path,
            i, i + 1, grid[0][i].label, i + 1 < n ? ", " : "\n");
  fclose(f);
  return run_gnuplot(out, script);
}

/* ---- table, summary.md, report.html ---- */

void pl_cmp_plots_section(FILE *md, FILE *html, const char *out, const char *prefix,
                          const mode_run *modes, int n, int drawn) {
  if (!drawn) {
    fprintf(md, "\nPlots: none (gnuplot was not found on PATH).\n\n");
    fprintf(html, "<p>No plots: gnuplot was not found on PATH.</p>\n");
    return;
  }
  int elastic = 0;
  for (int i = 0; i < n; i++) elastic |= modes[i].elastic;
  fprintf(md, "\nPlots:");
  for (int p = 0; p < PL_CMP_CURVE_PLOTS; p++) fprintf(md, " %s%s.png,", prefix, pl_cmp_plot_names[p]);
  fprintf(md, " %sstaleness.png", prefix);
  if (elastic) fprintf(md, ", %sworkers_vs_time.png (samples/s and workers over time)", prefix);
  fprintf(md, "\n\n");
  char png[96];
  for (int p = 0; p < PL_CMP_CURVE_PLOTS; p++) {
    snprintf(png, sizeof png, "%s%s.png", prefix, pl_cmp_plot_names[p]);
    pl_cmp_html_image(html, out, png);
  }
  snprintf(png, sizeof png, "%sstaleness.png", prefix);
  pl_cmp_html_image(html, out, png);
  if (elastic) {
    snprintf(png, sizeof png, "%sworkers_vs_time.png", prefix);
    pl_cmp_html_image(html, out, png);
  }
}

typedef struct {
  int ncells;
  char cells[24][96];
} row;

static int table_header(row *h, const double *targets, int ntargets) {
  h->ncells = 0;
  snprintf(h->cells[h->ncells++], 96, "mode");
  snprintf(h->cells[h->ncells++], 96, "final test accuracy");
  for (int t = 0; t < ntargets; t++)
    snprintf(h->cells[h->ncells++], 96, "time to %.2f (s)", targets[t]);
  snprintf(h->cells[h->ncells++], 96, "samples/s");
  snprintf(h->cells[h->ncells++], 96, "updates/s");
  snprintf(h->cells[h->ncells++], 96, "training s");
  snprintf(h->cells[h->ncells++], 96, "evaluation s");
  snprintf(h->cells[h->ncells++], 96, "mean staleness");
  snprintf(h->cells[h->ncells++], 96, "max staleness");
  snprintf(h->cells[h->ncells++], 96, "max ssp lead");
  snprintf(h->cells[h->ncells++], 96, "dropped gradients");
  snprintf(h->cells[h->ncells++], 96, "wire MB per update");
  snprintf(h->cells[h->ncells++], 96, "wire bytes per sample");
  snprintf(h->cells[h->ncells++], 96, "busiest link MB per step (model)");
  snprintf(h->cells[h->ncells++], 96, "compute ms per step (measured, --compute-link)");
  snprintf(h->cells[h->ncells++], 96, "communication ms per step (model)");
  snprintf(h->cells[h->ncells++], 96, "ms per step (model: compute + communication)");
  return h->ncells;
}

/* A measured figure's spread (scaled) and the model's, "1.412 (1.411)"; "-" where not
 * measured, and no parenthesis where there is no model. */
static void model_cell(char *out, const mode_run *m, int repeats, size_t measured, size_t model,
                       double scale, const char *fmt) {
  spread a = spread_field(m, repeats, measured), b = spread_field(m, repeats, model);
  if (a.n > 0 && a.lo < 0) a.n = 0;
  if (b.n > 0 && b.lo < 0) b.n = 0;
  a.med *= scale, a.lo *= scale, a.hi *= scale;
  char mv[64] = "", bv[48] = "";
  fmt_spread(mv, sizeof mv, a, fmt);
  if (b.n > 0) snprintf(bv, sizeof bv, fmt, b.med * scale);
  snprintf(out, 96, "%s%s%s%s", mv, b.n > 0 ? " (" : "", bv, b.n > 0 ? ")" : "");
}

static void table_row(row *w, const mode_run *m, int repeats, int ntargets) {
  w->ncells = 0;
  int failed = 0;
  for (int k = 0; k < repeats; k++) failed += m->reps[k].rc != 0;
  if (failed)
    snprintf(w->cells[w->ncells++], 96, "%.60s (%d of %d failed)", m->label, failed, repeats);
  else
    snprintf(w->cells[w->ncells++], 96, "%s", m->label);
  fmt_spread(w->cells[w->ncells++], 96, spread_field(m, repeats, offsetof(run_rec, accuracy)), "%.4f");
  for (int t = 0; t < ntargets; t++) {
    double v[MAX_REPEATS];
    int n = 0, missed = 0;
    for (int k = 0; k < repeats; k++) {
      if (m->reps[k].ttt[t] >= 0) v[n++] = m->reps[k].ttt[t];
      else missed++;
    }
    if (missed == repeats)
      snprintf(w->cells[w->ncells++], 96, "not reached");
    else if (missed)
      snprintf(w->cells[w->ncells++], 96, "not reached by %d of %d", missed, repeats);
    else
      fmt_spread(w->cells[w->ncells++], 96, spread_of(v, n), "%.1f");
  }
  fmt_spread(w->cells[w->ncells++], 96, spread_field(m, repeats, offsetof(run_rec, sps)), "%.0f");
  fmt_spread(w->cells[w->ncells++], 96, spread_field(m, repeats, offsetof(run_rec, ups)), "%.0f");
  fmt_spread(w->cells[w->ncells++], 96, spread_field(m, repeats, offsetof(run_rec, train_s)), "%.1f");
  fmt_spread(w->cells[w->ncells++], 96, spread_field(m, repeats, offsetof(run_rec, eval_s)), "%.1f");
  fmt_spread(w->cells[w->ncells++], 96, spread_field(m, repeats, offsetof(run_rec, mean_stale)), "%.3f");
  fmt_spread(w->cells[w->ncells++], 96, spread_field(m, repeats, offsetof(run_rec, max_stale)), "%.0f");
  if (!strcmp(m->mode, "ssp")) {
    char lead[64];
    fmt_spread(lead, sizeof lead, spread_field(m, repeats, offsetof(run_rec, max_lead)), "%.0f");
    snprintf(w->cells[w->ncells++], 96, "%s (bound %d)", lead, m->staleness);
  } else {
    snprintf(w->cells[w->ncells++], 96, "-");
  }
  fmt_spread(w->cells[w->ncells++], 96, spread_field(m, repeats, offsetof(run_rec, dropped)), "%.0f");
  /* No ps, no ps port to count (allreduce: the summary has no wire figures): "-". */
  spread b = spread_field(m, repeats, offsetof(run_rec, wire_step));
  spread bs = spread_field(m, repeats, offsetof(run_rec, wire_sample));
  if (b.n > 0 && b.lo < 0) b.n = 0;
  if (bs.n > 0 && bs.lo < 0) bs.n = 0;
  b.med /= 1e6, b.lo /= 1e6, b.hi /= 1e6;
  fmt_spread(w->cells[w->ncells++], 96, b, "%.3f");
  fmt_spread(w->cells[w->ncells++], 96, bs, "%.0f");
  /* Issue 39, behind --link: the busiest link's bytes per step and the training time per
   * step, each with the bytes model's figure beside it (launcher/links/place.h). */
  model_cell(w->cells[w->ncells++], m, repeats, offsetof(run_rec, link_step),
             offsetof(run_rec, model_step), 1e-6, "%.3f");
  spread cs = spread_field(m, repeats, offsetof(run_rec, compute_s));
  spread cm = spread_field(m, repeats, offsetof(run_rec, model_comm));
  if (cs.n > 0 && cs.lo < 0) cs.n = 0;
  if (cm.n > 0 && cm.lo < 0) cm.n = 0;
  cs.med *= 1e3, cs.lo *= 1e3, cs.hi *= 1e3;
  cm.med *= 1e3, cm.lo *= 1e3, cm.hi *= 1e3;
  fmt_spread(w->cells[w->ncells++], 96, cs, "%.1f");
  fmt_spread(w->cells[w->ncells++], 96, cm, "%.1f");
  model_cell(w->cells[w->ncells++], m, repeats, offsetof(run_rec, step_s),
             offsetof(run_rec, model_s), 1e3, "%.1f");
}

static void md_row(FILE *f, const row *r) {
  fprintf(f, "|");
  for (int i = 0; i < r->ncells; i++) fprintf(f, " %s |", r->cells[i]);
  fprintf(f, "\n");
}

void pl_cmp_md_table(FILE *f, mode_run *modes, int n, int repeats, const double *targets,
                     int ntargets) {
  row h, w;
  table_header(&h, targets, ntargets);
  md_row(f, &h);
  fprintf(f, "|");
  for (int i = 0; i < h.ncells; i++) fprintf(f, "---|");
  fprintf(f, "\n");
  for (int i = 0; i < n; i++) {
    table_row(&w, &modes[i], repeats, ntargets);
    md_row(f, &w);
  }
}

void pl_cmp_html_text(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '<') fputs("&lt;", f);
    else if (*s == '>') fputs("&gt;", f);
    else if (*s == '&') fputs("&amp;", f);
    else if (*s == '"') fputs("&quot;", f);
    else fputc(*s, f);
  }
}

void pl_cmp_html_table(FILE *f, mode_run *modes, int n, int repeats, const double *targets,
                       int ntargets) {
  row h, w;
  table_header(&h, targets, ntargets);
  fprintf(f, "<table>\n<tr>");
  for (int i = 0; i < h.ncells; i++) {
    fprintf(f, "<th>");
    pl_cmp_html_text(f, h.cells[i]);
    fprintf(f, "</th>");
  }
  fprintf(f, "</tr>\n");
  for (int i = 0; i < n; i++) {
    table_row(&w, &modes[i], repeats, ntargets);
    fprintf(f, "<tr>");
    for (int c = 0; c < w.ncells; c++) {
      fprintf(f, "<td>");
      pl_cmp_html_text(f, w.cells[c]);
      fprintf(f, "</td>");
    }
    fprintf(f, "</tr>\n");
  }
  fprintf(f, "</table>\n");
}

/* A PNG as a data: URI, so that report.html stands alone. 0, or -1 when it is missing. */
int pl_cmp_html_image(FILE *f, const char *dir, const char *name) {
  static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  char path[PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *in = fopen(path, "rb");
  if (!in) {
    fprintf(f, "<p>(%s is missing: see gnuplot.log)</p>\n", name);
    return -1;
  }
  fprintf(f, "<figure><img alt=\"%s\" src=\"data:image/png;base64,", name);
  unsigned char b[3];
  size_t k;
  while ((k = fread(b, 1, 3, in)) > 0) {
    unsigned v = (unsigned)b[0] << 16 | (k > 1 ? (unsigned)b[1] << 8 : 0) | (k > 2 ? b[2] : 0);
    fputc(b64[v >> 18 & 63], f);
    fputc(b64[v >> 12 & 63], f);
    fputc(k > 1 ? b64[v >> 6 & 63] : '=', f);
    fputc(k > 2 ? b64[v & 63] : '=', f);
  }
  fclose(in);
  fprintf(f, "\"><figcaption>%s</figcaption></figure>\n", name);
  return 0;
}

/* The command as typed, quoted for a shell where needed. */
void pl_cmp_command_line(char *out, size_t len, int argc, char **argv) {
  size_t n = (size_t)snprintf(out, len, "pstrain");
  for (int i = 0; i < argc && n < len; i++) {
    const char *a = argv[i];
    int plain = a[0] != '\0';
    for (const char *p = a; *p; p++)
      if (!(isalnum((unsigned char)*p) || strchr("-_=.,:/+@%", *p))) plain = 0;
    if (plain) {
      n += (size_t)snprintf(out + n, len - n, " %s", a);
    } else {
      n += (size_t)snprintf(out + n, len - n, " '");
      for (const char *p = a; *p && n + 5 < len; p++) {
        if (*p == '\'') n += (size_t)snprintf(out + n, len - n, "'\\''");
        else out[n++] = *p;
      }
      if (n < len) n += (size_t)snprintf(out + n, len - n, "'");
    }
  }
  if (n >= len) out[len - 1] = '\0';
}

/* The machine, in one line: host, kernel, CPU model, cores, memory. */
void pl_cmp_machine_line(char *out, size_t len) {
  struct utsname u;
  char cpu[160] = "unknown CPU";
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[512];
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "model name", 10)) {
      const char *c = strchr(line, ':');
      if (c) {
        snprintf(cpu, sizeof cpu, "%s", c + 2);
        cpu[strcspn(cpu, "\n")] = '\0';
      }
      break;
    }
  if (f) fclose(f);
  long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
  double gib = pages > 0 && psize > 0 ? (double)pages * (double)psize / (1 << 30) : 0;
  if (uname(&u) < 0) memset(&u, 0, sizeof u);
  snprintf(out, len, "%s, Linux %s %s, %s, %d cores, %.1f GiB", u.nodename, u.release,
           u.machine, cpu, pst_proc_cores(), gib);
}

/* The 1, 5 and 15 minute load averages: the machine is often shared with other work. */
void pl_cmp_load_line(char *out, size_t len) {
  FILE *f = fopen("/proc/loadavg", "r");
  out[0] = '\0';
  double a = 0, b = 0, c = 0;
  if (f && fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3) snprintf(out, len, "%.2f %.2f %.2f", a, b, c);
  if (f) fclose(f);
}

/* ---- compare.json ---- */

/* A figure, or null where the run has none (a negative round trip or time: none). */
static void add_num(cJSON *o, const char *key, double v, int negative_is_none) {
  if (isfinite(v) && !(negative_is_none && v < 0)) cJSON_AddNumberToObject(o, key, v);
  else cJSON_AddNullToObject(o, key);
}

int pl_cmp_write_json(const char *path, mode_run (*grid)[MAX_MODES], const int *counts,
                      int ncounts, int n, int repeats, const double *targets, int ntargets) {
  cJSON *doc = cJSON_CreateObject();
  cJSON *tg = cJSON_AddArrayToObject(doc, "targets");
  for (int t = 0; t < ntargets; t++) cJSON_AddItemToArray(tg, cJSON_CreateNumber(targets[t]));
  cJSON *settings = cJSON_AddArrayToObject(doc, "settings");
  for (int c = 0; c < ncounts; c++) {
    for (int i = 0; i < n; i++) {
      const mode_run *m = &grid[c][i];
      cJSON *s = cJSON_CreateObject();
      cJSON_AddItemToArray(settings, s);
      cJSON_AddStringToObject(s, "label", m->label);
      cJSON_AddNumberToObject(s, "workers", counts[c]);
      cJSON_AddStringToObject(s, "mode", m->mode);
      /* "" for the job's own flags: the setting did not name one. */
      cJSON_AddStringToObject(s, "push", m->push);
      cJSON_AddStringToObject(s, "pull", m->pull);
      cJSON_AddStringToObject(s, "link", m->link);
      cJSON_AddStringToObject(s, "placement", m->placement);
      if (m->shards > 0) cJSON_AddNumberToObject(s, "ps_shards", m->shards);
      else cJSON_AddNullToObject(s, "ps_shards");
      cJSON *runs = cJSON_AddArrayToObject(s, "runs");
      for (int k = 0; k < repeats; k++) {
        const run_rec *r = &m->reps[k];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(runs, o);
        cJSON_AddNumberToObject(o, "seed", (double)r->seed);
        cJSON_AddNumberToObject(o, "exit_status", r->rc);
        cJSON_AddBoolToObject(o, "finished", r->rc == 0 && r->have_summary);
        add_num(o, "test_accuracy", r->have_summary ? r->accuracy : NAN, 0);
        /* Each target's training seconds and samples (all workers') to it; null: missed. */
        cJSON *tt = cJSON_AddArrayToObject(o, "time_to_target_s");
        cJSON *st = cJSON_AddArrayToObject(o, "samples_to_target");
        for (int t = 0; t < ntargets; t++) {
          int hit = r->have_summary && r->ttt[t] >= 0;
          cJSON_AddItemToArray(tt, hit ? cJSON_CreateNumber(r->ttt[t]) : cJSON_CreateNull());
          cJSON_AddItemToArray(st, hit ? cJSON_CreateNumber(r->stt[t]) : cJSON_CreateNull());
        }
        add_num(o, "training_seconds", r->have_summary ? r->train_s : NAN, 0);
        add_num(o, "samples_per_sec", r->have_summary ? r->sps : NAN, 0);
        add_num(o, "updates", r->have_summary ? r->updates : NAN, 0);
        add_num(o, "wire_bytes_per_update", r->have_summary ? r->wire_step : NAN, 1);
        add_num(o, "wire_bytes_per_sample", r->have_summary ? r->wire_sample : NAN, 1);
        add_num(o, "round_trip_ms_min", r->rtt_lo, 1);
        add_num(o, "round_trip_ms_max", r->rtt_hi, 1);
        cJSON_AddStringToObject(o, "delay_by", r->delay_by);
        /* Issue 39: the busiest link's bytes per step and the time per step, measured and
         * as the bytes model has them (null: no link, or no model for the setting). */
        add_num(o, "busiest_link_bytes_per_step", r->link_step, 1);
        add_num(o, "model_bytes_per_step", r->model_step, 1);
        add_num(o, "step_seconds", r->step_s, 1);
        add_num(o, "compute_seconds", r->compute_s, 1);
        add_num(o, "model_comm_seconds", r->model_comm, 1);
        add_num(o, "model_step_seconds", r->model_s, 1);
        add_num(o, "delay_line_late_mean_ms", r->late_mean, 1);
        add_num(o, "delay_line_late_p90_ms", r->late_p90, 1);
        add_num(o, "delay_line_late_max_ms", r->late_max, 1);
        add_num(o, "delay_line_cpu_share", r->line_cpu, 1);
        add_num(o, "host_steal_share", r->host_steal, 1);
        cJSON_AddStringToObject(o, "dir", r->dir);
      }
    }
  }
  int rc = pst_json_write_file(path, doc, 1);
  cJSON_Delete(doc);
  return rc;
}
