/* The network over the CPU backend: whole-net gradients against finite differences on a
 * tiny conv model and on one with relu6, average pooling, dropout, depthwise convolution
 * and global average pooling, the same through a backend that pretends its memory is not host
 * memory (the path the CUDA backend takes), and training on toy problems. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "kernels/net.h"
#include "kernels/testing.h"

static const char *tiny_spec =
    "input 6x5x2\n"
    "conv2d 3 3x3 padding=same relu\n"
    "maxpool 2x2\n"
    "conv2d 4 2x2 relu\n"
    "flatten\n"
    "dense 5 relu\n"
    "dense 3 softmax\n";

typedef struct {
  pst_net *net;
  const pst_model *m;
  float *params, *x;
  int32_t *labels;
  int batch;
  float scale;
} net_case;

static double net_loss(void *ctx) {
  net_case *c = ctx;
  double loss = 0;
  int correct;
  pst_net_load_params(c->net, c->params);
  pst_net_evaluate(c->net, c->x, c->labels, c->batch, &loss, &correct);
  return loss * c->scale;
}

/* A view of the CPU backend that claims device memory, so that pst_net copies inputs,
 * labels and gradients as it must for CUDA. */
static pst_backend as_device;
static void *dev_alloc(pst_backend *b, size_t n) { return malloc(n ? n : 1); }
static void dev_free(pst_backend *b, void *p) { free(p); }

static void test_gradients(pst_backend *cpu) {
  pst_model m;
  char err[256];
  CHECK(pst_model_parse(tiny_spec, "tiny", &m, err, sizeof err) == 0);
  enum { B = 3 };
  float *params = malloc(m.n_params * 4), *grad = malloc(m.n_params * 4);
  float *grad2 = malloc(m.n_params * 4);
  float x[B * 60];
  int32_t labels[B] = {2, 0, 1};
  pst_model_init_params(&m, 7, params);
  /* Non-zero biases, so that no ReLU input sits exactly at its kink. */
  for (int l = 1; l < m.n_layers; l++)
    t_fill(params + m.layers[l].b_offset, m.layers[l].b_count, 50 + l, 0.05, 0.2);
  t_fill(x, B * 60, 9, -1, 1);

  pst_net *net = NULL;
  CHECK(pst_net_create(&m, cpu, 4, &net) == 0);
  double loss = 0, eloss = 0;
  int correct = -1, ecorrect = -2;
  CHECK(pst_net_train_step(net, x, labels, B, 0.5f, grad, &loss, &correct) == -EINVAL);
  CHECK(pst_net_load_params(net, params) == 0);
  CHECK(pst_net_train_step(net, x, labels, 5, 0.5f, grad, &loss, &correct) == -EINVAL);
  CHECK(pst_net_train_step(net, x, labels, B, 0.5f, grad, &loss, &correct) == 0);
  CHECK(pst_net_evaluate(net, x, labels, B, &eloss, &ecorrect) == 0);
  CHECK(loss > 0 && loss == eloss && correct == ecorrect);
  net_case c = {net, &m, params, x, labels, B, 0.5f};
  CHECK(t_gradcheck("net grad", params, grad, m.n_params, net_loss, &c) == 0);
  int32_t bad_labels[B] = {0, 3, 0};
  CHECK(pst_net_train_step(net, x, bad_labels, B, 0.5f, grad2, &loss, &correct) == -EINVAL);
  pst_net_log_placement(net);
  pst_net_destroy(net);

  /* The device-memory path gives the very same numbers. */
  as_device = *cpu;
  as_device.host_memory = 0;
  as_device.alloc = dev_alloc;
  as_device.free = dev_free;
  as_device.describe = NULL;
  CHECK(pst_net_create(&m, &as_device, 4, &net) == 0);
  CHECK(pst_net_load_params(net, params) == 0);
  double loss2 = 0;
  int correct2 = -1;
  CHECK(pst_net_train_step(net, x, labels, B, 0.5f, grad2, &loss2, &correct2) == 0);
  CHECK(pst_net_train_step(net, x, labels, B, 0.5f, grad, &loss, &correct) == 0);
  CHECK(memcmp(grad, grad2, m.n_params * 4) == 0 && loss == loss2 && correct == correct2);
  pst_net_log_placement(net);
  pst_net_destroy(net);
  free(params), free(grad), free(grad2);
}

