/* launcher/compare/sweep.c in-process: --modes, --encodings, --links and --targets into the
 * settings `pstrain compare` runs. */
#include <errno.h>
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

  double t[MAX_TARGETS];
  CHECK(pl_cmp_parse_targets("0.85,0.88,0.9", t, MAX_TARGETS) == 3 && t[1] == 0.88);
  CHECK(pl_cmp_parse_targets("0", t, MAX_TARGETS) == -EINVAL);
  CHECK(pl_cmp_parse_targets("1.5", t, MAX_TARGETS) == -EINVAL);
  CHECK(pl_cmp_parse_targets("0.5,0.6", t, 1) == -E2BIG);

  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
