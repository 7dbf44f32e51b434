/* The pipeline's speed (issue 40): training steps of one model on CPU stages, in samples a
 * second, for
 *   - 2 stages on 2 virtual devices (one core and one thread each), M micro-batches,
 *   - the same 2 stages with M = 1 (no pipelining: one stage computes at a time),
 *   - one stage with two threads (the reference: both cores on one device).
 * Usage: bench_pipeline [--model cnn2] [--batch 128] [--micro 4] [--seconds 4]
 * Prints one line per setting and the ratio of the first to the second. */
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

static pst_model model;

/* Samples a second over `seconds` of steps (after two to warm up), or -1. */
static double run(pst_pipe_options o, int batch, double seconds, char *note, size_t notelen) {
  char err[512];
  pst_pipe *p;
  if (pst_pipe_create(&model, &o, batch, &p, note, notelen, err, sizeof err) != 0) {
    fprintf(stderr, "bench_pipeline: %s\n", err);
    return -1;
  }
  size_t n = model.n_params;
  float *params = malloc(n * sizeof(float)), *grad = malloc(n * sizeof(float));
  float *x = malloc((size_t)batch * model.input_size * sizeof(float));
  int32_t *y = malloc((size_t)batch * sizeof(int32_t));
  pst_model_init_params(&model, 1, params);
  for (size_t i = 0; i < (size_t)batch * model.input_size; i++) x[i] = (float)(i % 251) / 251.0f;
  for (int i = 0; i < batch; i++) y[i] = i % model.classes;
  int rc = pst_pipe_load_params(p, params);
  double t0 = 0, rate = -1;
  long steps = 0;
  for (int warm = 0; rc == 0; warm++) {
    if (warm == 2) t0 = pst_now();
    rc = pst_pipe_train_step(p, x, y, batch, 1.0f / (float)batch, grad, NULL, NULL);
    if (warm >= 2) steps++;
    if (warm >= 2 && pst_now() - t0 >= seconds) break;
  }
  if (rc == 0) rate = (double)steps * batch / (pst_now() - t0);
  else fprintf(stderr, "bench_pipeline: %s\n", pst_pipe_error(p));
  pst_pipe_destroy(p);
  free(params);
  free(grad);
  free(x);
  free(y);
  return rate;
}

int main(int argc, char **argv) {
  const char *name = "cnn2";
  int batch = 128, micro = 4;
  double seconds = 4.0;
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
    else if (strcmp(argv[i], "--seconds") == 0) seconds = atof(argv[i + 1]);
    else {
      fprintf(stderr, "usage: bench_pipeline [--model M] [--batch B] [--micro M] [--seconds S]\n");
      return 2;
    }
  }
  char err[256], cpu[256], note[512];
  if (pst_model_load(name, &model, err, sizeof err) != 0) {
    fprintf(stderr, "bench_pipeline: %s\n", err);
    return 2;
  }
  pst_cpu_describe(cpu, sizeof cpu);
  printf("%s, batch %d; %s\n", name, batch, cpu);
  pst_pipe_options two = {.device = "cpu", .threads = 1, .stages = 2, .virtual_devices = 2,
                          .micro_batches = micro};
  double piped = run(two, batch, seconds, note, sizeof note);
  printf("2 stages, 1 thread each, M=%d: %8.1f samples/s  [%s]\n", micro, piped, note);
  two.micro_batches = 1;
  double plain = run(two, batch, seconds, note, sizeof note);
  printf("2 stages, 1 thread each, M=1: %8.1f samples/s  [%s]\n", plain, note);
  pst_pipe_options one = {.device = "cpu", .threads = 2};
  double ref = run(one, batch, seconds, note, sizeof note);
  printf("1 stage, 2 threads:           %8.1f samples/s\n", ref);
  if (piped < 0 || plain < 0 || ref < 0) return 1;
  printf("M=%d over M=1: %.2fx; over one stage with two threads: %.2fx\n", micro, piped / plain,
         piped / ref);
  return 0;
}