/* The training loss (dropout on, with the net's fixed seed), for finite differences of a
 * net with dropout: the same seed draws the same mask on every call. */
static double net_train_loss(void *ctx) {
  net_case *c = ctx;
  double loss = 0;
  int correct;
  static float scratch[4096];
  pst_net_load_params(c->net, c->params);
  pst_net_train_step(c->net, c->x, c->labels, c->batch, c->scale, scratch, &loss, &correct);
  return loss * c->scale;
}

static const char *new_layers_spec =
    "input 6x5x2\n"
    "conv2d 3 3x3 padding=same relu6\n"
    "avgpool 2x2 stride=1 padding=same\n"
    "dropout 0.3\n"
    "depthwise_conv2d 3x3 stride=2 padding=same relu6\n"
    "conv2d 4 2x2 relu\n"
    "global_avgpool\n"
    "dense 5 relu6\n"
    "dropout 0.2\n"
    "dense 3 softmax\n";

static void test_new_layer_gradients(pst_backend *cpu) {
  pst_model m;
  char err[256];
  CHECK(pst_model_parse(new_layers_spec, "new", &m, err, sizeof err) == 0);
  CHECK(m.n_params < 4096);
  enum { B = 3 };
  float *params = malloc(m.n_params * 4), *grad = malloc(m.n_params * 4);
  float *grad2 = malloc(m.n_params * 4);
  float x[B * 60];
  int32_t labels[B] = {2, 0, 1};
  pst_model_init_params(&m, 7, params);
  for (int l = 1; l < m.n_layers; l++)
    t_fill(params + m.layers[l].b_offset, m.layers[l].b_count, 70 + l, 0.05, 0.2);
  t_fill(x, B * 60, 19, -1, 1);
  pst_net *net = NULL;
  CHECK(pst_net_create(&m, cpu, B, &net) == 0);
  CHECK(pst_net_load_params(net, params) == 0);
  pst_net_set_seed(net, 12345);
  double loss = 0, loss2 = 0, eloss = 0;
  int correct = 0, correct2 = 0;
  CHECK(pst_net_train_step(net, x, labels, B, 0.5f, grad, &loss, &correct) == 0);
  net_case c = {net, &m, params, x, labels, B, 0.5f};
  CHECK(t_gradcheck("net grad (relu6, avgpool, dropout)", params, grad, m.n_params,
                    net_train_loss, &c) == 0);
  /* Dropout is seeded: the same seed gives the same step, another seed another one, and
   * evaluation (no dropout) differs from both. */
  CHECK(pst_net_load_params(net, params) == 0);
  CHECK(pst_net_train_step(net, x, labels, B, 0.5f, grad2, &loss2, &correct2) == 0);
  CHECK(loss == loss2 && memcmp(grad, grad2, m.n_params * 4) == 0);
  pst_net_set_seed(net, 12346);
  CHECK(pst_net_train_step(net, x, labels, B, 0.5f, grad2, &loss2, &correct2) == 0);
  CHECK(loss != loss2 && memcmp(grad, grad2, m.n_params * 4) != 0);
  CHECK(pst_net_evaluate(net, x, labels, B, &eloss, &correct2) == 0);
  CHECK(eloss != loss && eloss != loss2);
  pst_net_log_placement(net);
  pst_net_destroy(net);
  free(params), free(grad), free(grad2);
}

/* A graph with every kind of fan-in: `a` is taken by four layers (two convolutions, the
 * 3-input add and a depthwise convolution), `f` by two dense layers (through flatten,
 * which hands its gradient down), `m` twice by one add; the input feeds a concatenation
 * but needs no gradient. Each tensor must get the sum of its consumers' gradients. */
