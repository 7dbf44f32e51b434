/* The null backend (`--device null`): a worker that computes nothing, so that a job runs at
 * the speed its parameter server and links allow, the ceiling any GPU worker can reach.
 *
 * Every operation returns at once without touching its inputs or outputs, except what leaves
 * the device: the backward passes write a deterministic gradient (GRAD_VALUE times the loss
 * scale's share of the batch, so that a sync step's sum over the N workers is GRAD_VALUE
 * everywhere and an async push, scaled by N at the ps, is too), the moving statistics'
 * changes are zero, and the loss is that of a uniform prediction, ln(classes) per sample,
 * with nothing right. "Device" memory is host memory that nothing ever reads, so the net
 * walks its layers as on the CPU backend: the forward pass waits for each layer's streamed
 * weights (--pull-by-layer) and the backward pass announces each layer's gradient as it
 * is written, last layer first (--push-by-layer), in the order and with the wake-ups a real
 * backward pass makes.
 *
 * `null:RATE` paces the operations like a device that trains RATE samples a second (a GPU's
 * compute-only rate, say): each operation takes its share of a step's time in proportion to
 * its floating-point work, so the layer-by-layer transfers overlap the emulated compute as
 * they would a real one. The share needs the model's work per sample, counted over the
 * first training step (which takes no time). The time is slept, not spun: a GPU worker's
 * host thread waits for its device, and the ps shares this machine's cores. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "kernels/backend.h"

/* Every gradient value of a sync step's sum (or of one async push, as the ps scales it). */
#define GRAD_VALUE 1e-3f
/* A wait shorter than this is carried over to the next operation: a sleep costs microseconds
 * of its own. */
#define MIN_SLEEP 50e-6

typedef struct {
  double rate;            /* samples a second to emulate; 0: no pacing */
  double flops_per_sample; /* a training step's work per sample, once counted (0: not yet) */
  double counted;         /* work counted since the last synchronize */
  int step_batch;         /* the batch of the training step since then (0: none) */
  float grad_scale;       /* the loss scale x the batch: the worker's share of the mean */
  double due;             /* monotonic seconds the emulated device is busy until */
  double late;            /* how late the last wait ended, past the device's clock */
  char name[48];
} null_impl;

/* Sleeps until the monotonic time `until`, with the calling thread's timer slack at 1 us
 * (Linux lets a sleep end up to 50 us late by default, and a step sleeps once per layer). */
