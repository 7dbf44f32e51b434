/* A failing operation names itself (kernels/net.h, pst_net_error): through a view of the CPU
 * backend whose chosen operation fails with a reason of its own (backend.h, last_error), the
 * net's message must be one line that carries that reason and names the failing layer and
 * its shape; without last_error it still names the layer. A call that succeeds leaves no
 * message. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "kernels/backend.h"
#include "kernels/net.h"
#include "kernels/testing.h"
#include "model/model.h"

#define REASON "fakeLibCall: FAKE_STATUS_NOT_SUPPORTED (fake.cu:7)"

/* A device-memory view of the CPU backend whose batch-norm inference, conv2d backward or
 * add fails (which one: g_fail), saying REASON when g_say is set. */
static pst_backend g_view;
static pst_backend *g_cpu;
static enum { FAIL_NONE, FAIL_BN_INFER, FAIL_CONV_BACKWARD, FAIL_ADD } g_fail;
static int g_say;
static char g_reason[128];

static void *dev_alloc(pst_backend *b, size_t n) { return malloc(n ? n : 1); }
static void dev_free(pst_backend *b, void *p) { free(p); }
static const char *last_error(pst_backend *b) { return g_reason; }

static int failing(void) {
  snprintf(g_reason, sizeof g_reason, "%s", g_say ? REASON : "");
  return -EIO;
}

static int bn_infer(pst_backend *b, const float *x, const float *gamma, const float *beta,
                    const float *moving, float *y, int rows, int channels, float eps) {
  g_reason[0] = '\0';
  if (g_fail == FAIL_BN_INFER) return failing();
  return g_cpu->batchnorm_forward_infer(g_cpu, x, gamma, beta, moving, y, rows, channels, eps);
}

static int conv_backward(pst_backend *b, const pst_window_shape *s, const float *x,
                         const float *w, const float *dy, float *dx, float *dw, float *db) {
  g_reason[0] = '\0';
  if (g_fail == FAIL_CONV_BACKWARD) return failing();
  return g_cpu->conv2d_backward(g_cpu, s, x, w, dy, dx, dw, db);
}

static int add(pst_backend *b, const float *x0, const float *x1, float *y, size_t n) {
  g_reason[0] = '\0';
  if (g_fail == FAIL_ADD) return failing();
  return g_cpu->add(g_cpu, x0, x1, y, n);
}

static const char *spec =
    "input 6x5x2 name=x\n"
    "conv2d 3 3x3 padding=same relu name=first_conv\n"
    "batchnorm name=the_bn\n"
    "conv2d 3 3x3 padding=same name=second_conv\n"
    "add relu inputs=first_conv,second_conv name=the_add\n"
    "flatten\n"
    "dense 4 softmax name=out\n";

static int one_line(const char *s) { return s[0] != '\0' && strchr(s, '\n') == NULL; }

/* The message names the layer (by name) and carries `want` (the backend's reason or a
 * number of the shape) when want is not NULL. */
static void check_message(pst_net *net, const char *layer, const char *want, const char *want2) {
  const char *e = pst_net_error(net);
  printf("  %s\n", e);
  CHECK(one_line(e));
  CHECK(strstr(e, layer) != NULL);
  if (want) CHECK(strstr(e, want) != NULL);
  if (want2) CHECK(strstr(e, want2) != NULL);
}

int main(void) {
  pst_log_init("net_errors_test", PST_LOG_INFO);
  CHECK(pst_cpu_backend_create(1, &g_cpu) == 0);
  g_view = *g_cpu;
  g_view.host_memory = 0;
  g_view.alloc = dev_alloc;
  g_view.free = dev_free;
  g_view.describe = NULL;
  g_view.last_error = last_error;
  g_view.batchnorm_forward_infer = bn_infer;
  g_view.conv2d_backward = conv_backward;
  g_view.add = add;

  static pst_model m;
  char err[256];
  CHECK(pst_model_parse(spec, "errors", &m, err, sizeof err) == 0);
  enum { B = 4 };
  float *params = malloc(m.n_params * 4), *grad = malloc(m.n_params * 4);
  float x[B * 60];
  int32_t labels[B] = {0, 1, 2, 3};
  pst_model_init_params(&m, 3, params);
  t_fill(x, B * 60, 5, -1, 1);
  pst_net *net = NULL;
  CHECK(pst_net_create(&m, &g_view, B, &net) == 0);
  if (net == NULL) return t_summary();

  /* Before any weights: an error with a message; then a clean step leaves none. */
  double loss;
  int right;
  CHECK(pst_net_evaluate(net, x, labels, B, &loss, &right) == -EINVAL);
  CHECK(one_line(pst_net_error(net)));
  CHECK(pst_net_load_params(net, params) == 0);
  CHECK(pst_net_train_step(net, x, labels, B, 0.25f, grad, &loss, &right) == 0);
  CHECK(pst_net_error(net)[0] == '\0');

  /* The batch norm's inference at batch 3: rows 3 x 6 x 5 = 90 of 3 channels. */
  g_say = 1;
  g_fail = FAIL_BN_INFER;
  CHECK(pst_net_evaluate(net, x, labels, 3, &loss, &right) == -EIO);
  check_message(net, "the_bn", REASON, "90 x 3");
  /* Backward of the second convolution, in a training step. */
  g_fail = FAIL_CONV_BACKWARD;
  CHECK(pst_net_train_step(net, x, labels, B, 0.25f, grad, &loss, &right) == -EIO);
  check_message(net, "second_conv", REASON, NULL);
  /* The add layer's forward; and, without a reason from the backend, still the layer. */
  g_fail = FAIL_ADD;
  CHECK(pst_net_train_step(net, x, labels, B, 0.25f, grad, &loss, &right) == -EIO);
  check_message(net, "the_add", REASON, NULL);
  g_say = 0;
  CHECK(pst_net_train_step(net, x, labels, B, 0.25f, grad, &loss, &right) == -EIO);
  check_message(net, "the_add", NULL, NULL);
  g_fail = FAIL_NONE;
  CHECK(pst_net_train_step(net, x, labels, B, 0.25f, grad, &loss, &right) == 0);
  CHECK(pst_net_error(net)[0] == '\0');

  pst_net_destroy(net);
  free(params), free(grad);
  g_cpu->destroy(g_cpu);
  return t_summary();
}
