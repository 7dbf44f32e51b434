/* bench_compute: training-step throughput of the CPU backend on random data.
 *
 *   bench_compute [--models mlp,cnn,cnn2] [--batch 64] [--seconds 2] [--threads 1]
 *                 [--json FILE]
 *
 * For each model: seeded random inputs and labels, a warm-up, then as many full training
 * steps (forward, loss, backward, gradients to the host) as fit in the time given.
 * Prints "model params samples/s ms/step" and, with --json, writes the same figures. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "kernels/backend.h"
#include "kernels/blas_setup.h"
#include "model/model.h"
#include "kernels/net.h"

#define MAX_MODELS 16
#define DATA_BATCHES 8 /* distinct batches cycled through, so inputs are not always hot */

typedef struct {
  char name[128];
  size_t params;
  double samples_per_s, ms_per_step;
  long steps;
} result;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static uint64_t next_rand(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int usage(void) {
  fprintf(stderr, "usage: bench_compute [--models mlp,cnn,cnn2] [--batch N] [--seconds S] "
                  "[--threads T] [--json FILE]\n");
  return 2;
}

static int bench_one(pst_backend *be, const char *name, int batch, double seconds, result *r) {
  pst_model m;
  char err[256];
  int rc = pst_model_load(name, &m, err, sizeof err);
  if (rc != 0) {
    fprintf(stderr, "bench_compute: %s\n", err);
    return rc;
  }
  size_t in = (size_t)m.input_size;
  float *params = malloc(m.n_params * sizeof(float));
  float *grad = malloc(m.n_params * sizeof(float));
  float *x = malloc(DATA_BATCHES * batch * in * sizeof(float));
  int32_t *labels = malloc(DATA_BATCHES * batch * sizeof(int32_t));
  pst_net *net = NULL;
  if (params == NULL || grad == NULL || x == NULL || labels == NULL) {
    rc = -ENOMEM;
    goto out;
  }
  uint64_t s = 12345;
  for (size_t i = 0; i < DATA_BATCHES * batch * in; i++)
    x[i] = (float)(next_rand(&s) >> 40) * (1.0f / 16777216.0f);
  for (int i = 0; i < DATA_BATCHES * batch; i++) labels[i] = (int32_t)(next_rand(&s) % m.classes);
  pst_model_init_params(&m, 1, params);
  if ((rc = pst_net_create(&m, be, batch, &net)) != 0 ||
      (rc = pst_net_load_params(net, params)) != 0) {
    fprintf(stderr, "bench_compute: %s: cannot set up the net: %s\n", name, strerror(-rc));
    goto out;
  }

  double loss;
  int correct;
  long steps = 0;
  double t0 = now_s(), warm = seconds * 0.1 < 0.5 ? seconds * 0.1 : 0.5;
  while (now_s() - t0 < warm || steps < 3) {
    int k = (int)(steps++ % DATA_BATCHES);
    if ((rc = pst_net_train_step(net, x + (size_t)k * batch * in, labels + (size_t)k * batch,
                                 batch, 1.0f / batch, grad, &loss, &correct)) != 0)
      goto fail_step;
  }
  steps = 0;
  t0 = now_s();
  double t1;
  do {
    int k = (int)(steps++ % DATA_BATCHES);
    if ((rc = pst_net_train_step(net, x + (size_t)k * batch * in, labels + (size_t)k * batch,
                                 batch, 1.0f / batch, grad, &loss, &correct)) != 0)
      goto fail_step;
    t1 = now_s();
  } while (t1 - t0 < seconds);
  snprintf(r->name, sizeof r->name, "%s", name);
  r->params = m.n_params;
  r->steps = steps;
  r->ms_per_step = (t1 - t0) * 1e3 / steps;
  r->samples_per_s = steps * (double)batch / (t1 - t0);
  goto out;
fail_step:
  fprintf(stderr, "bench_compute: %s: training step failed: %s\n", name, strerror(-rc));
out:
  pst_net_destroy(net);
  free(params), free(grad), free(x), free(labels);
  return rc;
}

int main(int argc, char **argv) {
  char models_arg[512] = "mlp,cnn,cnn2";
  const char *json = NULL;
  int batch = 64, threads = 1;
  double seconds = 2.0;
  pst_log_init("bench_compute", PST_LOG_WARN);
  /* The kernels a worker would use on this machine (kernels/blas_setup.h), said on stderr. */
  char blas_note[320];
  if (pst_blas_choose(blas_note, sizeof blas_note) == PST_BLAS_REEXEC) {
    fprintf(stderr, "bench_compute: %s\n", blas_note);
    execv("/proc/self/exe", argv);
    fprintf(stderr, "bench_compute: cannot run again: %s\n", strerror(errno));
  } else {
    fprintf(stderr, "bench_compute: %s\n", blas_note);
  }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (i + 1 >= argc) return usage();
    const char *v = argv[++i];
    char *end = NULL;
    if (strcmp(a, "--models") == 0) {
      if (strlen(v) >= sizeof models_arg) return usage();
      strcpy(models_arg, v);
    } else if (strcmp(a, "--batch") == 0) {
      batch = (int)strtol(v, &end, 10);
      if (*end || batch < 1 || batch > 65536) return usage();
    } else if (strcmp(a, "--seconds") == 0) {
      seconds = strtod(v, &end);
      if (*end || !(seconds > 0 && seconds <= 3600)) return usage();
    } else if (strcmp(a, "--threads") == 0) {
      threads = (int)strtol(v, &end, 10);
      if (*end || threads < 1 || threads > 256) return usage();
    } else if (strcmp(a, "--json") == 0) {
      json = v;
    } else {
      return usage();
    }
  }

  pst_backend *be = NULL;
  int rc = pst_cpu_backend_create(threads, &be);
  if (rc != 0) {
    fprintf(stderr, "bench_compute: cannot create the CPU backend: %s\n", strerror(-rc));
    return 1;
  }
  result res[MAX_MODELS];
  int n = 0, failed = 0;
  printf("cpu backend, batch %d, %d thread%s, %.1f s per model\n", batch, threads,
         threads == 1 ? "" : "s", seconds);
  printf("%-8s %10s %12s %10s\n", "model", "params", "samples/s", "ms/step");
  for (char *save = NULL, *name = strtok_r(models_arg, ",", &save); name != NULL && n < MAX_MODELS;
       name = strtok_r(NULL, ",", &save)) {
    if (bench_one(be, name, batch, seconds, &res[n]) != 0) {
      failed = 1;
      continue;
    }
    printf("%-8s %10zu %12.0f %10.3f\n", res[n].name, res[n].params, res[n].samples_per_s,
           res[n].ms_per_step);
    fflush(stdout);
    n++;
  }
  be->destroy(be);

  if (json != NULL) {
    FILE *f = fopen(json, "w");
    if (f == NULL) {
      fprintf(stderr, "bench_compute: %s: %s\n", json, strerror(errno));
      return 1;
    }
    fprintf(f, "{\"backend\": \"cpu\", \"batch\": %d, \"threads\": %d, \"seconds\": %g, "
               "\"models\": [", batch, threads, seconds);
    for (int i = 0; i < n; i++)
      fprintf(f, "%s\n  {\"model\": \"%s\", \"params\": %zu, \"samples_per_s\": %.1f, "
                 "\"ms_per_step\": %.4f, \"steps\": %ld}",
              i ? "," : "", res[i].name, res[i].params, res[i].samples_per_s, res[i].ms_per_step,
              res[i].steps);
    fprintf(f, "\n]}\n");
    if (fclose(f) != 0) {
      fprintf(stderr, "bench_compute: %s: write failed\n", json);
      return 1;
    }
  }
  return failed ? 1 : 0;
}
