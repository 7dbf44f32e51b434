/* launcher/compare/sweep.c in-process: --modes, --encodings, --links and --targets into the
 * settings `pstrain compare` runs. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "common/check.h"
#include "launcher/compare/sweep.h"

static mode_run g_runs[MAX_MODES];

int main(void) {
  int n = pl_cmp_parse_modes("sync,async,ssp:3,async+sa", g_runs, MAX_MODES);
  CHECK(n == 4);
  CHECK(!strcmp(g_runs[0].mode, "sync") && !strcmp(g_runs[1].mode, "async"));
  CHECK(!strcmp(g_runs[2].mode, "ssp") && g_runs[2].staleness == 3);
  CHECK(!strcmp(g_runs[2].safe, "ssp-3") && !strcmp(g_runs[2].label, "ssp:3"));
  CHECK(!strcmp(g_runs[3].mode, "async") && g_runs[3].staleness_lr == 1);
  CHECK(pl_cmp_parse_modes("sync+sa", g_runs, MAX_MODES) == -EINVAL);
  CHECK(pl_cmp_parse_modes("allreduce+sa", g_runs, MAX_MODES) == -EINVAL);
  CHECK(pl_cmp_parse_modes("sync,allreduce", g_runs, MAX_MODES) == 2);
  CHECK(!strcmp(g_runs[1].mode, "allreduce"));
  CHECK(pl_cmp_parse_modes("bsp", g_runs, MAX_MODES) == -EINVAL);
  CHECK(pl_cmp_parse_modes("sync,async", g_runs, 1) == -E2BIG);

  char err[400];
  n = pl_cmp_parse_modes("sync,async", g_runs, MAX_MODES);
  n = pl_cmp_expand_settings(g_runs, n, MAX_MODES, "fp16,topk:0.01/fp16", "100mbit,1ms", err,
                             sizeof err);
  CHECK(n == 4);
  CHECK(!strcmp(g_runs[0].label, "sync fp16 @100mbit,1ms"));
  CHECK(!strcmp(g_runs[0].push, "fp16") && g_runs[0].pull[0] == '\0');
  CHECK(!strcmp(g_runs[1].push, "topk:0.01") && !strcmp(g_runs[1].pull, "fp16"));
  CHECK(!strcmp(g_runs[3].mode, "async") && !strcmp(g_runs[3].link, "100mbit,1ms"));
  CHECK(strchr(g_runs[1].safe, ' ') == NULL && strchr(g_runs[1].safe, '/') == NULL);
  n = pl_cmp_parse_modes("sync", g_runs, MAX_MODES);
  CHECK(pl_cmp_expand_settings(g_runs, n, MAX_MODES, "zip", NULL, err, sizeof err) == -1);
  CHECK(strncmp(err, "--encodings: 'zip'", 18) == 0);
  CHECK(pl_cmp_expand_settings(g_runs, n, MAX_MODES, NULL, "fast", err, sizeof err) == -1);
  CHECK(strncmp(err, "--links: ", 9) == 0);
  n = pl_cmp_parse_modes("sync", g_runs, MAX_MODES);
  CHECK(pl_cmp_expand_settings(g_runs, n, MAX_MODES, NULL, NULL, err, sizeof err) == 1);
  CHECK(!strcmp(g_runs[0].label, "sync"));

  /* --compute-link: sync and allreduce behind 1gbit,1ms take their compute term repeat by
   * repeat from the same setting behind 10gbit; another placement's is not theirs. */
  n = pl_cmp_parse_modes("sync,allreduce", g_runs, MAX_MODES);
  n = pl_cmp_expand_placements(g_runs, n, MAX_MODES, "separate:1,separate:4", err, sizeof err);
  CHECK(n == 3);
  n = pl_cmp_expand_settings(g_runs, n, MAX_MODES, NULL, "1gbit,1ms;10gbit", err, sizeof err);
  CHECK(n == 6);
  for (int i = 0; i < n; i++)
    for (int k = 0; k < 2; k++) {
      run_rec *r = &g_runs[i].reps[k];
      int fast = !strcmp(g_runs[i].link, "10gbit");
      /* Each setting's own figures: i + 1 tens of ms slow, i + 1 ms fast, repeat 2 +0.5 ms. */
      r->step_s = (fast ? 1e-3 : 10e-3) * (i + 1) + 0.5e-3 * k;
      r->model_comm = fast ? 0.1e-3 : 20e-3;
      r->compute_s = -1;
      r->model_s = r->model_comm;
    }
  CHECK(pl_cmp_add_compute(g_runs, n, 2, "100mbit", err, sizeof err) == -1);
  CHECK(strstr(err, "--compute-link '100mbit'") != NULL);
  CHECK(pl_cmp_add_compute(g_runs, n, 2, "10gbit", err, sizeof err) == 6);
  for (int i = 0; i < n; i++) {
    if (!strcmp(g_runs[i].link, "10gbit")) {
      CHECK(g_runs[i].reps[0].compute_s == -1); /* the term's own runs have none */
      continue;
    }
    int j = -1; /* its twin behind 10gbit */
    for (int c = 0; c < n; c++)
      if (!strcmp(g_runs[c].link, "10gbit") && !strcmp(g_runs[c].mode, g_runs[i].mode) &&
          g_runs[c].shards == g_runs[i].shards)
        j = c;
    CHECK(j >= 0);
    for (int k = 0; k < 2; k++) {
      double want = 1e-3 * (j + 1) + 0.5e-3 * k;
      CHECK(fabs(g_runs[i].reps[k].compute_s - want) < 1e-12);
      CHECK(fabs(g_runs[i].reps[k].model_s - (want + 20e-3)) < 1e-12);
    }
  }

  double t[MAX_TARGETS];
  CHECK(pl_cmp_parse_targets("0.85,0.88,0.9", t, MAX_TARGETS) == 3 && t[1] == 0.88);
  CHECK(pl_cmp_parse_targets("0", t, MAX_TARGETS) == -EINVAL);
  CHECK(pl_cmp_parse_targets("1.5", t, MAX_TARGETS) == -EINVAL);
  CHECK(pl_cmp_parse_targets("0.5,0.6", t, 1) == -E2BIG);

  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
