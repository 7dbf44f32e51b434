/* The stages at work (pipeline.h): one thread per stage, GPipe's schedule, the hand-off
 * of activations and gradients between stages (in place in host memory, or copied by the
 * receiving backend's copy_from where the stages share no memory), and the step's results. Creation (options,
 * devices, balance, memory) is in pipe_setup.c, which calls this file's pst_pipe_start. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "kernels/net_stage.h"
#include "kernels/pipeline/pipe_internal.h"

enum { JOB_TRAIN = 1, JOB_EVAL = 2 };

/* Waits until stage s has passed more than k micro-batches in counts[] (forward or
 * backward), or the step failed: 0 or -ECANCELED. */
static int wait_for(pst_pipe *p, const int *counts, int s, int k) {
  pthread_mutex_lock(&p->mu);
  while (!p->failed && counts[s] <= k) pthread_cond_wait(&p->cv, &p->mu);
  int rc = p->failed ? -ECANCELED : 0;
  pthread_mutex_unlock(&p->mu);
  return rc;
}

static void post(pst_pipe *p, int *counts, int s, int k) {
  pthread_mutex_lock(&p->mu);
  counts[s] = k;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

/* Micro-batch k's dropout seed: the step's for the first (so one micro-batch is the plain
 * step), others mixed with k, so that no two micro-batches share a mask. */
static uint64_t micro_seed(const pst_pipe *p, int k) {
  return p->seed + 0xd1b54a32d192ed03ull * (uint64_t)k;
}

static double thread_cpu(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0.0;
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A stage's clocks around one of its passes (pst_pipe_stage_seconds). */
typedef struct {
  double wall, cpu;
} span;
static span span_start(void) { return (span){pst_now(), thread_cpu()}; }
static void span_end(pst_stage *st, span t) {
  st->busy += pst_now() - t.wall;
  st->cpu += thread_cpu() - t.cpu;
}

static pst_stage_pass make_pass(const pst_pipe *p, int k, int mb) {
  pst_stage_pass pass = {
      .slot = k,
      .row0 = p->row[k],
      .rows = p->row[k + 1] - p->row[k],
      .x = p->x,
      .labels = p->labels,
      .loss_scale = p->scale,
      .grad = p->grad,
      .accumulate = k > 0,
      .final = k == mb - 1,
  };
  return pass;
}

/* A hand-off that failed: recorded as the job's failure (the first one wins) with what
 * and the backend's reason, and -ECANCELED, so that the stage's thread adds nothing. */
static int copy_failed(pst_pipe *p, int s, int rc, const char *what, int j, int from) {
  pst_backend *be = p->st[s].dev.be;
  const char *why = be->last_error ? be->last_error(be) : "";
  pthread_mutex_lock(&p->mu);
  if (!p->failed) {
    p->failed = rc;
    snprintf(p->err, sizeof p->err, "stage %d (%s): copying %s of tensor %d from stage %d (%s): %s%s%s%s",
             s, p->st[s].dev.spec, what, j, from, p->st[from].dev.spec, strerror(-rc),
             why[0] ? " (" : "", why, why[0] ? ")" : "");
  }
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  return -ECANCELED;
}

/* Devices that share no memory (p->copies): stage s copies the micro-batch's rows of each
 * tensor of its lower cut from where stage s-1 keeps them into its own buffers, on its own
 * backend (copy_from: enqueued before the forward pass, which waits for it). Stage s-1 has
 * synchronized after writing them, and writes only other rows until stage s is done with
 * these (the next micro-batch's, or after the step). NOT RUN ON A GPU. */
static int copy_inputs(pst_pipe *p, int s, const pst_stage_pass *pass, int training) {
  pst_stage *st = &p->st[s], *below = &p->st[s - 1];
  for (int j = 1; j < st->lo; j++) {
    if (st->in[j] == NULL) continue;
    size_t f = pst_net_stage_tensor_floats(st->net, j), off = (size_t)pass->row0 * f;
    const float *src = pst_net_stage_tensor(below->net, j, training, p->x);
    int rc = src == NULL ? -EINVAL
                         : st->dev.be->copy_from(st->dev.be, st->in[j] + off, below->dev.be,
                                                 src + off, (size_t)pass->rows * f * sizeof(float));
    if (rc != 0) return copy_failed(p, s, rc, "the activations", j, s - 1);
  }
  return 0;
}

/* The same backward: the micro-batch's rows of the gradients of stage s's upper cut, from
 * stage s+1's outboxes into stage s's own buffers. */
static int copy_gradients(pst_pipe *p, int s, const pst_stage_pass *pass) {
  pst_stage *st = &p->st[s], *above = &p->st[s + 1];
  for (int j = 1; j < st->hi; j++) {
    if (st->gup[j] == NULL) continue;
    size_t f = pst_net_stage_tensor_floats(st->net, j), off = (size_t)pass->row0 * f;
    const float *src = pst_net_stage_gin(above->net, j);
    int rc = src == NULL ? -EINVAL
                         : st->dev.be->copy_from(st->dev.be, st->gup[j] + off, above->dev.be,
                                                 src + off, (size_t)pass->rows * f * sizeof(float));
    if (rc != 0) return copy_failed(p, s, rc, "the gradient", j, s + 1);
  }
  return 0;
}

/* Stage s's part of the job: GPipe's fill (every micro-batch forward, as the stage below
 * hands them up) and drain (every backward, as the stage above hands their gradients
 * down); the last stage runs each backward right after its forward. */
static int run_stage(pst_pipe *p, int s) {
  pst_stage *st = &p->st[s];
  int last = s == p->n - 1, training = p->kind == JOB_TRAIN;
  int mb = training ? p->mb : 1;
  for (int k = 0; k < mb; k++) {
    if (s > 0 && wait_for(p, p->fwd, s - 1, k) != 0) return -ECANCELED;
    pst_stage_pass pass = make_pass(p, k, mb);
    if (!training) pass.rows = p->batch;
    pst_net_set_seed(st->net, micro_seed(p, k));
    span t = span_start();
    int rc = s > 0 && p->copies ? copy_inputs(p, s, &pass, training) : 0;
    if (rc == 0) rc = pst_net_stage_forward(st->net, &pass, training);
    if (rc == 0 && last && training) rc = pst_net_stage_backward(st->net, &pass);
    span_end(st, t);
    if (rc != 0) return rc;
    if (last) {
      p->loss_k[k] = pass.loss;
      p->correct_k[k] = pass.correct;
    }
    post(p, p->fwd, s, k + 1);
    if (last && training) post(p, p->bwd, s, k + 1);
  }
  if (!training || last) return 0;
  for (int k = 0; k < mb; k++) {
    if (wait_for(p, p->bwd, s + 1, k) != 0) return -ECANCELED;
    pst_stage_pass pass = make_pass(p, k, mb);
    pst_net_set_seed(st->net, micro_seed(p, k));
    span t = span_start();
    int rc = p->copies ? copy_gradients(p, s, &pass) : 0;
    if (rc == 0) rc = pst_net_stage_backward(st->net, &pass);
    span_end(st, t);
    if (rc != 0) return rc;
    post(p, p->bwd, s, k + 1);
  }
  return 0;
}

/* Records stage s's failure (the first one wins) and wakes every waiting stage. */
static void fail(pst_pipe *p, int s, int rc) {
  pthread_mutex_lock(&p->mu);
  if (!p->failed) {
    p->failed = rc;
    const pst_stage *st = &p->st[s];
    if (p->n > 1)
      snprintf(p->err, sizeof p->err, "stage %d (%s): %s", s, st->dev.spec,
               pst_net_error(st->net)[0] ? pst_net_error(st->net) : strerror(-rc));
    else
      snprintf(p->err, sizeof p->err, "%s", pst_net_error(st->net));
  }
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

static void *stage_thread(void *arg) {
  pst_stage *st = arg;
  pst_pipe *p = st->pipe;
  int s = (int)(st - p->st);
  pst_vdev_pin(&st->dev);
  uint64_t seen = 0;
  for (;;) {
    pthread_mutex_lock(&p->mu);
    while (!p->quit && p->job == seen) pthread_cond_wait(&p->cv, &p->mu);
    if (p->quit) {
      pthread_mutex_unlock(&p->mu);
      return NULL;
    }
    seen = p->job;
    pthread_mutex_unlock(&p->mu);
    int rc = run_stage(p, s);
    if (rc != 0 && rc != -ECANCELED) fail(p, s, rc);
    pthread_mutex_lock(&p->mu);
    p->done++;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
  }
}

int pst_pipe_start(pst_pipe *p) {
  if (pthread_mutex_init(&p->mu, NULL) != 0) return -ENOMEM;
  if (pthread_cond_init(&p->cv, NULL) != 0) {
    pthread_mutex_destroy(&p->mu);
    return -ENOMEM;
  }
  p->sync_made = 1;
  if (p->n == 1) return 0; /* one stage runs on the caller's thread */
  for (int s = 0; s < p->n; s++) {
    p->st[s].pipe = p;
    if (pthread_create(&p->st[s].thread, NULL, stage_thread, &p->st[s]) != 0) return -EAGAIN;
    p->st[s].started = 1;
  }
  return 0;
}

void pst_pipe_stop(pst_pipe *p) {
  if (!p->sync_made) return;
  pthread_mutex_lock(&p->mu);
  p->quit = 1;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  for (int s = 0; s < p->n; s++)
    if (p->st[s].started) pthread_join(p->st[s].thread, NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  p->sync_made = 0;
}

/* Points each stage at where the stage below keeps what it takes, for this job's batch
 * and mode (host memory: the very buffers; devices that share no memory keep their own,
 * bound once at creation). */
static void bind_inputs(pst_pipe *p, int training) {
  for (int s = 1; !p->copies && s < p->n; s++)
    for (int j = 0; j < p->st[s].lo; j++)
      if (pst_net_stage_takes(p->st[s].net, j))
        pst_net_stage_bind(p->st[s].net, j,
                           pst_net_stage_tensor(p->st[s - 1].net, j, training, p->x), NULL);
}

/* Runs a job on every stage and waits for it: 0 or the first failure's code. */
static int run_job(pst_pipe *p, int kind) {
  p->kind = kind;
  p->failed = 0;
  p->err[0] = '\0';
  memset(p->fwd, 0, sizeof p->fwd);
  memset(p->bwd, 0, sizeof p->bwd);
  bind_inputs(p, kind == JOB_TRAIN);
  if (p->n == 1) {
    int rc = run_stage(p, 0);
    if (rc != 0) fail(p, 0, rc);
    return p->failed;
  }
  pthread_mutex_lock(&p->mu);
  p->done = 0;
  p->job++;
  pthread_cond_broadcast(&p->cv);
  while (p->done < p->n) pthread_cond_wait(&p->cv, &p->mu);
  int rc = p->failed;
  pthread_mutex_unlock(&p->mu);
  return rc;
}

/* Cuts batch rows into mb micro-batches, as even as they go. */
static void cut_rows(pst_pipe *p, int batch, int mb) {
  p->mb = mb;
  for (int k = 0; k <= mb; k++) p->row[k] = (int)((long long)batch * k / mb);
}

int pst_pipe_train_step(pst_pipe *p, const float *x, const int32_t *labels, int batch,
                        float loss_scale, float *grad, double *loss_sum, int *correct) {
  if (p == NULL) return -EINVAL;
  if (p->n == 1 && p->micro == 1) {
    pst_net_set_seed(p->st[0].net, p->seed);
    return pst_net_train_step(p->st[0].net, x, labels, batch, loss_scale, grad, loss_sum, correct);
  }
  if (x == NULL || labels == NULL || grad == NULL || batch <= 0 || batch > p->max_batch) {
    snprintf(p->err, sizeof p->err, "the batch is outside 1 .. the pipeline's size");
    return -EINVAL;
  }
  p->x = x;
  p->labels = labels;
  p->batch = batch;
  p->scale = loss_scale;
  p->grad = grad;
  cut_rows(p, batch, batch < p->micro ? batch : p->micro);
  int rc = run_job(p, JOB_TRAIN);
  if (rc != 0) return rc;
  double loss = 0.0;
  int right = 0;
  for (int k = 0; k < p->mb; k++) { /* in order: the same sum every time */
    loss += p->loss_k[k];
    right += p->correct_k[k];
  }
  if (p->grad_ready) p->grad_ready(p->grad_ready_ctx, 0);
  if (loss_sum != NULL) *loss_sum = loss;
  if (correct != NULL) *correct = right;
  return 0;
}

int pst_pipe_evaluate(pst_pipe *p, const float *x, const int32_t *labels, int batch,
                      double *loss_sum, int *correct) {
  if (p == NULL) return -EINVAL;
  if (p->n == 1) return pst_net_evaluate(p->st[0].net, x, labels, batch, loss_sum, correct);
  if (x == NULL || labels == NULL || batch <= 0 || batch > p->max_batch) {
    snprintf(p->err, sizeof p->err, "the evaluation batch is outside 1 .. the pipeline's size");
    return -EINVAL;
  }
  p->x = x;
  p->labels = labels;
  p->batch = batch;
  p->grad = NULL;
  cut_rows(p, batch, 1);
  int rc = run_job(p, JOB_EVAL);
  if (rc != 0) return rc;
  if (loss_sum != NULL) *loss_sum = p->loss_k[0];
  if (correct != NULL) *correct = p->correct_k[0];
  return 0;
}

int pst_pipe_load_params(pst_pipe *p, const float *params) {
  for (int s = 0; s < p->n; s++) {
    int rc = pst_net_load_params(p->st[s].net, params);
    if (rc != 0) {
      fail(p, s, rc);
      return rc;
    }
  }
  return 0;
}

int pst_pipe_load_params_streamed(pst_pipe *p, const float *params, pst_params_wait_fn wait,
                                  void *ctx) {
  for (int s = 0; s < p->n; s++) {
    int rc = pst_net_load_params_streamed(p->st[s].net, params, wait, ctx);
    if (rc != 0) return rc;
  }
  return 0;
}

void pst_pipe_set_seed(pst_pipe *p, uint64_t seed) {
  if (p != NULL) p->seed = seed;
}

void pst_pipe_on_grad_ready(pst_pipe *p, pst_grad_ready_fn fn, void *ctx) {
  p->grad_ready = fn;
  p->grad_ready_ctx = ctx;
  for (int s = 0; s < p->n; s++) pst_net_on_grad_ready(p->st[s].net, fn, ctx);
}

int pst_pipe_set_row_cuts(pst_pipe *p, const size_t *cuts, size_t n) {
  if (p == NULL) return -EINVAL;
  return p->n == 1 && p->micro == 1 ? pst_net_set_row_cuts(p->st[0].net, cuts, n) : 0;
}

void pst_pipe_on_grad_part(pst_pipe *p, pst_grad_part_fn fn, void *ctx) {
  if (p != NULL && p->n == 1 && p->micro == 1) pst_net_on_grad_part(p->st[0].net, fn, ctx);
}

void pst_pipe_stage_seconds(const pst_pipe *p, int s, double *busy, double *cpu) {
  *busy = p && s >= 0 && s < p->n ? p->st[s].busy : 0.0;
  *cpu = p && s >= 0 && s < p->n ? p->st[s].cpu : 0.0;
}

const char *pst_pipe_error(const pst_pipe *p) {
  if (p == NULL) return "";
  if (p->err[0] || p->n > 1 || p->micro > 1) return p->err;
  return pst_net_error(p->st[0].net);
}
