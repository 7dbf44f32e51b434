/* `pstrain compare`: the same job under several update modes, each run --repeats times with
 * different seeds (the same seeds for every mode), for one or several worker counts; then
 * plots (gnuplot), a table of medians and ranges, summary.md and a self-contained
 * report.html, all under one run directory. */
#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/clock.h"
#include "common/config.h"
#include "common/json_file.h"
#include "common/proc.h"
#include "launcher/commands.h"
#include "launcher/common/helpers.h"
#include "launcher/run/local.h"
#include "launcher/run/run.h"
#include "launcher/run/run_elastic.h"
#include "launcher/run/run_files.h"
#include "launcher/run/schedule.h"
#include "common/codec.h"
#include "launcher/compare/compare_report.h"
#include "launcher/compare/digest.h"
#include "launcher/compare/records.h"
#include "launcher/compare/sweep.h"
#include "launcher/links/link.h"




int pl_cmd_compare(int argc, char **argv) {
  const char *modes_arg = "sync,async,ssp:2", *out_arg = "", *target_arg = NULL;
  const char *targets_arg = "0.85,0.88,0.90", *repeats_arg = "1", *workers_arg = NULL;
  /* Our own flags first; everything else is a run flag shared with `local`. --workers is
   * ours too, as it takes a list here. */
  char **rest = calloc((size_t)argc + 2, sizeof *rest);
  char **args = calloc((size_t)argc + 1, sizeof *args);
  if (!rest || !args) {
    fprintf(stderr, "pstrain compare: out of memory\n");
    free(rest);
    free(args);
    return 1;
  }
  int nargs = 0;
  for (int i = 0; i < argc; i++) {
    if (!strncmp(argv[i], "--workers=", 10)) workers_arg = argv[i] + 10;
    else args[nargs++] = argv[i];
  }
  int nrest = 0;
  rest[nrest++] = argv[0];
  const char *encodings_arg = NULL, *links_arg = NULL, *placements_arg = NULL;
  const char *compute_link_arg = NULL;
  static const char *const names[] = {"--modes", "--out", "--target-accuracy", "--targets",
                                      "--repeats", "--workers", "--encodings", "--links",
                                      "--placements", "--compute-link"};
  const char **const values[] = {&modes_arg, &out_arg, &target_arg, &targets_arg, &repeats_arg,
                                 &workers_arg, &encodings_arg, &links_arg, &placements_arg,
                                 &compute_link_arg};
  if (pl_split_flags("compare", nargs, args, names, values, 10, rest, &nrest) != 0) {
    free(rest);
    free(args);
    return 2;
  }
  int counts[MAX_COUNTS];
  /* --workers MIN:MAX: one elastic count, passed on to every run as it is (pl_parse_run_flags
   * checks it); MIN names its table and plots. */
  int range_min = 0, range_max = 0;
  if (workers_arg && strchr(workers_arg, ':') &&
      pl_parse_workers_range(workers_arg, &range_min, &range_max) < 0) {
    fprintf(stderr, "pstrain compare: --workers: '%.40s' is not N, a list like 2,4,8 or MIN:MAX "
                    "with 1 <= MIN <= MAX <= %d\n", workers_arg, PL_MAX_WORKERS);
    free(rest);
    free(args);
    return 2;
  }
  int ncounts = range_min ? 1
                : workers_arg ? pl_parse_int_list(workers_arg, counts, MAX_COUNTS, 1, PL_MAX_WORKERS)
                              : 0;
  if (range_min) counts[0] = range_min;
  if (workers_arg && ncounts <= 0) {
    fprintf(stderr, "pstrain compare: --workers wants a count or a list like 2,4,8 (up to %d, "
                    "each in 1..%d)\n", MAX_COUNTS, PL_MAX_WORKERS);
    free(rest);
    free(args);
    return 2;
  }
  /* The run flags are checked against the smallest count: --slow-worker I must fit them all. */
  char wflag[32];
  if (range_min) {
    snprintf(wflag, sizeof wflag, "--workers=%d:%d", range_min, range_max);
    rest[nrest++] = wflag;
  } else if (workers_arg) {
    int smallest = counts[0];
    for (int c = 1; c < ncounts; c++)
      if (counts[c] < smallest) smallest = counts[c];
    snprintf(wflag, sizeof wflag, "--workers=%d", smallest);
    rest[nrest++] = wflag;
  }
  pl_run_options base;
  static pst_model model;
  int rc = pl_parse_run_flags("compare", nrest, rest, &base, &model,
                              "Also: --modes LIST (default sync,async,ssp:2; ssp:S sets the bound; allreduce: no ps; async+sa,\n"
                              "ssp:S+sa: the staleness-aware learning rate, --staleness-lr),\n"
                              "--workers N or a list (2,4,8: one table per count and a scaling plot),\n"
                              "or MIN:MAX (an elastic job, with --schedule: see `pstrain local --help`;\n"
                              "its plots add samples/s and the workers over time),\n"
                              "--repeats R (seeds --seed .. --seed+R-1 for every mode, default 1),\n"
                              "--targets LIST (default 0.85,0.88,0.90; --target-accuracy X: one target),\n"
                              "--encodings LIST (PUSH[/PULL] each, e.g. none,fp16/fp16,topk:0.01/fp16: every\n"
                              "mode once per encoding), --links LIST (RATE[,DELAY[,LOSS]] each, separated by\n"
                              "';': every mode once per --link), --placements LIST (one-host, colocated,\n"
                              "separate, each with :K for K ps shards, e.g. separate:1,separate:4,colocated:\n"
                              "every ps mode once per placement behind --link; allreduce once),\n"
                              "--compute-link LINK (one of --links, fast and without delay, e.g. 10gbit:\n"
                              "each setting's time per step there is the compute term of the step-time\n"
                              "model of the same setting behind the other links),\n"
                              "--out DIR (default: a new /tmp/pstrain-run-* directory).\n"
                              "Use --eval-every STEPS for accuracy curves (a test subset of --eval-samples).\n"
                              "Writes per-run metrics and logs, PNG plots (gnuplot), summary.md and a\n"
                              "self-contained report.html, all under DIR; nothing in the current directory.\n");
  free(rest);
  free(args);
  if (rc == 1) return 0;
  if (rc) return rc;
  if (!workers_arg) { /* one count: --workers's default, the config file's, or --gpus's */
    int w = pl_job_workers(&base);
    counts[0] = w > 0 ? w : base.workers;
    ncounts = 1;
  }
  int64_t repeats = 0;
  if (pst_parse_int(repeats_arg, 1, MAX_REPEATS, &repeats) < 0) {
    fprintf(stderr, "pstrain compare: --repeats must be in 1..%d\n", MAX_REPEATS);
    return 2;
  }
  if (base.seed > INT64_MAX - repeats) {
    fprintf(stderr, "pstrain compare: --seed + --repeats must stay below 2^63\n");
    return 2;
  }
  double targets[MAX_TARGETS];
  int ntargets = pl_cmp_parse_targets(target_arg ? target_arg : targets_arg, targets, MAX_TARGETS);
  if (ntargets <= 0) {
    fprintf(stderr, "pstrain compare: --targets wants up to %d accuracies in (0, 1], like 0.85,0.9\n",
            MAX_TARGETS);
    return 2;
  }
  static mode_run grid[MAX_COUNTS][MAX_MODES];
  int n = pl_cmp_parse_modes(modes_arg, grid[0], MAX_MODES);
  if (n <= 0) {
    fprintf(stderr, "pstrain compare: --modes wants a list of sync, async, ssp or ssp:S, async and ssp with +sa for the staleness-aware learning rate, or allreduce (no ps; up to %d)\n",
            MAX_MODES);
    return 2;
  }
  if (placements_arg) {
    char serr[400];
    n = pl_cmp_expand_placements(grid[0], n, MAX_MODES, placements_arg, serr, sizeof serr);
    if (n < 0) {
      fprintf(stderr, "pstrain compare: %s\n", serr);
      return 2;
    }
  }
  if (encodings_arg || links_arg) {
    char serr[400];
    n = pl_cmp_expand_settings(grid[0], n, MAX_MODES, encodings_arg, links_arg, serr, sizeof serr);
    if (n < 0) {
      fprintf(stderr, "pstrain compare: %s\n", serr);
      return 2;
    }
  }
  if (compute_link_arg) { /* checked before anything runs; applied once every run is in */
    char serr[400];
    if (pl_cmp_add_compute(grid[0], n, 0, compute_link_arg, serr, sizeof serr) < 0) {
      fprintf(stderr, "pstrain compare: %s\n", serr);
      return 2;
    }
  }
  for (int c = 1; c < ncounts; c++) memcpy(grid[c], grid[0], sizeof grid[0]);
  if (base.tensorboard_dir && mkdir(base.tensorboard_dir, 0755) < 0 && errno != EEXIST) {
    fprintf(stderr, "pstrain compare: cannot create %s: %s\n", base.tensorboard_dir, strerror(errno));
    return 1;
  }
  char out[PATH_MAX];
  if (pl_make_run_dir(out_arg, out, sizeof out) < 0) return 1;
  char abs_out[PATH_MAX];
  if (!realpath(out, abs_out)) snprintf(abs_out, sizeof abs_out, "%s", out);
  if (!workers_arg) snprintf(wflag, sizeof wflag, "%d", counts[0]);
  char command[4096], machine[512], load_start[128], load_end[128], date[64];
  pl_cmp_command_line(command, sizeof command, argc, argv);
  pl_cmp_machine_line(machine, sizeof machine);
  pl_cmp_load_line(load_start, sizeof load_start);
  time_t now = time(NULL);
  strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
  printf("pstrain compare: %d mode%s x %ld seed%s, workers %s, model %s, %d epochs, batch %d per "
         "worker%s\nrun directory: %s\n",
         n, n > 1 ? "s" : "", repeats, repeats > 1 ? "s" : "", workers_arg ? workers_arg : wflag,
         base.model, base.epochs, base.batch_size,
         base.eval_every > 0 ? "" : " (no --eval-every: one evaluation per epoch)", abs_out);
  fflush(stdout);
  double t_start = pst_now();
  int failures = 0;
  /* Repeat k of every mode runs before repeat k+1 of any, so that a machine whose load
   * changes over the session weighs on every mode alike. */
  for (int c = 0; c < ncounts; c++) {
    for (long k = 0; k < repeats; k++) {
      for (int i = 0; i < n; i++) {
        mode_run *m = &grid[c][i];
        run_rec *r = &m->reps[k];
        pl_run_options o = base;
        o.workers = counts[c];
        o.mode = m->mode;
        o.staleness = m->staleness;
        o.staleness_lr = m->staleness_lr || base.staleness_lr;
        if (m->push[0]) o.push_compress = strcmp(m->push, "none") ? m->push : NULL;
        if (m->pull[0]) o.pull_compress = strcmp(m->pull, "none") ? m->pull : NULL;
        if (m->link[0]) o.link = m->link;
        /* A placement's shards: its own :K, else one per worker where colocated, else the
         * job's --ps-shards. */
        if (m->placement[0]) {
          o.ps_placement = m->placement;
          if (m->shards > 0) o.ps_shards = m->shards;
          else if (!strcmp(m->placement, "colocated")) o.ps_shards = counts[c];
        }
        o.seed = base.seed + k;
        r->seed = o.seed;
        /* The run's folder (and TensorBoard run): the mode, then wN- in a sweep and -rK with
         * repeats, so that a plain comparison keeps one folder per mode. */
        char name[96], label[128], rep[24] = "";
        if (repeats > 1) snprintf(rep, sizeof rep, "-r%ld", k + 1);
        if (ncounts > 1) snprintf(name, sizeof name, "w%d-%s%s", counts[c], m->safe, rep);
        else snprintf(name, sizeof name, "%s%s", m->safe, rep);
        snprintf(label, sizeof label, "[%s] ", name);
        o.label = label;
        char want[PATH_MAX + 100];
        snprintf(want, sizeof want, "%s/%s", abs_out, name);
        if (pl_make_run_dir(want, r->dir, sizeof r->dir) < 0) return 1;
        o.run_dir = r->dir;
        o.metrics_path = NULL;
        o.summary_path = NULL;
        /* TensorBoard overlays the runs of sub-directories: one per run, named as the folders. */
        char tb[PATH_MAX + 100];
        if (base.tensorboard_dir) {
          snprintf(tb, sizeof tb, "%s/%s", base.tensorboard_dir, name);
          o.tensorboard_dir = tb;
        }
        printf("[%s] running (seed %lld)\n", name, o.seed);
        fflush(stdout);
        pl_run_result res;
        r->rc = pl_run_local(&o, &res);
        if (r->rc == 130) return 130;
        if (r->rc) failures++;
        pl_cmp_digest(m, r, &o, targets, ntargets);
      }
    }
  }
  double elapsed = pst_now() - t_start;
  if (compute_link_arg) {
    char serr[400];
    for (int c = 0; c < ncounts; c++)
      pl_cmp_add_compute(grid[c], n, (int)repeats, compute_link_arg, serr, sizeof serr);
  }
  pl_cmp_load_line(load_end, sizeof load_end);

  /* Plots, where gnuplot is installed. Every figure is also in summary.md, report.html and
   * compare.json, so a host without it (a GPU host running the bundle) still gets its
   * comparison, with one line saying why there are no plots. */
  int plots_ok = 1;
  char gnuplot[PATH_MAX];
  int have_gnuplot = pl_find_program("gnuplot", NULL, gnuplot, sizeof gnuplot) == 0;
  if (!have_gnuplot)
    fprintf(stderr, "pstrain compare: gnuplot not found on PATH: no plots (./pstrain installs "
                    "gnuplot-nox)\n");
  for (int c = 0; c < ncounts && have_gnuplot; c++) {
    char prefix[32] = "";
    if (ncounts > 1) snprintf(prefix, sizeof prefix, "w%d-", counts[c]);
    int dense = 0;
    for (int i = 0; i < n; i++) dense |= grid[c][i].reps[0].dense;
    if (pl_cmp_plot_count(abs_out, prefix, grid[c], n, (int)repeats, dense,
                   base.eval_samples > 0 ? base.eval_samples : 2000, counts[c]) < 0)
      plots_ok = 0;
  }
  if (have_gnuplot && ncounts > 1 && pl_cmp_plot_scaling(abs_out, grid, counts, ncounts, n, (int)repeats) < 0) plots_ok = 0;

  /* summary.md and report.html. */
  char md[PATH_MAX + 32], html[PATH_MAX + 32];
  snprintf(md, sizeof md, "%s/summary.md", abs_out);
  snprintf(html, sizeof html, "%s/report.html", abs_out);
  char cond[512] = "";
  size_t cl = 0;
  for (int i = 0; i < PL_MAX_WORKERS && cl < sizeof cond - 40; i++) {
    if (base.slow_factor[i] > 1)
      cl += (size_t)snprintf(cond + cl, sizeof cond - cl, "%sworker %d %gx slower", cl ? ", " : "",
                             i, base.slow_factor[i]);
    if (base.delay_ms[i] > 0)
      cl += (size_t)snprintf(cond + cl, sizeof cond - cl, "%sworker %d's pulls and pushes %g ms late",
                             cl ? ", " : "", i, base.delay_ms[i]);
  }
  char about[1024];
  snprintf(about, sizeof about,
           "model %s, %d epochs, batch %d per worker, %s lr %g%s%s, seeds %lld..%lld; %s; %s",
           base.model, base.epochs, base.batch_size, base.optimizer, base.lr,
           base.lr_schedule ? " " : "", base.lr_schedule ? base.lr_schedule : "", base.seed,
           base.seed + repeats - 1, cond[0] ? cond : "no slowed worker",
           base.eval_every > 0 ? "dense evaluation" : "one evaluation per epoch");
  char evaldesc[256];
  if (base.eval_every > 0)
    snprintf(evaldesc, sizeof evaldesc,
             "Curves and times to a target: evaluations of a fixed test subset of %d samples "
             "each time the ps reached another %d steps' worth of samples (%d x workers "
             "batches); final accuracy: the full test set after the last epoch.",
             base.eval_samples > 0 ? base.eval_samples : 2000, base.eval_every, base.eval_every);
  else
    snprintf(evaldesc, sizeof evaldesc,
             "Curves and times to a target: the full test set after each epoch (add --eval-every "
             "for denser curves).");
  FILE *f = fopen(md, "w");
  FILE *h = fopen(html, "w");
  if (!f || !h) {
    fprintf(stderr, "pstrain compare: cannot write %s: %s\n", f ? html : md, strerror(errno));
    if (f) fclose(f);
    if (h) fclose(h);
    return 1;
  }
  fprintf(f, "# pstrain compare\n\n- command: `%s`\n- machine: %s\n- date: %s; %.0f s in all; load "
             "average at start %s, at end %s\n- %s\n\n%s Times are training seconds: the "
             "workers' evaluation time is left out. Each cell is the median over the seeds, "
             "with [min, max] when there are several.\n\n",
          command, machine, date, elapsed, load_start, load_end, about, evaldesc);
  fprintf(h, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>pstrain compare</title>\n"
             "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
             "table{border-collapse:collapse;font-size:0.9em;margin:1em 0}th,td{border:1px solid #bbb;"
             "padding:0.3em 0.5em;text-align:right}th{background:#eee}td:first-child{text-align:left}"
             "code{background:#f4f4f4;padding:0.1em 0.3em}img{max-width:100%%}figure{margin:1em 0}"
             "</style></head><body>\n<h1>pstrain compare</h1>\n<ul><li>command: <code>");
  pl_cmp_html_text(h, command);
  fprintf(h, "</code></li>\n<li>machine: ");
  pl_cmp_html_text(h, machine);
  fprintf(h, "</li>\n<li>date: %s; %.0f s in all; load average at start %s, at end %s</li>\n<li>",
          date, elapsed, load_start, load_end);
  pl_cmp_html_text(h, about);
  fprintf(h, "</li></ul>\n<p>");
  pl_cmp_html_text(h, evaldesc);
  fprintf(h, " Times are training seconds: the workers' evaluation time is left out. Each cell is "
             "the median over the seeds, with [min, max] when there are several.</p>\n");
  printf("\n");
  for (int c = 0; c < ncounts; c++) {
    char prefix[32] = "";
    if (ncounts > 1) snprintf(prefix, sizeof prefix, "w%d-", counts[c]);
    char title[128];
    snprintf(title, sizeof title, "%d worker%s", counts[c], counts[c] > 1 ? "s" : "");
    fprintf(f, "## %s\n\n", title);
    pl_cmp_md_table(f, grid[c], n, (int)repeats, targets, ntargets);
    fprintf(h, "<h2>%s</h2>\n", title);
    pl_cmp_html_table(h, grid[c], n, (int)repeats, targets, ntargets);
    pl_cmp_plots_section(f, h, abs_out, prefix, grid[c], n, have_gnuplot);
    printf("## %s\n\n", title);
    pl_cmp_md_table(stdout, grid[c], n, (int)repeats, targets, ntargets);
    printf("\n");
  }
  if (ncounts > 1 && have_gnuplot) {
    fprintf(f, "## Scaling\n\nscaling.png: training samples/s against the worker count.\n\n");
    fprintf(h, "<h2>Scaling</h2>\n");
    pl_cmp_html_image(h, abs_out, "scaling.png");
  }
  fprintf(f, "Per-run metrics (JSON lines), summaries and logs are in the per-run folders "
             "(MODE, with -rK for seed --seed + K - 1 and a wN- prefix in a sweep).\n");
  fprintf(h, "<p>Per-run metrics (JSON lines), summaries and logs are in the per-run folders "
             "beside this file.</p>\n</body></html>\n");
  int werr = ferror(f) || ferror(h);
  werr |= fclose(f) != 0;
  werr |= fclose(h) != 0;
  if (werr) {
    fprintf(stderr, "pstrain compare: cannot write %s or %s\n", md, html);
    return 1;
  }
  char json[PATH_MAX + 32];
  snprintf(json, sizeof json, "%s/compare.json", abs_out);
  int jrc = pl_cmp_write_json(json, grid, counts, ncounts, n, (int)repeats, targets, ntargets);
  if (jrc < 0) fprintf(stderr, "pstrain compare: cannot write %s: %s\n", json, strerror(-jrc));
  for (int c = 0; c < ncounts; c++)
    for (int i = 0; i < n; i++)
      for (long k = 0; k < repeats; k++) free(grid[c][i].reps[k].pts);
  printf("report: %s\nsummary: %s\nrun directory: %s (%.0f s)\n", html, md, abs_out, elapsed);
  if (jrc < 0) return 1;
  if (!plots_ok) return 1;
  return failures ? 1 : 0;
}
