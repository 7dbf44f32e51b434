/* Prints what one optimizer pass costs, in ms and GB/s of memory traffic, for SGD, momentum
 * and Adam, with normal state and with half of the state denormal, and with denormals
 * flushed (as pstrain's threads run, common/fpenv.h) and not:
 *
 *   bench_optim [--params N] [--reps R] [--threads T] [--cold] [--json FILE]
 *
 * --cold: before each timed pass, write a buffer larger than any CPU cache (EVICT_BYTES),
 * so that the pass reads weights, state and gradient from memory, as the ps's pass does in
 * a training run, where a step's socket copies and the other processes' work come between
 * two passes. Without it the state was just planted and is hot in cache: the loop's own
 * speed, not the memory's.
 * With --threads T the pass is split over T threads as the ps splits it (ps/train/par.h). Each row
 * also gives the CPU time a pass took over every thread (the mean): what it costs the ps's
 * cores besides its time.
 * The pass is the ps's: out of place (front weights to back weights, ps/state/store.h), over the
 * whole vector in one range. The state is planted again before every timed pass, so that a
 * pass that flushes denormals does not make the next one look cheap. "Denormal" means what a
 * long run leaves behind: half of the parameters (every other one) have a zero gradient and
 * state (momentum buffer, Adam m and v) of 1e-39, which each step shrinks further.
 *
 * Bytes per parameter: SGD reads w and g and writes w (12), momentum also reads and writes
 * its buffer (20), Adam reads and writes m and v (28). The figure is the median of R passes. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/config.h"
#include "common/fpenv.h"
#include "common/json_file.h"
#include "ps/train/optim.h"
#include "ps/train/par.h"

#define MAX_REPS 1000
#define EVICT_BYTES ((size_t)256 << 20)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* This process's CPU seconds, every thread's: what a pass costs on all the cores it woke. */
static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void usage(void) {
  fprintf(stderr,
          "usage: bench_optim [--params N] [--reps R] [--threads T] [--cold] [--json FILE]\n");
}

static int parse_long(const char *s, long lo, long hi, long *out) {
  int64_t v;
  if (pst_parse_int(s, lo, hi, &v) < 0) return -EINVAL;
  *out = (long)v;
  return 0;
}

typedef struct {
  pst_optimizer *o;
  const float *wi, *g;
  float *wo;
} pass_job;

static void pass_range(void *ctx, size_t begin, size_t end) {
  pass_job *j = ctx;
  pst_opt_apply(j->o, j->wi, j->wo, j->g + begin, 1.0f, begin, end - begin);
}

