/* The pipeline's speed (issue 40): training steps of one model on CPU stages, in samples a
 * second, for
 *   - 2 stages on 2 virtual devices (one core and one thread each), M micro-batches,
 *   - the same 2 stages (the same cut) with M = 1: one stage computes at a time,
 *   - one stage with two threads (the reference: both cores on one device),
 *   - the 2 stages with M micro-batches on plain CPU devices: the same threads, not pinned.
 * All run on the cut the balance chose for M micro-batches. They take turns, a second
 * each after a warm-up step, for --rounds rounds, and each one's rate is the median of its
 * rounds: on a shared machine the load drifts, and turns expose all of them to the same
 * drift. For the 2-stage settings it also prints where a step's time went: each stage's
 * passes, and the share of them its thread had a core (pst_pipe_stage_seconds).
 * Usage: bench_pipeline [--model cnn2] [--batch 128] [--micro 4] [--rounds 7] */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "kernels/blas_setup.h"
#include "kernels/pipeline/pipeline.h"
#include "model/model.h"

#define SETTINGS 4
#define MAX_ROUNDS 64

static pst_model model;
static float *params, *grad, *x;
static int32_t *y;

static pst_pipe *make(pst_pipe_options o, int batch, char *note, size_t notelen) {
  char err[512];
  pst_pipe *p = NULL;
  if (pst_pipe_create(&model, &o, batch, &p, note, notelen, err, sizeof err) != 0) {
    fprintf(stderr, "bench_pipeline: %s\n", err);
    return NULL;
  }
  if (pst_pipe_load_params(p, params) != 0) {
    pst_pipe_destroy(p);
    return NULL;
  }
  return p;
}

/* Samples a second of steps for about a second, or -1; *steps_out the steps taken. */
static double turn(pst_pipe *p, int batch, long *steps_out) {
  double t0 = pst_now(), t;
  long steps = 0;
  do {
    if (pst_pipe_train_step(p, x, y, batch, 1.0f / (float)batch, grad, NULL, NULL) != 0) {
      fprintf(stderr, "bench_pipeline: %s\n", pst_pipe_error(p));
      return -1;
    }
    steps++;
  } while ((t = pst_now() - t0) < 1.0);
  *steps_out = steps;
  return (double)steps * batch / t;
}

static int cmp(const void *a, const void *b) {
  double u = *(const double *)a, v = *(const double *)b;
  return u < v ? -1 : u > v;
}