static const char *graph_spec =
    "input 6x5x2 name=x\n"
    "conv2d 3 3x3 padding=same relu name=a\n"
    "conv2d 3 3x3 padding=same relu6 name=b\n"
    "conv2d 3 1x1 inputs=a name=c\n"
    "add relu inputs=a,b,c name=s\n"
    "depthwise_conv2d 3x3 padding=same inputs=a name=dw\n"
    "concatenate inputs=s,dw,x name=cat\n"
    "avgpool 2x2 stride=1 padding=same\n"
    "flatten name=f\n"
    "dense 4 relu name=d1\n"
    "dense 3 relu inputs=f name=d2\n"
    "concatenate inputs=d1,d2 name=m\n"
    "add inputs=m,m\n"
    "dropout 0.3\n"
    "dense 3 softmax\n";

static void test_graph_gradients(pst_backend *cpu) {
  static pst_model m;
  char err[256];
  int rc = pst_model_parse(graph_spec, "graph", &m, err, sizeof err);
  if (rc != 0) fprintf(stderr, "  %s\n", err);
  CHECK(rc == 0);
  CHECK(m.n_params < 4096 && m.graph);
  enum { B = 3 };
  float *params = malloc(m.n_params * 4), *grad = malloc(m.n_params * 4);
  float *grad2 = malloc(m.n_params * 4);
  float x[B * 60];
  int32_t labels[B] = {2, 0, 1};
  pst_model_init_params(&m, 11, params);
  for (int l = 1; l < m.n_layers; l++)
    t_fill(params + m.layers[l].b_offset, m.layers[l].b_count, 90 + l, 0.05, 0.2);
  t_fill(x, B * 60, 29, -1, 1);
  pst_net *net = NULL;
  CHECK(pst_net_create(&m, cpu, B, &net) == 0);
  CHECK(pst_net_load_params(net, params) == 0);
  pst_net_set_seed(net, 777);
  double loss = 0, loss2 = 0;
  int correct = 0, correct2 = 0;
  CHECK(pst_net_train_step(net, x, labels, B, 0.5f, grad, &loss, &correct) == 0);
  net_case c = {net, &m, params, x, labels, B, 0.5f};
  CHECK(t_gradcheck("graph grad (add, concatenate, fan-in)", params, grad, m.n_params,
                    net_train_loss, &c) == 0);
  /* Every layer with parameters got a gradient (none was left out of the walk). */
  for (int l = 1; l < m.n_layers; l++) {
    double sum = 0;
    for (size_t i = 0; i < m.layers[l].w_count; i++) sum += fabs(grad[m.layers[l].w_offset + i]);
    CHECK(m.layers[l].w_count == 0 || sum > 0);
  }
  pst_net_log_placement(net);
  pst_net_destroy(net);

  /* The device-memory path gives the very same numbers. */
  as_device = *cpu;
  as_device.host_memory = 0;
  as_device.alloc = dev_alloc;
  as_device.free = dev_free;
  as_device.describe = NULL;
  CHECK(pst_net_create(&m, &as_device, B, &net) == 0);
  CHECK(pst_net_load_params(net, params) == 0);
  pst_net_set_seed(net, 777);
  CHECK(pst_net_train_step(net, x, labels, B, 0.5f, grad2, &loss2, &correct2) == 0);
  CHECK(loss == loss2 && correct == correct2 && memcmp(grad, grad2, m.n_params * 4) == 0);
  pst_net_destroy(net);
  free(params), free(grad), free(grad2);
}

/* activation layers and bias-less layers (bias=no), MobileNetV2's building blocks short
 * of batch norm: the gradients against finite differences, on host memory and through the
 * device-memory path (whose zero bias and bias sink are device buffers). */
static const char *activation_spec =
    "input 6x5x2 name=x\n"
    "conv2d 4 3x3 padding=same bias=no\n"
    "activation relu6\n"
    "depthwise_conv2d 3x3 stride=2 padding=same bias=no\n"
    "activation relu name=a\n"
    "conv2d 4 1x1 bias=no name=p\n"
    "add inputs=a,p\n"
    "flatten\n"
    "dense 5 bias=no\n"
    "activation relu6\n"
    "dense 3 softmax\n";

