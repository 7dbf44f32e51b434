/* The pipeline tests' jobs (pipeline_test.c, stages_parity_test.c): a model's parameters,
 * a batch and its labels made from a seed, one step and one evaluation through a pipeline,
 * and the relative difference of two gradients. One copy, included by each test (one
 * translation unit each), as common/check.h is. */
#ifndef PSTRAIN_KERNELS_PIPELINE_TEST_JOBS_H
#define PSTRAIN_KERNELS_PIPELINE_TEST_JOBS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/pipeline/pipeline.h"
#include "kernels/testing.h"
#include "model/model.h"

typedef struct {
  float *grad; /* [n_params] */
  double loss;
  int correct;
  double eval_loss;
  int eval_correct;
} outcome;

typedef struct {
  const pst_model *m;
  float *params; /* [n_params] */
  float *x;      /* [batch, input_size] */
  int32_t *y;    /* [batch] */
  int batch;
} job;

/* The L2 norm of a - b over b's (over 1 when b is all zeros). */
static double rel_diff(const float *a, const float *b, size_t n) {
  double d = 0, s = 0;
  for (size_t i = 0; i < n; i++) {
    d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    s += (double)b[i] * b[i];
  }
  return s > 0 ? sqrt(d / s) : sqrt(d);
}

/* One step and one evaluation through a pipeline of these options, with one thread a
 * stage; `before` (when given) sees the pipeline before the step, `after` once it is done. */
static int run_pipe_with(const job *j, pst_pipe_options o, outcome *out,
                         void (*before)(pst_pipe *, void *), void (*after)(pst_pipe *, void *),
                         void *ctx) {
  pst_pipe *p;
  char note[512], err[512];
  o.threads = 1;
  int rc = pst_pipe_create(j->m, &o, j->batch, &p, note, sizeof note, err, sizeof err);
  if (rc != 0) {
    fprintf(stderr, "pst_pipe_create: %s\n", err);
    return rc;
  }
  if (before) before(p, ctx);
  out->grad = calloc(j->m->n_params, sizeof(float));
  rc = pst_pipe_load_params(p, j->params);
  pst_pipe_set_seed(p, 7);
  if (rc == 0)
    rc = pst_pipe_train_step(p, j->x, j->y, j->batch, 1.0f / (float)j->batch, out->grad,
                             &out->loss, &out->correct);
  if (rc == 0)
    rc = pst_pipe_evaluate(p, j->x, j->y, j->batch, &out->eval_loss, &out->eval_correct);
  if (rc != 0) fprintf(stderr, "pipeline step: %s\n", pst_pipe_error(p));
  if (after) after(p, ctx);
  pst_pipe_destroy(p);
  return rc;
}

/* Parameters from the seed, moving statistics moved away from their start (so that an
 * evaluation depends on them), a batch in [0, 1) and labels in turn. */
static job make_job(const pst_model *m, int batch, uint64_t seed) {
  job j = {.m = m, .batch = batch};
  j.params = malloc(m->n_params * sizeof(float));
  j.x = malloc((size_t)batch * m->input_size * sizeof(float));
  j.y = malloc((size_t)batch * sizeof(int32_t));
  pst_model_init_params(m, seed, j.params);
  t_fill(j.x, (size_t)batch * m->input_size, seed + 1, 0.0, 1.0);
  for (int i = 0; i < batch; i++) j.y[i] = (int32_t)((i * 7 + 3) % m->classes);
  size_t off[PST_MODEL_MAX_LAYERS], cnt[PST_MODEL_MAX_LAYERS];
  int ns = pst_model_state_ranges(m, off, cnt);
  for (int r = 0; r < ns; r++)
    for (size_t i = 0; i < cnt[r]; i++) j.params[off[r] + i] += i < cnt[r] / 2 ? 0.1f : 0.2f;
  return j;
}

static void free_job(job *j) {
  free(j->params);
  free(j->x);
  free(j->y);
}

#endif