static void sleep_until(double until) {
  static __thread int slack_set;
  if (!slack_set) {
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    slack_set = 1;
  }
  struct timespec ts = {(time_t)until, (long)((until - floor(until)) * 1e9)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

/* Waits for the device's clock, and notes how late the wait ended. */
static void wait_device(null_impl *n) {
  sleep_until(n->due);
  double late = pst_now() - n->due;
  n->late = late > 0 ? late : 0;
}

/* Where the device's clock would start an operation asked for now: the caller's clock runs
 * behind by how late its last wait ended (a real device's caller would not have slept past
 * it). */
static double asked_now(const null_impl *n) { return pst_now() - n->late; }

/* The device does `flops` of work asked for at `asked` (asked_now): it starts once it has
 * finished what came before and the caller has asked, and its clock moves on by the work's
 * time; the caller waits once the clock is far enough ahead. The backward passes take their
 * time of asking before they write the gradient into host memory, so that the writing (which
 * stands for the device's own stores, and on a GPU the copy engine's download beside the
 * compute) falls inside the operation's time instead of after it: 0.1 ms a step of mlp at
 * batch 256 that no GPU spends. */
static void spend_from(pst_backend *b, double flops, double asked) {
  null_impl *n = b->impl;
  n->counted += flops;
  if (n->rate <= 0 || n->flops_per_sample <= 0) return;
  if (n->due < asked) n->due = asked;
  n->due += flops / (n->flops_per_sample * n->rate);
  if (n->due - asked >= MIN_SLEEP) wait_device(n);
}

static void spend(pst_backend *b, double flops) { spend_from(b, flops, asked_now(b->impl)); }

static void fill(float *p, size_t n, float v) {
  if (!p) return;
  for (size_t i = 0; i < n; i++) p[i] = v;
}

static void *null_alloc(pst_backend *b, size_t bytes) {
  (void)b;
  /* Never written (beyond what the net writes itself), so the pages are never touched. */
  return malloc(bytes ? bytes : 1);
}

static void null_free(pst_backend *b, void *p) {
  (void)b;
  free(p);
}

/* Nothing on the device is ever read: the weights need not go there, nor anything come back
 * (the gradient is written straight into the host's vector). */
static int null_copy(pst_backend *b, void *dst, const void *src, size_t bytes) {
  (void)b, (void)dst, (void)src, (void)bytes;
  return 0;
}

static int null_synchronize(pst_backend *b) {
  null_impl *n = b->impl;
  if (n->flops_per_sample <= 0 && n->step_batch > 0 && n->counted > 0)
    n->flops_per_sample = n->counted / n->step_batch;
  n->counted = 0;
  n->step_batch = 0;
  if (n->rate > 0 && n->due > pst_now()) wait_device(n);
  return 0;
}

static int dense_forward(pst_backend *b, const float *x, const float *w, const float *bias,
                         float *y, int batch, int in, int out) {
  (void)x, (void)w, (void)bias, (void)y;
  spend(b, 2.0 * batch * in * out);
  return 0;
}

/* Rows [r0, r1) of a dense layer's backward (the whole layer: 0 .. in): dw's rows and db
 * written, the rows' share of the work spent. */
static void backward_rows(pst_backend *b, int with_dx, float *dw, float *db, int batch, int out,
                          int r0, int r1) {
  null_impl *n = b->impl;
  double at = asked_now(n);
  if (dw) fill(dw + (size_t)r0 * out, (size_t)(r1 - r0) * out, n->grad_scale * GRAD_VALUE);
  fill(db, (size_t)out, n->grad_scale * GRAD_VALUE);
  spend_from(b, (with_dx ? 4.0 : 2.0) * batch * (r1 - r0) * out, at);
}

static int dense_backward(pst_backend *b, const float *x, const float *w, const float *dy,
                          float *dx, float *dw, float *db, int batch, int in, int out) {
  (void)x, (void)w, (void)dy;
  backward_rows(b, dx != NULL, dw, db, batch, out, 0, in);
  return 0;
}

/* A dense layer in pieces of rows (backend.h): each piece its share of the layer's work, so
 * the pieces of a layer take its whole time; a piece's rows of the gradient are written as
 * the whole layer's are. */
static int dense_forward_rows(pst_backend *b, const float *x, const float *w, const float *bias,
                              float *y, int batch, int in, int out, int r0, int r1) {
  (void)x, (void)w, (void)bias, (void)y;
  if (batch <= 0 || out <= 0 || r0 < 0 || r0 >= r1 || r1 > in) return -EINVAL;
  spend(b, 2.0 * batch * (r1 - r0) * out);
  return 0;
}

static int dense_backward_rows(pst_backend *b, const float *x, const float *w, const float *dy,
                               float *dx, float *dw, float *db, int batch, int in, int out,
                               int r0, int r1) {
  (void)x, (void)w, (void)dy;
  if (batch <= 0 || out <= 0 || r0 < 0 || r0 >= r1 || r1 > in) return -EINVAL;
  backward_rows(b, dx != NULL, dw, db, batch, out, r0, r1);
  return 0;
}

static int unary(pst_backend *b, const float *x, float *y, size_t count) {
  (void)x, (void)y;
  spend(b, (double)count);
  return 0;
}

static int unary_backward(pst_backend *b, const float *y, const float *dy, float *dx,
                          size_t count) {
  (void)y, (void)dy, (void)dx;
  spend(b, (double)count);
  return 0;
}

static int dropout_forward(pst_backend *b, const float *x, float *y, size_t count, float rate,
                           uint64_t seed) {
  (void)x, (void)y, (void)rate, (void)seed;
  spend(b, (double)count);
  return 0;
}

static int dropout_backward(pst_backend *b, const float *dy, float *dx, size_t count,
                            float rate, uint64_t seed) {
  (void)dy, (void)dx, (void)rate, (void)seed;
  spend(b, (double)count);
  return 0;
}

static int softmax_xent(pst_backend *b, const float *logits, const int32_t *labels,
                        float *dlogits, int batch, int classes, float scale, double *loss_sum,
                        int *correct) {
  null_impl *n = b->impl;
  (void)logits, (void)labels;
  spend(b, 5.0 * batch * classes);
  if (dlogits) {
    n->step_batch = batch;
    n->grad_scale = scale * (float)batch;
  }
  if (loss_sum) *loss_sum = batch * log(classes > 1 ? (double)classes : 1.0);
  if (correct) *correct = 0;
  return 0;
}

/* Multiply-adds of a window pass: every output cell over its window (and its channels). */
static double window_flops(const pst_window_shape *s, int channels_in) {
  return 2.0 * s->n * s->out_h * s->out_w * s->out_c * s->k_h * s->k_w * channels_in;
}

static int conv2d_forward(pst_backend *b, const pst_window_shape *s, const float *x,
                          const float *w, const float *bias, float *y) {
  (void)x, (void)w, (void)bias, (void)y;
  spend(b, window_flops(s, s->in_c));
  return 0;
}

static int conv2d_backward(pst_backend *b, const pst_window_shape *s, const float *x,
                           const float *w, const float *dy, float *dx, float *dw, float *db) {
  null_impl *n = b->impl;
  (void)x, (void)w, (void)dy;
  double at = asked_now(n);
  fill(dw, (size_t)s->out_c * s->k_h * s->k_w * s->in_c, n->grad_scale * GRAD_VALUE);
  fill(db, (size_t)s->out_c, n->grad_scale * GRAD_VALUE);
  spend_from(b, (dx ? 2.0 : 1.0) * window_flops(s, s->in_c), at);
  return 0;
}

static int depthwise_forward(pst_backend *b, const pst_window_shape *s, const float *x,
                             const float *w, const float *bias, float *y) {
  (void)x, (void)w, (void)bias, (void)y;
  spend(b, window_flops(s, 1));
  return 0;
}

static int depthwise_backward(pst_backend *b, const pst_window_shape *s, const float *x,
                              const float *w, const float *dy, float *dx, float *dw,
                              float *db) {
  null_impl *n = b->impl;
  (void)x, (void)w, (void)dy;
  double at = asked_now(n);
  fill(dw, (size_t)s->out_c * s->k_h * s->k_w, n->grad_scale * GRAD_VALUE);
  fill(db, (size_t)s->out_c, n->grad_scale * GRAD_VALUE);
  spend_from(b, (dx ? 2.0 : 1.0) * window_flops(s, 1), at);
  return 0;
}

static int pool_forward(pst_backend *b, const pst_window_shape *s, const float *x, float *y) {
  (void)x, (void)y;
  spend(b, window_flops(s, 1) / 2);
  return 0;
}

static int maxpool_backward(pst_backend *b, const pst_window_shape *s, const float *x,
                            const float *y, const float *dy, float *dx) {
  (void)x, (void)y, (void)dy, (void)dx;
  spend(b, window_flops(s, 1) / 2);
  return 0;
}

static int avgpool_backward(pst_backend *b, const pst_window_shape *s, const float *dy,
                            float *dx) {
  (void)dy, (void)dx;
  spend(b, window_flops(s, 1) / 2);
  return 0;
}

static int add(pst_backend *b, const float *x0, const float *x1, float *y, size_t count) {
  (void)x0, (void)x1, (void)y;
  spend(b, (double)count);
  return 0;
}

static int concat_forward(pst_backend *b, const float *x, float *y, size_t rows, int c, int y_c,
                          int offset) {
  (void)x, (void)y, (void)y_c, (void)offset;
  spend(b, (double)rows * c);
  return 0;
}

static int concat_backward(pst_backend *b, const float *dy, float *dx, size_t rows, int c,
                           int y_c, int offset) {
  (void)dy, (void)dx, (void)y_c, (void)offset;
  spend(b, (double)rows * c);
  return 0;
}

static int bn_forward_train(pst_backend *b, const float *x, const float *gamma,
                            const float *beta, float *y, int rows, int channels, float eps,
                            const float *moving, float k, float *saved, float *dmoving) {
  (void)x, (void)gamma, (void)beta, (void)y, (void)eps, (void)moving, (void)k, (void)saved;
  double at = asked_now(b->impl);
  fill(dmoving, 2 * (size_t)channels, 0.0f); /* the moving statistics stay as they are */
  spend_from(b, 5.0 * rows * channels, at);
  return 0;
}

static int bn_forward_infer(pst_backend *b, const float *x, const float *gamma,
                            const float *beta, const float *moving, float *y, int rows,
                            int channels, float eps) {
  (void)x, (void)gamma, (void)beta, (void)moving, (void)y, (void)eps;
  spend(b, 2.0 * rows * channels);
  return 0;
}

static int bn_backward(pst_backend *b, const float *x, const float *gamma, const float *saved,
                       const float *dy, float *dx, float *dgamma, float *dbeta, int rows,
                       int channels, float eps) {
  null_impl *n = b->impl;
  (void)x, (void)gamma, (void)saved, (void)dy, (void)dx, (void)eps;
  double at = asked_now(n);
  fill(dgamma, (size_t)channels, n->grad_scale * GRAD_VALUE);
  fill(dbeta, (size_t)channels, n->grad_scale * GRAD_VALUE);
  spend_from(b, 8.0 * rows * channels, at);
  return 0;
}

static void null_destroy(pst_backend *b) {
  if (!b) return;
  free(b->impl);
  free(b);
}

int pst_null_backend_create(double samples_per_sec, pst_backend **out) {
  *out = NULL;
  if (!(samples_per_sec >= 0) || !isfinite(samples_per_sec)) return -EINVAL;
  pst_backend *b = calloc(1, sizeof *b);
  null_impl *n = calloc(1, sizeof *n);
  if (!b || !n) {
    free(b);
    free(n);
    return -ENOMEM;
  }
  n->rate = samples_per_sec;
  n->grad_scale = 1.0f;
  if (samples_per_sec > 0) snprintf(n->name, sizeof n->name, "null:%.0f", samples_per_sec);
  else snprintf(n->name, sizeof n->name, "null");
  b->name = n->name;
  b->host_memory = 1;
  b->impl = n;
  b->alloc = null_alloc;
  b->free = null_free;
  b->to_device = null_copy;
  b->to_host = null_copy;
  b->synchronize = null_synchronize;
  b->dense_forward = dense_forward;
  b->dense_backward = dense_backward;
  b->dense_forward_rows = dense_forward_rows;
  b->dense_backward_rows = dense_backward_rows;
  b->relu_forward = unary;
  b->relu_backward = unary_backward;
  b->relu6_forward = unary;
  b->relu6_backward = unary_backward;
  b->dropout_forward = dropout_forward;
  b->dropout_backward = dropout_backward;
  b->softmax_xent = softmax_xent;
  b->conv2d_forward = conv2d_forward;
  b->conv2d_backward = conv2d_backward;
  b->depthwise_conv2d_forward = depthwise_forward;
  b->depthwise_conv2d_backward = depthwise_backward;
  b->maxpool_forward = pool_forward;
  b->maxpool_backward = maxpool_backward;
  b->avgpool_forward = pool_forward;
  b->avgpool_backward = avgpool_backward;
  b->add = add;
  b->concat_forward = concat_forward;
  b->concat_backward = concat_backward;
  b->batchnorm_forward_train = bn_forward_train;
  b->batchnorm_forward_infer = bn_forward_infer;
  b->batchnorm_backward = bn_backward;
  b->destroy = null_destroy;
  *out = b;
  return 0;
}