static void test_activation_and_no_bias(pst_backend *cpu) {
  static pst_model m;
  char err[256];
  int rc = pst_model_parse(activation_spec, "act", &m, err, sizeof err);
  if (rc != 0) fprintf(stderr, "  %s\n", err);
  CHECK(rc == 0);
  /* Only the last dense layer has a bias: 72 + 36 + 16 + 3*3*4*5 + 5*3 weights, 3 biases. */
  CHECK(m.n_params == 72 + 36 + 16 + 180 + 15 + 3);
  CHECK(m.layers[1].b_count == 0 && m.layers[3].b_count == 0 && m.layers[8].b_count == 0);
  enum { B = 3 };
  float *params = malloc(m.n_params * 4), *grad = malloc(m.n_params * 4);
  float *grad2 = malloc(m.n_params * 4);
  float x[B * 60];
  int32_t labels[B] = {1, 2, 0};
  pst_model_init_params(&m, 5, params);
  t_fill(x, B * 60, 41, -1, 1);
  pst_net *net = NULL;
  CHECK(pst_net_create(&m, cpu, B, &net) == 0);
  CHECK(pst_net_load_params(net, params) == 0);
  double loss = 0, loss2 = 0;
  int correct = 0, correct2 = 0;
  CHECK(pst_net_train_step(net, x, labels, B, 0.5f, grad, &loss, &correct) == 0);
  net_case c = {net, &m, params, x, labels, B, 0.5f};
  CHECK(t_gradcheck("net grad (activation layers, bias=no)", params, grad, m.n_params,
                    net_train_loss, &c) == 0);
  pst_net_destroy(net);
  as_device = *cpu;
  as_device.host_memory = 0;
  as_device.alloc = dev_alloc;
  as_device.free = dev_free;
  as_device.describe = NULL;
  CHECK(pst_net_create(&m, &as_device, B, &net) == 0);
  CHECK(pst_net_load_params(net, params) == 0);
  CHECK(pst_net_train_step(net, x, labels, B, 0.5f, grad2, &loss2, &correct2) == 0);
  CHECK(loss == loss2 && correct == correct2 && memcmp(grad, grad2, m.n_params * 4) == 0);
  pst_net_destroy(net);
  free(params), free(grad), free(grad2);
}

/* A tensor taken by two layers gets the sum of both gradients: input -> h, and h feeds
 * two dense heads that are added. With both heads' weights equal, h's gradient is twice a
 * single head's, so the first layer's weight gradient doubles. */
static void test_fan_in_sum(pst_backend *cpu) {
  static pst_model one, two;
  char err[256];
  CHECK(pst_model_parse("input 4\ndense 5 name=h\ndense 3 name=p\ndense 2 softmax\n", "one",
                        &one, err, sizeof err) == 0);
  CHECK(pst_model_parse("input 4\ndense 5 name=h\ndense 3 name=p\ndense 3 inputs=h name=q\n"
                        "add inputs=p,q\ndense 2 softmax\n",
                        "two", &two, err, sizeof err) == 0);
  enum { B = 2 };
  float x[B * 4];
  int32_t labels[B] = {1, 0};
  t_fill(x, B * 4, 5, -1, 1);
  float p1[64], g1[64], p2[128], g2[128];
  CHECK(one.n_params <= 64 && two.n_params <= 128);
  pst_model_init_params(&one, 3, p1);
  /* two = one's h and p, q = p, and the last layer takes p + q = 2p: halve its weights. */
  const pst_layer *h1 = &one.layers[1], *pl1 = &one.layers[2], *o1 = &one.layers[3];
  const pst_layer *q2 = &two.layers[3], *o2 = &two.layers[5];
  memcpy(p2, p1, (pl1->b_offset + pl1->b_count) * 4);
  memcpy(p2 + q2->w_offset, p1 + pl1->w_offset, (pl1->w_count + pl1->b_count) * 4);
  for (size_t i = 0; i < o1->w_count; i++) p2[o2->w_offset + i] = 0.5f * p1[o1->w_offset + i];
  memcpy(p2 + o2->b_offset, p1 + o1->b_offset, o1->b_count * 4);
  pst_net *n1 = NULL, *n2 = NULL;
  CHECK(pst_net_create(&one, cpu, B, &n1) == 0 && pst_net_create(&two, cpu, B, &n2) == 0);
  double l1 = 0, l2 = 0;
  int c1, c2;
  CHECK(pst_net_load_params(n1, p1) == 0 && pst_net_load_params(n2, p2) == 0);
  CHECK(pst_net_train_step(n1, x, labels, B, 1.0f, g1, &l1, &c1) == 0);
  CHECK(pst_net_train_step(n2, x, labels, B, 1.0f, g2, &l2, &c2) == 0);
  CHECK(fabs(l1 - l2) < 1e-5);
  /* The logits are the same; dL/dp and dL/dq are each half of one's dL/dp, so h's
   * gradient, the sum of both, equals one's: so do h's weight gradients. */
  for (size_t i = 0; i < h1->w_count + h1->b_count; i++)
    CHECK(t_close(g2[i], g1[i], 1e-4, 1e-6));
  for (size_t i = 0; i < pl1->w_count; i++)
    CHECK(t_close(g2[q2->w_offset + i], 0.5 * g1[pl1->w_offset + i], 1e-4, 1e-6));
  pst_net_destroy(n1);
  pst_net_destroy(n2);
}

