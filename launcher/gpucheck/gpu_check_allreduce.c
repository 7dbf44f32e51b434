/* gpu-check's all-reduce checks (gpu_check_allreduce.h):
 *  1. NCCL's sums over 2 ranks, each on a GPU of its own (collective_check under mpirun:
 *     broadcast, blocking and started sums whose float results are exact, a gather);
 *  2. a 2-rank all-reduce job on GPU ranks, summing with NCCL where there are two GPUs and
 *     with Open MPI through host memory where there is one (two ranks sharing it): every
 *     rank's weights equal, the loss finite, the accuracy above the presets' bound.
 * Neither can run without Open MPI's mpirun (the bundle does not carry it: a GPU host needs
 * Debian's openmpi-bin, or the build tree's programs), and the first needs two GPUs: then
 * the check is recorded as not run, with the reason, never as passed. */
#include "launcher/gpucheck/gpu_check_allreduce.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/json_file.h"
#include "launcher/common/helpers.h"
#include "launcher/gpucheck/gpu_check_tools.h"

static int count_devices(const pl_gc_ctx *g) {
  int n = 0;
  for (const char *p = g->run.devices; (p = strstr(p, "cuda:")); p++)
    if (p == g->run.devices || p[-1] == '\n') n++;
  return n;
}

static void check_nccl_sums(pl_gc_ctx *g, const char *mpirun) {
  pl_gc_check *c = pl_gc_begin(g, "all-reduce: NCCL's sums on 2 GPUs");
  char bin[PATH_MAX];
  if (pl_find_binary("collective_check", "collective", bin, sizeof bin) < 0) {
    pl_gc_end(c, PL_GC_SKIP, "collective_check not found in ../collective/ beside this program "
              "(run gpu-check from the build tree)");
    return;
  }
  snprintf(c->log, sizeof c->log, "%s/allreduce-nccl-sums.log", g->run.out);
  char *argv[] = {(char *)mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2",
                  bin, "auto", "nccl", NULL};
  int timed_out;
  int rc = pl_gc_run_child(argv, NULL, c->log, 120, &timed_out);
  char line[1024], first[700] = "";
  int right = 0;
  FILE *f = fopen(c->log, "r");
  while (f && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    if (strstr(line, "NCCL") && strstr(line, "; 0 wrong")) right++;
    if (!first[0] && (strstr(line, "NCCL refused") || strstr(line, "wrong")))
      snprintf(first, sizeof first, "%.690s", line);
  }
  if (f) fclose(f);
  pl_gc_figure(c, "ranks_right", right);
  if (rc == 0 && !timed_out && right == 2) {
    pl_gc_end(c, PL_GC_PASS, "%s", first);
  } else {
    char why[600];
    pl_gc_why_failed(rc, timed_out, 120, c->log, "", why, sizeof why);
    pl_gc_end(c, PL_GC_FAIL, "%s%s%s", why, first[0] ? "; " : "", first);
  }
}

static void check_job(pl_gc_ctx *g, int gpus) {
  pl_gc_check *c = pl_gc_begin(g, "all-reduce: 2 GPU ranks, %s",
                               gpus >= 2 ? "NCCL on 2 GPUs" : "Open MPI, one GPU shared");
  char dir[PATH_MAX + 128];
  pl_gc_check_dir(g, c->name, dir, sizeof dir);
  static pl_argv a;
  pl_gc_tool_argv(g, c, dir, "launcher.log", "local", &a);
  pl_argv_add(&a, "--mode=allreduce");
  pl_argv_add(&a, "--model=mlp");
  pl_argv_add(&a, "--epochs=1");
  pl_argv_add(&a, "--batch-size=%d", g->sz.batch);
  pl_argv_add(&a, "--report-every=%d", g->sz.report_every);
  pl_argv_add(&a, "--data-dir=%s", g->data);
  pl_argv_add(&a, "--run-dir=%s", dir);
  if (gpus >= 2) {
    pl_argv_add(&a, "--gpus=0,1");
    pl_argv_add(&a, "--collective=nccl");
  } else {
    pl_argv_add(&a, "--gpus=%d", g->device_index);
    pl_argv_add(&a, "--workers-per-gpu=2");
    pl_argv_add(&a, "--collective=mpi");
  }
  if (pl_gc_run_train(c, a.argv, g->sz.train_s) < 0) return;
  char path[PATH_MAX + 192];
  snprintf(path, sizeof path, "%s/summary.json", dir);
  cJSON *sum = pst_json_read_file(path);
  double acc = pl_gc_num(sum, "test_accuracy"), rate = pl_gc_num(sum, "samples_per_sec");
  const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(sum, "rank_checksums");
  const char *by = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(sum, "allreduce"));
  int n = cJSON_GetArraySize(ranks), equal = n == 2;
  const char *first = cJSON_GetStringValue(cJSON_GetArrayItem(ranks, 0));
  for (int i = 1; i < n; i++) {
    const char *other = cJSON_GetStringValue(cJSON_GetArrayItem(ranks, i));
    equal &= first && other && !strcmp(first, other);
  }
  int nccl = by && strstr(by, "NCCL") != NULL;
  pl_gc_figure(c, "test_accuracy", acc);
  pl_gc_figure(c, "samples_per_sec", rate);
  char numbers[400];
  snprintf(numbers, sizeof numbers, "test accuracy %.4f, %.0f samples/s; summed by %.250s", acc,
           rate, by ? by : "?");
  if (!equal)
    pl_gc_end(c, PL_GC_FAIL, "the ranks' weights differ or are missing: %s", numbers);
  else if ((gpus >= 2) != nccl)
    pl_gc_end(c, PL_GC_FAIL, "not summed by %s: %s", gpus >= 2 ? "NCCL" : "Open MPI", numbers);
  else if (!isfinite(acc) || !(acc >= g->sz.min_accuracy))
    pl_gc_end(c, PL_GC_FAIL, "test accuracy below %.2f: %s", g->sz.min_accuracy, numbers);
  else
    pl_gc_end(c, PL_GC_PASS, "%s", numbers);
  cJSON_Delete(sum);
}

void pl_gc_check_allreduce(pl_gc_ctx *g) {
  if (g->run.dry_run) return; /* the CPU's all-reduce is the test suite's */
  char mpirun[PATH_MAX];
  int gpus = count_devices(g);
  if (pl_find_program("mpirun", NULL, mpirun, sizeof mpirun) < 0) {
    pl_gc_check *c = pl_gc_begin(g, "all-reduce on GPUs");
    pl_gc_end(c, PL_GC_SKIP, "no mpirun on this host (Debian: openmpi-bin); %d GPU%s here", gpus,
              gpus == 1 ? "" : "s");
    return;
  }
  if (gpus >= 2) {
    check_nccl_sums(g, mpirun);
  } else {
    pl_gc_check *c = pl_gc_begin(g, "all-reduce: NCCL's sums on 2 GPUs");
    pl_gc_end(c, PL_GC_SKIP, "one GPU here: NCCL takes a GPU of its own for each rank");
  }
  check_job(g, gpus);
}
