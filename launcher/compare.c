/* `pstrain compare`: the same job under several update modes, one after the other, from the
 * same seed, data and model; then plots (gnuplot) and a table of what happened. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "launcher/commands.h"

#define MAX_MODES 8

typedef struct {
  char label[32];       /* "sync", "async", "ssp:2" */
  char mode[16];
  int staleness;
  char dir[PATH_MAX];
  pl_run_result res;
  int rc;
  /* Read back from the run's files. */
  double wall, accuracy, updates, mean_stale, max_stale, dropped, max_lead;
  double time_to_target; /* -1: never reached */
  double first_eval_time, updates_per_sec;
} mode_run;

static int parse_modes(const char *s, mode_run *runs, int max) {
  int n = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (n == max) return -E2BIG;
    mode_run *r = &runs[n];
    memset(r, 0, sizeof *r);
    snprintf(r->label, sizeof r->label, "%s", tok);
    if (!strcmp(tok, "sync") || !strcmp(tok, "async")) {
      snprintf(r->mode, sizeof r->mode, "%s", tok);
    } else if (!strncmp(tok, "ssp", 3) && (tok[3] == '\0' || tok[3] == ':')) {
      snprintf(r->mode, sizeof r->mode, "ssp");
      char *end;
      r->staleness = tok[3] ? (int)strtol(tok + 4, &end, 10) : 2;
      if (tok[3] && (end == tok + 4 || *end || r->staleness < 0)) return -EINVAL;
    } else {
      return -EINVAL;
    }
    n++;
  }
  return n;
}