static const char *bn_spec =
    "input 6x5x2\n"
    "conv2d 3 3x3 padding=same\n"
    "batchnorm\n"
    "conv2d 4 2x2 relu\n"
    "flatten\n"
    "dense 5\n"
    "batchnorm momentum=0.9 eps=0.01\n"
    "dense 3 softmax\n";

/* Whether parameter i of m is model state (a batchnorm moving statistic). */
static int is_state(const pst_model *m, size_t i) {
  size_t off[PST_MODEL_MAX_LAYERS], cnt[PST_MODEL_MAX_LAYERS];
  int n = pst_model_state_ranges(m, off, cnt);
  for (int r = 0; r < n; r++)
    if (i >= off[r] && i < off[r] + cnt[r]) return 1;
  return 0;
}

/* Batch normalisation in a net: the training-mode gradients of every trained parameter
 * against finite differences; the state entries hold the moving statistics' change, which
 * with momentum taken out sets them to the batch's own statistics, after which evaluation
 * (which normalises with the moving statistics) gives the training forward's loss, and
 * before which it does not; the device-memory path gives the same bits. */
static void test_batchnorm(pst_backend *cpu) {
  pst_model m;
  char err[256];
  CHECK(pst_model_parse(bn_spec, "bn", &m, err, sizeof err) == 0);
  CHECK(m.n_params < 4096);
  enum { B = 4 };
  const float scale = 0.5f;
  float *params = malloc(m.n_params * 4), *grad = malloc(m.n_params * 4);
  float *grad2 = malloc(m.n_params * 4);
  float x[B * 60];
  int32_t labels[B] = {2, 0, 1, 1};
  pst_model_init_params(&m, 7, params);
  for (int l = 1; l < m.n_layers; l++) {
    const pst_layer *L = &m.layers[l];
    t_fill(params + L->b_offset, L->b_count, 80 + l, 0.05, 0.2);
    if (L->kind == PST_LAYER_BATCHNORM) {
      t_fill(params + L->w_offset, L->w_count, 90 + l, 0.7, 1.3);
      t_fill(params + L->s_offset, L->s_count / 2, 95 + l, -0.3, 0.3);
      t_fill(params + L->s_offset + L->s_count / 2, L->s_count / 2, 99 + l, 0.5, 2.0);
    }
  }
  t_fill(x, B * 60, 29, -1, 1);
  pst_net *net = NULL;
  CHECK(pst_net_create(&m, cpu, B, &net) == 0);
  CHECK(pst_net_load_params(net, params) == 0);
  double loss = 0, loss2 = 0, eloss = 0;
  int correct = 0, correct2 = 0;
  CHECK(pst_net_train_step(net, x, labels, B, scale, grad, &loss, &correct) == 0);
  net_case c = {net, &m, params, x, labels, B, scale};
  /* Trained parameters only: a state entry is no gradient (the training loss does not
   * depend on the moving statistics at all). */
  int bad = 0;
  for (int l = 1; l < m.n_layers; l++) {
    const pst_layer *L = &m.layers[l];
    if (L->w_count)
      bad += t_gradcheck("bn net w", params + L->w_offset, grad + L->w_offset, L->w_count,
                         net_train_loss, &c);
    if (L->b_count)
      bad += t_gradcheck("bn net b", params + L->b_offset, grad + L->b_offset, L->b_count,
                         net_train_loss, &c);
  }
  CHECK(bad == 0);

  /* Evaluation normalises with the moving statistics, which are not this batch's. */
  CHECK(pst_net_load_params(net, params) == 0);
  CHECK(pst_net_evaluate(net, x, labels, B, &eloss, &correct2) == 0);
  CHECK(fabs(eloss - loss) > 1e-3 * loss);
  /* Undo the momentum and the weighting: the moving statistics become the batch's. */
  float *moved = malloc(m.n_params * 4);
  memcpy(moved, params, m.n_params * 4);
  int state = 0;
  for (int l = 1; l < m.n_layers; l++) {
    const pst_layer *L = &m.layers[l];
    for (size_t j = 0; j < L->s_count; j++) {
      size_t i = L->s_offset + j;
      moved[i] += grad[i] / ((1.0f - L->momentum) * scale * B);
      state++;
    }
  }
  CHECK(state == 2 * 3 + 2 * 5);
  CHECK(pst_net_load_params(net, moved) == 0);
  CHECK(pst_net_evaluate(net, x, labels, B, &eloss, &correct2) == 0);
  CHECK(fabs(eloss - loss) <= 1e-5 * loss && correct2 == correct);
  if (!(fabs(eloss - loss) <= 1e-5 * loss))
    fprintf(stderr, "  eval with the batch's statistics %.9g, training %.9g\n", eloss, loss);
  /* Training itself never reads the moving statistics. */
  CHECK(pst_net_train_step(net, x, labels, B, scale, grad2, &loss2, &correct2) == 0);
  CHECK(loss2 == loss);
  for (size_t i = 0; i < m.n_params; i++)
    if (!is_state(&m, i) && grad2[i] != grad[i]) {
      CHECK(0);
      break;
    }
  pst_net_log_placement(net);
  pst_net_destroy(net);

  /* The device-memory path gives the very same numbers, state entries included. */
  as_device = *cpu;
  as_device.host_memory = 0;
  as_device.alloc = dev_alloc;
  as_device.free = dev_free;
  as_device.describe = NULL;
  CHECK(pst_net_create(&m, &as_device, B, &net) == 0);
  CHECK(pst_net_load_params(net, params) == 0);
  CHECK(pst_net_train_step(net, x, labels, B, scale, grad2, &loss2, &correct2) == 0);
  CHECK(memcmp(grad, grad2, m.n_params * 4) == 0 && loss == loss2);
  pst_net_destroy(net);

  /* A backend without batch normalisation cannot run this model. */
  as_device.batchnorm_backward = NULL;
  CHECK(pst_net_create(&m, &as_device, B, &net) == -ENOTSUP && net == NULL);
  free(params), free(grad), free(grad2), free(moved);
}

