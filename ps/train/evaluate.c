#include "ps/train/evaluate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "kernels/device.h"
#include "kernels/net.h"
#include "data/dataset.h"

struct ps_evaluator {
  pst_dataset train, test;
  float mean[3], std[3];
  pst_batch_prep prep;      /* test batches, no augmentation */
  pst_backend *backend;
  pst_net *net;
  int batch;
  size_t n_params;
  uint32_t classes;
  float *weights;           /* [n_params]: the copy being evaluated */
  float *x;                 /* [batch, features] */
  int32_t *y, *idx;         /* [batch] */
  uv_work_t work;
  int busy;
  ps_eval_result res;
  ps_eval_done_fn done;
  void *arg;
};

int ps_eval_open(const ps_eval_config *cfg, const pst_model *m, ps_evaluator **out,
                 char *desc, size_t desclen, char *err, size_t errlen) {
  *out = NULL;
  ps_evaluator *e = calloc(1, sizeof *e);
  if (!e) {
    snprintf(err, errlen, "out of memory for the evaluation");
    return -ENOMEM;
  }
  int rc = pst_dataset_open(cfg->data_dir, &cfg->image, &e->train, &e->test, e->mean, e->std,
                            desc, desclen, err, errlen);
  if (rc < 0) {
    free(e);
    return rc;
  }
  const pst_layer *in = &m->layers[0];
  rc = pst_batch_prep_init(&e->prep, &e->test, cfg->data_dir, in->in_h, in->in_w, in->in_c,
                           m->input_size, &cfg->image, e->mean, e->std, cfg->seed, 0, err,
                           errlen);
  for (int i = 0; rc == 0 && i < e->train.n; i++)
    if ((uint32_t)e->train.labels[i] + 1 > e->classes) e->classes = (uint32_t)e->train.labels[i] + 1;
  if (rc == 0 && (int)e->classes > m->classes) {
    snprintf(err, errlen, "--data-dir %.300s has %u classes, but the model outputs %d",
             cfg->data_dir, e->classes, m->classes);
    rc = -EINVAL;
  }
  char dev[256] = "";
  if (rc == 0) rc = pst_device_open("cpu", 0, cfg->threads, &e->backend, dev, sizeof dev);
  if (rc < 0 && !err[0]) snprintf(err, errlen, "cannot open the CPU backend: %s", dev);
  e->batch = cfg->batch > 0 ? cfg->batch : 256;
  e->n_params = m->n_params;
  if (rc == 0) {
    rc = pst_net_create(m, e->backend, e->batch, &e->net);
    if (rc < 0) snprintf(err, errlen, "cannot build the model for the evaluation: %s", strerror(-rc));
  }
  if (rc == 0) {
    e->weights = malloc(m->n_params * sizeof(float));
    e->x = malloc((size_t)e->batch * pst_batch_features(&e->prep) * sizeof(float));
    e->y = malloc((size_t)e->batch * sizeof(int32_t));
    e->idx = malloc((size_t)e->batch * sizeof(int32_t));
    if (!e->weights || !e->x || !e->y || !e->idx) {
      snprintf(err, errlen, "out of memory for the evaluation's buffers");
      rc = -ENOMEM;
    }
  }
  if (rc < 0) {
    ps_eval_free(e);
    return rc;
  }
  /* Only the training set's size, classes and statistics are needed from here on. */
  free(e->train.images);
  e->train.images = NULL;
  *out = e;
  return 0;
}

void ps_eval_data_facts(const ps_evaluator *e, uint32_t *train, uint32_t *test, uint32_t *classes) {
  *train = (uint32_t)e->train.n;
  *test = (uint32_t)e->test.n;
  *classes = e->classes;
}

/* On the thread pool: the whole test set in batches, as a worker evaluates its slice. */
static void eval_work(uv_work_t *w) {
  ps_evaluator *e = w->data;
  double t0 = pst_now();
  ps_eval_result *r = &e->res;
  r->rc = pst_net_load_params(e->net, e->weights);
  for (int b = 0; r->rc == 0 && b < e->test.n; b += e->batch) {
    int n = e->test.n - b < e->batch ? e->test.n - b : e->batch;
    for (int i = 0; i < n; i++) e->idx[i] = b + i;
    pst_batch_fill(&e->prep, e->idx, n, 0, 0, e->x, e->y);
    double loss = 0;
    int correct = 0;
    r->rc = pst_net_evaluate(e->net, e->x, e->y, n, &loss, &correct);
    r->loss_sum += loss;
    r->correct += (uint64_t)correct;
    r->samples += (uint64_t)n;
  }
  if (r->rc < 0) snprintf(r->why, sizeof r->why, "%s", strerror(-r->rc));
  r->seconds = pst_now() - t0;
}

static void eval_after(uv_work_t *w, int status) {
  ps_evaluator *e = w->data;
  e->busy = 0;
  if (status < 0 && e->res.rc == 0) {
    e->res.rc = status;
    snprintf(e->res.why, sizeof e->res.why, "%s", uv_strerror(status));
  }
  e->done(e->arg, &e->res);
}

int ps_eval_start(ps_evaluator *e, uv_loop_t *loop, const float *weights, uint32_t epoch,
                  uint64_t version, ps_eval_done_fn done, void *arg) {
  if (e->busy) return -EBUSY;
  memcpy(e->weights, weights, e->n_params * sizeof(float));
  memset(&e->res, 0, sizeof e->res);
  e->res.epoch = epoch;
  e->res.version = version;
  e->done = done;
  e->arg = arg;
  e->work.data = e;
  int rc = uv_queue_work(loop, &e->work, eval_work, eval_after);
  if (rc == 0) e->busy = 1;
  return rc;
}

int ps_eval_busy(const ps_evaluator *e) { return e && e->busy; }

void ps_eval_free(ps_evaluator *e) {
  if (!e) return;
  if (e->net) pst_net_destroy(e->net);
  if (e->backend) e->backend->destroy(e->backend);
  pst_data_free(&e->train);
  pst_data_free(&e->test);
  free(e->weights);
  free(e->x);
  free(e->y);
  free(e->idx);
  free(e);
}

static int hook_start(void *ctx, uv_loop_t *loop, const float *weights, uint32_t epoch,
                      uint64_t version, ps_eval_done_fn done, void *arg) {
  return ps_eval_start(ctx, loop, weights, epoch, version, done, arg);
}

static int hook_busy(const void *ctx) { return ps_eval_busy(ctx); }

void ps_eval_bind(ps_evaluator *e, ps_eval_hook *hook) {
  hook->ctx = e;
  hook->start = hook_start;
  hook->busy = hook_busy;
}