/* Reads a run's metrics into gnuplot data files and its summary into r. */
static void digest(mode_run *r, double target) {
  char path[PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/metrics.jsonl", r->dir);
  FILE *in = fopen(path, "r");
  snprintf(path, sizeof path, "%s/train.dat", r->dir);
  FILE *tr = fopen(path, "w");
  snprintf(path, sizeof path, "%s/eval.dat", r->dir);
  FILE *ev = fopen(path, "w");
  r->time_to_target = -1;
  char line[4096];
  while (in && fgets(line, sizeof line, in)) {
    if (strstr(line, "\"event\":\"train\"") && tr) {
      /* One row per worker report: the plots show every worker's recent loss. */
      fprintf(tr, "%g %g %g %g\n", pl_json_num(line, "time"), pl_json_num(line, "version"),
              pl_json_num(line, "loss"), pl_json_num(line, "staleness"));
    } else if (strstr(line, "\"event\":\"eval\"") && ev) {
      double t = pl_json_num(line, "time"), acc = pl_json_num(line, "accuracy");
      fprintf(ev, "%g %g %g\n", t, acc, pl_json_num(line, "version"));
      if (r->time_to_target < 0 && acc >= target) r->time_to_target = t;
    } else if (strstr(line, "\"event\":\"summary\"")) {
      r->wall = pl_json_num(line, "wall_seconds");
      r->accuracy = pl_json_num(line, "test_accuracy");
      r->updates = pl_json_num(line, "updates");
      r->mean_stale = pl_json_num(line, "mean_staleness");
      r->max_stale = pl_json_num(line, "max_staleness");
      r->dropped = pl_json_num(line, "dropped_gradients");
      r->max_lead = pl_json_num(line, "max_lead");
      r->updates_per_sec = r->wall > 0 ? r->updates / r->wall : 0;
    }
  }
  if (in) fclose(in);
  if (tr) fclose(tr);
  if (ev) fclose(ev);
}

static int plot(const char *out, mode_run *runs, int n) {
  char script[PATH_MAX + 32];
  snprintf(script, sizeof script, "%s/plots.gp", out);
  FILE *f = fopen(script, "w");
  if (!f) return -errno;
  fprintf(f, "set terminal pngcairo size 900,560 font ',10'\nset grid\nset key top right\n");
  const char *plots[3][5] = {
      {"loss_vs_time.png", "train loss vs wall time", "seconds", "train loss", "train.dat\" using 1:3"},
      {"accuracy_vs_time.png", "test accuracy vs wall time", "seconds", "test accuracy", "eval.dat\" using 1:2"},
      {"loss_vs_updates.png", "train loss vs global updates", "updates (ps versions)", "train loss", "train.dat\" using 2:3"},
  };
  for (int p = 0; p < 3; p++) {
    fprintf(f, "set output '%s/%s'\nset title '%s'\nset xlabel '%s'\nset ylabel '%s'\nplot ", out,
            plots[p][0], plots[p][1], plots[p][2], plots[p][3]);
    for (int i = 0; i < n; i++)
      fprintf(f, "%s\"%s/%s with linespoints pt 7 ps 0.4 title '%s'", i ? ", " : "", runs[i].dir,
              plots[p][4], runs[i].label);
    fprintf(f, "\n");
  }
  fclose(f);
  char cmd[PATH_MAX * 3];
  snprintf(cmd, sizeof cmd, "gnuplot '%s' 2>'%s/gnuplot.log'", script, out);
  int rc = system(cmd);
  if (rc != 0) {
    fprintf(stderr, "pstrain compare: gnuplot failed (see %s/gnuplot.log; is gnuplot installed?)\n", out);
    return -EIO;
  }
  return 0;
}

static void table(FILE *f, mode_run *runs, int n, double target, const char *title) {
  fprintf(f, "%s\n\n", title);
  fprintf(f, "| mode | final test accuracy | wall s | time to %.2f (s) | updates | updates/s | mean staleness | max staleness | max ssp lead | dropped gradients |\n",
          target);
  fprintf(f, "|---|---|---|---|---|---|---|---|---|---|\n");
  for (int i = 0; i < n; i++) {
    mode_run *r = &runs[i];
    char ttt[32];
    if (r->time_to_target >= 0) snprintf(ttt, sizeof ttt, "%.1f", r->time_to_target);
    else snprintf(ttt, sizeof ttt, "not reached");
    char lead[32];
    if (!strcmp(r->mode, "ssp")) snprintf(lead, sizeof lead, "%.0f (bound %d)", r->max_lead, r->staleness);
    else snprintf(lead, sizeof lead, "-");
    fprintf(f, "| %s%s | %.4f | %.1f | %s | %.0f | %.0f | %.3f | %.0f | %s | %.0f |\n", r->label,
            r->rc ? " (failed)" : "", r->accuracy, r->wall, ttt, r->updates, r->updates_per_sec,
            r->mean_stale, r->max_stale, lead, r->dropped);
  }
}

int pl_cmd_compare(int argc, char **argv) {
  const char *modes = "sync,async,ssp:2", *out = "pstrain-compare", *target_arg = "0.85";
  /* Our own flags first; everything else is a run flag shared with `local`. */
  char **rest = calloc((size_t)argc + 1, sizeof *rest);
  if (!rest) {
    fprintf(stderr, "pstrain compare: out of memory\n");
    return 1;
  }
  int nrest = 0;
  rest[nrest++] = argv[0];
  static const char *const names[] = {"--modes", "--out", "--target-accuracy"};
  const char **const values[] = {&modes, &out, &target_arg};
  if (pl_split_flags("compare", argc, argv, names, values, 3, rest, &nrest) != 0) {
    free(rest);
    return 2;
  }
  char *end = NULL;
  double target = strtod(target_arg, &end);
  if (end == target_arg || *end) target = -1; /* refused below */
  pl_run_options base;
  static pst_model model;
  int rc = pl_parse_run_flags("compare", nrest, rest, &base, &model,
                              "Also: --modes LIST (default sync,async,ssp:2; ssp:S sets the bound),\n"
                              "--out DIR (default ./pstrain-compare), --target-accuracy X (0.85).\n"
                              "Runs each mode from the same seed, data and model, then writes\n"
                              "metrics, PNG plots (gnuplot) and DIR/summary.md.\n");
  free(rest);
  if (rc == 1) return 0;
  if (rc) return rc;
  if (!(target > 0 && target <= 1)) {
    fprintf(stderr, "pstrain compare: --target-accuracy must be in (0, 1]\n");
    return 2;
  }
  static mode_run runs[MAX_MODES];
  int n = parse_modes(modes, runs, MAX_MODES);
  if (n <= 0) {
    fprintf(stderr, "pstrain compare: --modes wants a list of sync, async, ssp or ssp:S\n");
    return 2;
  }
  if (mkdir(out, 0755) < 0 && errno != EEXIST) {
    fprintf(stderr, "pstrain compare: cannot create %s: %s\n", out, strerror(errno));
    return 1;
  }
  char abs_out[PATH_MAX];
  if (!realpath(out, abs_out)) snprintf(abs_out, sizeof abs_out, "%s", out);
  printf("pstrain compare: %d modes, %d workers, model %s, %d epochs, batch %d per worker; output in %s\n",
         n, base.workers, base.model, base.epochs, base.batch_size, abs_out);
  int failures = 0;
  for (int i = 0; i < n; i++) {
    mode_run *r = &runs[i];
    pl_run_options o = base;
    o.mode = r->mode;
    o.staleness = r->staleness;
    char label[48];
    snprintf(label, sizeof label, "[%.31s] ", r->label);
    o.label = label;
    char safe[sizeof r->label];
    memcpy(safe, r->label, sizeof safe);
    for (char *p = safe; *p; p++)
      if (*p == ':') *p = '-';
    char want[PATH_MAX + 40];
    snprintf(want, sizeof want, "%s/%s", abs_out, safe);
    if (pl_make_run_dir(want, r->dir, sizeof r->dir) < 0) return 1;
    o.run_dir = r->dir;
    o.metrics_path = NULL;
    o.summary_path = NULL;
    /* TensorBoard overlays the runs of sub-directories: one per mode, named as the folders. */
    char tb[PATH_MAX + 48];
    if (base.tensorboard_dir) {
      snprintf(tb, sizeof tb, "%s/%s", base.tensorboard_dir, safe);
      if (mkdir(base.tensorboard_dir, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "pstrain compare: cannot create %s: %s\n", base.tensorboard_dir,
                strerror(errno));
        return 1;
      }
      o.tensorboard_dir = tb;
    }
    printf("[%s] running\n", r->label);
    fflush(stdout);
    r->rc = pl_run_local(&o, &r->res);
    if (r->rc == 130) return 130;
    if (r->rc) failures++;
    digest(r, target);
  }
  plot(abs_out, runs, n);
  char md[PATH_MAX + 32];
  snprintf(md, sizeof md, "%s/summary.md", abs_out);
  char title[256];
  snprintf(title, sizeof title, "## pstrain compare: %d workers, model %s, %d epochs, batch %d per worker",
           base.workers, base.model, base.epochs, base.batch_size);
  FILE *f = fopen(md, "w");
  if (f) {
    table(f, runs, n, target, title);
    fprintf(f, "\nPlots: loss_vs_time.png, accuracy_vs_time.png, loss_vs_updates.png. Per-run metrics "
               "(JSON lines) and logs are in the per-mode folders.\n");
    fclose(f);
  }
  printf("\n");
  table(stdout, runs, n, target, title);
  printf("\nplots and table: %s/{loss_vs_time,accuracy_vs_time,loss_vs_updates}.png, %s\n", abs_out, md);
  return failures ? 1 : 0;
}