/* Trains `spec` with plain SGD on a toy problem; returns the first and last losses. The
 * model's state entries get the pushed change added, as the ps does (ps/train/optim.h). */
static void train_toy(pst_backend *be, const char *spec, int image, double *first, double *last,
                      double *acc) {
  pst_model m;
  char err[256];
  CHECK(pst_model_parse(spec, "toy", &m, err, sizeof err) == 0);
  enum { B = 32, STEPS = 300 };
  const int in = m.input_size;
  float *params = malloc(m.n_params * 4), *grad = malloc(m.n_params * 4);
  float *x = malloc((size_t)B * in * 4);
  int32_t labels[B];
  pst_model_init_params(&m, 1, params);
  char *state = calloc(m.n_params, 1);
  for (size_t i = 0; i < m.n_params; i++) state[i] = (char)is_state(&m, i);
  pst_net *net = NULL;
  CHECK(pst_net_create(&m, be, B, &net) == 0);
  uint64_t rng = 99;
  *first = *last = 0;
  int right = 0;
  for (int step = 0; step < STEPS; step++) {
    for (int b = 0; b < B; b++) {
      float *xb = x + (size_t)b * in;
      for (int k = 0; k < in; k++) xb[k] = (float)t_uniform(&rng, -1, 1);
      if (image) {
        /* Class = which quadrant holds a bright 2x2 spot on a noisy 6x6 image. */
        int q = (int)(t_rand64(&rng) % 4), r0 = (q / 2) * 3 + 1, c0 = (q % 2) * 3 + 1;
        for (int i = 0; i < 2; i++)
          for (int j = 0; j < 2; j++) xb[(r0 + i) * 6 + c0 + j] = 3.0f;
        labels[b] = q;
      } else {
        /* Class = the larger of two fixed linear functions of x, or a third when both
         * are small. */
        float a = xb[0] + xb[1] - xb[2], bb = xb[3] - xb[0];
        labels[b] = (a < 0.3f && bb < 0.3f) ? 2 : a > bb ? 0 : 1;
      }
    }
    double loss = 0;
    int correct = 0;
    CHECK(pst_net_load_params(net, params) == 0);
    if (pst_net_train_step(net, x, labels, B, 1.0f / B, grad, &loss, &correct) != 0) {
      CHECK(0);
      break;
    }
    for (size_t i = 0; i < m.n_params; i++)
      params[i] = state[i] ? params[i] + grad[i] : params[i] - 0.1f * grad[i];
    if (step < 10) *first += loss / B / 10;
    if (step >= STEPS - 10) {
      *last += loss / B / 10;
      right += correct;
    }
  }
  *acc = right / (10.0 * B);
  pst_net_destroy(net);
  free(params), free(grad), free(x), free(state);
}