int main(int argc, char **argv) {
  const char *name = "cnn2";
  int batch = 128, micro = 4, rounds = 7;
  pst_log_init("bench_pipeline", PST_LOG_WARN);
  char blas[320];
  if (pst_blas_choose(blas, sizeof blas) == PST_BLAS_REEXEC) {
    execv("/proc/self/exe", argv);
    fprintf(stderr, "bench_pipeline: cannot run again: %s\n", strerror(errno));
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--model") == 0) name = argv[i + 1];
    else if (strcmp(argv[i], "--batch") == 0) batch = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--micro") == 0) micro = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--rounds") == 0) rounds = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "usage: bench_pipeline [--model M] [--batch B] [--micro M] [--rounds R]\n");
      return 2;
    }
  }
  if (batch < 1 || micro < 1 || rounds < 1 || rounds > MAX_ROUNDS) {
    fprintf(stderr, "bench_pipeline: --batch and --micro from 1, --rounds 1 to %d\n", MAX_ROUNDS);
    return 2;
  }
  char err[256], cpu[256], note[SETTINGS][512], place[256], loose[256];
  if (pst_model_load(name, &model, err, sizeof err) != 0) {
    fprintf(stderr, "bench_pipeline: %s\n", err);
    return 2;
  }
  size_t n = model.n_params;
  params = malloc(n * sizeof(float));
  grad = malloc(n * sizeof(float));
  x = malloc((size_t)batch * model.input_size * sizeof(float));
  y = malloc((size_t)batch * sizeof(int32_t));
  pst_model_init_params(&model, 1, params);
  for (size_t i = 0; i < (size_t)batch * model.input_size; i++) x[i] = (float)(i % 251) / 251.0f;
  for (int i = 0; i < batch; i++) y[i] = i % model.classes;
  pst_cpu_describe(cpu, sizeof cpu);
  printf("%s, batch %d, %d rounds; %s\n", name, batch, rounds, cpu);

  /* The balance chooses the cut once; every setting then runs on it (--place). */
  pst_pipe_options two = {.device = "cpu", .threads = 1, .stages = 2, .virtual_devices = 2,
                          .micro_batches = micro};
  pst_pipe *first = make(two, batch, note[0], sizeof note[0]);
  if (first == NULL) return 1;
  size_t used = 0, used_loose = 0;
  for (int s = 0; s < 2; s++) {
    int lo, hi;
    const char *dev;
    pst_pipe_stage_layers(first, s, &lo, &hi, &dev);
    used += (size_t)snprintf(place + used, sizeof place - used, "%s%d-%d=%s", s ? "," : "", lo,
                             hi - 1, dev);
    used_loose += (size_t)snprintf(loose + used_loose, sizeof loose - used_loose, "%s%d-%d=cpu",
                                   s ? "," : "", lo, hi - 1);
  }
  pst_pipe_destroy(first);
  pst_pipe_options opts[SETTINGS] = {
      {.device = "cpu", .threads = 1, .place = place, .virtual_devices = 2, .micro_batches = micro},
      {.device = "cpu", .threads = 1, .place = place, .virtual_devices = 2},
      {.device = "cpu", .threads = 2},
      /* The same cut and M on devices that are not virtual: threads the kernel places. */
      {.device = "cpu", .threads = 1, .place = loose, .micro_batches = micro},
  };
  /* Each turn makes its pipeline anew: OpenBLAS's thread count is process-wide, and the
   * last backend made sets it (one thread for the stages, two for the reference). */
  static double rate[SETTINGS][MAX_ROUNDS];
  /* The 2-stage settings' stages: ms a step in their passes (wall), and the share of that
   * their threads had a core (CPU clock over wall), per round. */
  static double busy[SETTINGS][2][MAX_ROUNDS], oncpu[SETTINGS][2][MAX_ROUNDS];
  static double step_ms[SETTINGS][MAX_ROUNDS], cpu_ms[SETTINGS][2][MAX_ROUNDS];
  for (int r = 0; r < rounds; r++)
    for (int s = 0; s < SETTINGS; s++) {
      pst_pipe *p = make(opts[s], batch, note[s], sizeof note[s]);
      if (p == NULL) return 1;
      int ok = pst_pipe_train_step(p, x, y, batch, 1.0f / (float)batch, grad, NULL, NULL) == 0;
      double b0[2] = {0, 0}, c0[2] = {0, 0};
      int staged = s != 2; /* the 2-stage settings */
      for (int g = 0; g < 2 && staged; g++) pst_pipe_stage_seconds(p, g, &b0[g], &c0[g]);
      long steps = 0;
      rate[s][r] = ok ? turn(p, batch, &steps) : -1;
      for (int g = 0; g < 2 && staged && steps > 0; g++) {
        double b, c;
        pst_pipe_stage_seconds(p, g, &b, &c);
        busy[s][g][r] = 1e3 * (b - b0[g]) / (double)steps;
        oncpu[s][g][r] = b > b0[g] ? (c - c0[g]) / (b - b0[g]) : 0.0;
        cpu_ms[s][g][r] = 1e3 * (c - c0[g]) / (double)steps;
      }
      if (staged && rate[s][r] > 0) step_ms[s][r] = 1e3 * batch / rate[s][r];
      pst_pipe_destroy(p);
      if (rate[s][r] < 0) return 1;
    }
  double med[SETTINGS];
  for (int s = 0; s < SETTINGS; s++) {
    qsort(rate[s], (size_t)rounds, sizeof(double), cmp);
    med[s] = rate[s][rounds / 2];
  }
  printf("2 stages, 1 thread each, M=%d: %8.1f samples/s (rounds %.1f-%.1f)  [%s]\n", micro,
         med[0], rate[0][0], rate[0][rounds - 1], note[0]);
  printf("2 stages, 1 thread each, M=1: %8.1f samples/s (rounds %.1f-%.1f)  [--place %s]\n",
         med[1], rate[1][0], rate[1][rounds - 1], place);
  printf("1 stage, 2 threads:           %8.1f samples/s (rounds %.1f-%.1f)\n", med[2],
         rate[2][0], rate[2][rounds - 1]);
  printf("2 stages unpinned, M=%d:       %8.1f samples/s (rounds %.1f-%.1f)  [--place %s]\n",
         micro, med[3], rate[3][0], rate[3][rounds - 1], loose);
  /* Where a 2-stage step's time goes: each stage's passes (the busier one bounds the step),
   * and how much of that its thread had its core. */
  for (int s = 0; s < SETTINGS; s++) {
    if (s == 2) continue;
    double m[5];
    double *v[5] = {busy[s][0], busy[s][1], oncpu[s][0], oncpu[s][1], step_ms[s]};
    for (int i = 0; i < 5; i++) {
      qsort(v[i], (size_t)rounds, sizeof(double), cmp);
      m[i] = v[i][rounds / 2];
    }
    printf("  %s M=%d, medians: a step %.1f ms; stage 0 computes %.1f ms of it (on a core %.0f%% "
           "of that), stage 1 %.1f ms (%.0f%%)\n", s == 3 ? "unpinned" : "pinned", s == 1 ? 1 : micro,
           m[4], m[0], 100 * m[2], m[1], 100 * m[3]);
  }
  /* What the CPU clocks say a quiet machine would give: M = 1 runs its stages one after the
   * other (the sum of their CPU time); with M micro-batches the busier stage works the whole
   * step and the other adds one micro-batch's share, the fill and the drain (for equal
   * stages (M + 1) / M of one, GPipe's bubble for 2 stages). An estimate, not a
   * measurement: it takes each stage's CPU time as its time on a core of its own. */
  double c[2][2];
  for (int k = 0; k < 2; k++)
    for (int g = 0; g < 2; g++) {
      qsort(cpu_ms[k][g], (size_t)rounds, sizeof(double), cmp);
      c[k][g] = cpu_ms[k][g][rounds / 2];
    }
  double busier = c[0][0] > c[0][1] ? c[0][0] : c[0][1];
  double other = c[0][0] > c[0][1] ? c[0][1] : c[0][0];
  printf("  CPU clocks, medians: M=1 stages %.1f + %.1f ms a step, M=%d %.1f and %.1f ms: on "
         "cores of their own M=%d would be %.2fx M=1 (an estimate)\n", c[1][0], c[1][1], micro,
         c[0][0], c[0][1], micro,
         busier > 0 ? (c[1][0] + c[1][1]) / (busier + other / micro) : 0.0);
  /* Other jobs only ever slow a turn down: the best rounds are the least disturbed. */
  printf("M=%d over M=1: %.2fx by the medians, %.2fx by the best rounds; over one stage with "
         "two threads: %.2fx, %.2fx\n", micro, med[0] / med[1],
         rate[0][rounds - 1] / rate[1][rounds - 1], med[0] / med[2],
         rate[0][rounds - 1] / rate[2][rounds - 1]);
  free(params);
  free(grad);
  free(x);
  free(y);
  return 0;
}