int main(int argc, char **argv) {
  long n = 235146, reps = 200, threads = 1; /* the mlp model's parameter count */
  const char *json_path = NULL;
  int cold = 0;
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(argv[i], "--params") == 0 && v && parse_long(v, 1, 1L << 30, &n) == 0) {
      i++;
    } else if (strcmp(argv[i], "--reps") == 0 && v && parse_long(v, 1, MAX_REPS, &reps) == 0) {
      i++;
    } else if (strcmp(argv[i], "--threads") == 0 && v && parse_long(v, 1, 256, &threads) == 0) {
      i++;
    } else if (strcmp(argv[i], "--cold") == 0) {
      cold = 1;
    } else if (strcmp(argv[i], "--json") == 0 && v) {
      json_path = v;
      i++;
    } else {
      fprintf(stderr, "bench_optim: bad argument '%s'\n", argv[i]);
      usage();
      return 2;
    }
  }
  size_t bytes = (size_t)n * sizeof(float);
  float *w[2] = {malloc(bytes), malloc(bytes)}, *g = malloc(bytes), *plant = malloc(bytes);
  unsigned char *evict = cold ? malloc(EVICT_BYTES) : NULL;
  if (!w[0] || !w[1] || !g || !plant || (cold && !evict)) {
    fprintf(stderr, "bench_optim: out of memory for %ld parameters\n", n);
    return 1;
  }
  uint64_t seed = 7;
  for (long i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    float r = (float)(seed >> 40) / (float)(1u << 24) - 0.5f;
    w[0][i] = r;
    g[i] = r * 0.01f;
  }
  ps_par *par = NULL;
  if (threads > 1 && ps_par_create((int)threads, &par) < 0) {
    fprintf(stderr, "bench_optim: cannot start %ld threads\n", threads);
    return 1;
  }
  printf("%ld parameters, %ld thread%s, median of %ld passes, %s\n", n, threads,
         threads == 1 ? "" : "s", reps,
         cold ? "caches flushed before each pass (--cold)" : "state hot in cache");
  cJSON *rows = cJSON_CreateArray();
  printf("%-9s %-9s %-6s %10s %8s %12s\n", "optimizer", "state", "flush", "ms/pass", "GB/s",
         "cpu ms/pass");
  static const int per_param[] = {12, 20, 28};
  for (int flush = 1; flush >= 0; flush--) {
    if (flush && pst_fp_flush_denormals() != 0) {
      printf("(this CPU cannot flush denormals; the flushed rows are left out)\n");
      continue;
    }
    if (!flush) {
      /* Back to IEEE's gradual underflow, the default of a thread nobody set up. */
#if defined(__x86_64__)
      __builtin_ia32_ldmxcsr(__builtin_ia32_stmxcsr() & ~0x8040u);
#else
      continue;
#endif
    }
    for (int kind = PST_OPT_SGD; kind <= PST_OPT_ADAM; kind++) {
      for (int denormal = 0; denormal <= 1; denormal++) {
        pst_opt_config cfg;
        pst_opt_defaults(&cfg);
        cfg.kind = (pst_opt_kind)kind;
        cfg.lr = 1e-4f;
        pst_optimizer o;
        if (pst_opt_init(&o, &cfg, (size_t)n) != 0) {
          fprintf(stderr, "bench_optim: out of memory\n");
          return 1;
        }
        /* The state to plant: small normal values, or denormals on every other parameter,
         * whose gradient is then zero (as a long run leaves a parameter that never moves). */
        for (long i = 0; i < n; i++) plant[i] = denormal && (i & 1) ? 1e-39f : 1e-3f;
        float *gg = malloc(bytes);
        memcpy(gg, g, bytes);
        if (denormal)
          for (long i = 1; i < n; i += 2) gg[i] = 0.0f;
        double t[MAX_REPS], cpu = 0;
        for (long r = 0; r < reps + 3; r++) {
          for (int b = 0; b < 2; b++) {
            if (o.slot1[b]) memcpy(o.slot1[b], plant, bytes);
            if (o.slot2[b]) memcpy(o.slot2[b], plant, bytes);
          }
          if (evict) memset(evict, (int)r, EVICT_BYTES);
          int cur = (int)(r & 1);
          pst_opt_begin_step(&o);
          double c0 = cpu_s(), t0 = now_s();
          pass_job job = {&o, w[cur], gg, w[cur ^ 1]};
          ps_par_for(par, (size_t)n, pass_range, &job);
          double dt = now_s() - t0;
          if (r >= 3) t[r - 3] = dt; /* the first passes fault pages in and warm caches */
          if (r >= 3) cpu += cpu_s() - c0;
        }
        qsort(t, (size_t)reps, sizeof t[0], cmp_double);
        double med = t[reps / 2];
        double gbs = (double)per_param[kind] * (double)n / med / 1e9;
        const char *state = denormal ? "denormal" : "normal";
        printf("%-9s %-9s %-6s %10.4f %8.1f %12.4f\n", pst_opt_kind_name(cfg.kind), state,
               flush ? "on" : "off", med * 1e3, gbs, cpu * 1e3 / (double)reps);
        cJSON *row = cJSON_CreateObject();
        cJSON_AddStringToObject(row, "optimizer", pst_opt_kind_name(cfg.kind));
        cJSON_AddStringToObject(row, "state", state);
        cJSON_AddBoolToObject(row, "flush_denormals", flush);
        cJSON_AddNumberToObject(row, "ms_per_pass", med * 1e3);
        cJSON_AddNumberToObject(row, "gb_per_s", gbs);
        cJSON_AddNumberToObject(row, "cpu_ms_per_pass", cpu * 1e3 / (double)reps);
        cJSON_AddItemToArray(rows, row);
        free(gg);
        pst_opt_free(&o);
      }
    }
  }
  int rc = 0;
  if (json_path) {
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddNumberToObject(doc, "params", (double)n);
    cJSON_AddNumberToObject(doc, "reps", (double)reps);
    cJSON_AddNumberToObject(doc, "threads", (double)threads);
    cJSON_AddBoolToObject(doc, "cold", cold);
    cJSON_AddItemToObject(doc, "rows", rows);
    rows = NULL;
    if (pst_json_write_file(json_path, doc, 1) < 0) {
      fprintf(stderr, "bench_optim: cannot write %s\n", json_path);
      rc = 1;
    }
    cJSON_Delete(doc);
  }
  cJSON_Delete(rows);
  ps_par_free(par);
  free(w[0]);
  free(w[1]);
  free(g);
  free(plant);
  free(evict);
  return rc;
}