int main(void) {
  pst_log_init("net_test", PST_LOG_INFO);
  pst_backend *cpu = NULL;
  CHECK(pst_cpu_backend_create(1, &cpu) == 0);
  test_gradients(cpu);
  test_new_layer_gradients(cpu);
  test_graph_gradients(cpu);
  test_fan_in_sum(cpu);
  test_activation_and_no_bias(cpu);
  test_batchnorm(cpu);

  double first, last, acc;
  train_toy(cpu, "input 4\ndense 16 relu\ndense 3 softmax\n", 0, &first, &last, &acc);
  printf("mlp toy: loss %.3f -> %.3f, accuracy %.2f\n", first, last, acc);
  CHECK(last < 0.5 * first && acc > 0.8);
  train_toy(cpu,
            "input 6x6x1\nconv2d 4 3x3 padding=same relu\nmaxpool 2x2\nflatten\n"
            "dense 4 softmax\n",
            1, &first, &last, &acc);
  printf("cnn toy: loss %.3f -> %.3f, accuracy %.2f\n", first, last, acc);
  CHECK(last < 0.5 * first && acc > 0.9);
  /* The new layers learn too (dropout on in training, off in the accuracy). */
  train_toy(cpu,
            "input 6x6x1\nconv2d 8 3x3 padding=same relu6\navgpool 3x3\nflatten\n"
            "dropout 0.2\ndense 4 softmax\n",
            1, &first, &last, &acc);
  printf("relu6/avgpool/dropout toy: loss %.3f -> %.3f, accuracy %.2f\n", first, last, acc);
  CHECK(last < 0.5 * first && acc > 0.85);
  train_toy(cpu,
            "input 6x6x1\nconv2d 8 3x3 padding=same relu\nbatchnorm\nmaxpool 2x2\nflatten\n"
            "dense 8\nbatchnorm momentum=0.9\ndense 4 softmax\n",
            1, &first, &last, &acc);
  printf("batchnorm toy: loss %.3f -> %.3f, accuracy %.2f\n", first, last, acc);
  CHECK(last < 0.5 * first && acc > 0.9);
  /* A residual block and two concatenated towers learn as well. */
  train_toy(cpu,
            "input 6x6x1 name=x\nconv2d 4 3x3 padding=same relu name=a\n"
            "conv2d 4 3x3 padding=same name=b\nadd relu inputs=a,b name=r\n"
            "conv2d 2 1x1 relu inputs=x name=t\nconcatenate inputs=r,t\nmaxpool 2x2\nflatten\n"
            "dense 4 softmax\n",
            1, &first, &last, &acc);
  printf("residual/concatenate toy: loss %.3f -> %.3f, accuracy %.2f\n", first, last, acc);
  CHECK(last < 0.5 * first && acc > 0.9);
  cpu->destroy(cpu);
  return t_summary();
}
