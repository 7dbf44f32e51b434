/* The pipeline against one stage (issue 40): one step's gradient, loss and right answers
 * over 2 and 3 CPU stages with 4 micro-batches must match one stage's within 1e-5
 * relative (the L2 norm of the difference over the gradient's): mlp and cnn2 against the
 * plain whole-batch step, resnet20 (batch normalisation: statistics per micro-batch)
 * against the same micro-batching on one stage. Also: a residual edge over a boundary by
 * hand, evaluation, the layers' gradients announced in order, the memory figures, and the
 * refusals of bad options. Exits non-zero on any mismatch. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "kernels/backend.h"
#include "kernels/net.h"
#include "kernels/net_stage.h"
#include "kernels/pipeline/pipeline.h"
#include "kernels/pipeline/test_jobs.h"
#include "kernels/testing.h"
#include "model/model.h"

typedef struct {
  size_t last;
  int calls, out_of_order, ended;
} ready_log;

static void on_ready(void *ctx, size_t from) {
  ready_log *r = ctx;
  /* Stages call from their own threads, one after the other (the stage below waits for
   * the one above): no two at once. */
  if (r->calls > 0 && from > r->last) r->out_of_order++;
  r->last = from;
  r->calls++;
  if (from == 0) r->ended = 1;
}

static void log_ready(pst_pipe *p, void *ctx) {
  if (ctx) pst_pipe_on_grad_ready(p, on_ready, ctx);
}

static void check_peaks(pst_pipe *p, void *ctx) {
  (void)ctx;
  for (int s = 0; s < pst_pipe_stages(p); s++) CHECK(pst_pipe_stage_peak(p, s) > 0);
}

/* One step and one evaluation through a pipeline of these options on CPU devices. */
static int run_pipe(const job *j, pst_pipe_options o, outcome *out, ready_log *rl) {
  o.device = "cpu";
  return run_pipe_with(j, o, out, log_ready, check_peaks, rl);
}

/* The plain net's step and evaluation, the reference without micro-batches. */
static int run_net(const job *j, outcome *out) {
  pst_backend *be;
  pst_net *net;
  if (pst_cpu_backend_create(1, &be) != 0) return -1;
  int rc = pst_net_create(j->m, be, j->batch, &net);
  out->grad = calloc(j->m->n_params, sizeof(float));
  if (rc == 0) rc = pst_net_load_params(net, j->params);
  pst_net_set_seed(net, 7);
  if (rc == 0)
    rc = pst_net_train_step(net, j->x, j->y, j->batch, 1.0f / (float)j->batch, out->grad,
                            &out->loss, &out->correct);
  if (rc == 0) rc = pst_net_evaluate(net, j->x, j->y, j->batch, &out->eval_loss, &out->eval_correct);
  pst_net_destroy(net);
  be->destroy(be);
  return rc;
}

static void compare(const char *what, const job *j, const outcome *a, const outcome *ref) {
  double g = rel_diff(a->grad, ref->grad, j->m->n_params);
  double l = fabs(a->loss - ref->loss) / fmax(fabs(ref->loss), 1e-30);
  printf("%-44s gradient rel. diff %.2e, loss rel. diff %.2e, correct %d/%d\n", what, g, l,
         a->correct, ref->correct);
  CHECK(g <= 1e-5);
  CHECK(l <= 1e-5);
  CHECK(a->correct == ref->correct);
  CHECK(fabs(a->eval_loss - ref->eval_loss) <= 1e-5 * fabs(ref->eval_loss));
  CHECK(a->eval_correct == ref->eval_correct);
}

static void parity(const char *name, int batch, int micro_reference) {
  static pst_model m;
  char err[256];
  if (pst_model_load(name, &m, err, sizeof err) != 0) {
    fprintf(stderr, "%s: %s\n", name, err);
    CHECK(0);
    return;
  }
  job j = make_job(&m, batch, 11);
  outcome ref = {0};
  pst_pipe_options one = {.stages = 1, .micro_batches = micro_reference ? 4 : 1};
  CHECK((micro_reference ? run_pipe(&j, one, &ref, NULL) : run_net(&j, &ref)) == 0);
  if (!micro_reference) {
    /* One stage, four micro-batches: the accumulation alone. */
    outcome mb = {0};
    pst_pipe_options o = {.stages = 1, .micro_batches = 4};
    CHECK(run_pipe(&j, o, &mb, NULL) == 0);
    char what[64];
    snprintf(what, sizeof what, "%s: 1 stage, 4 micro-batches", name);
    compare(what, &j, &mb, &ref);
    free(mb.grad);
  }
  for (int n = 2; n <= 3; n++) {
    outcome got = {0};
    ready_log rl = {0};
    pst_pipe_options o = {.stages = n, .micro_batches = 4};
    CHECK(run_pipe(&j, o, &got, &rl) == 0);
    char what[64];
    snprintf(what, sizeof what, "%s: %d stages, 4 micro-batches", name, n);
    compare(what, &j, &got, &ref);
    CHECK(rl.out_of_order == 0 && rl.ended && rl.calls > 1);
    free(got.grad);
  }
  free(ref.grad);
  free_job(&j);
}

/* resnet20 cut by hand inside residual blocks, so that the skip edges cross the
 * boundaries (and one passes through a middle stage's range). */
static void residual_cut(void) {
  static pst_model m;
  char err[256], place[128];
  CHECK(pst_model_load("resnet20:input=16x16x3", &m, err, sizeof err) == 0);
  job j = make_job(&m, 8, 5);
  outcome ref = {0}, got = {0};
  pst_pipe_options one = {.micro_batches = 2};
  CHECK(run_pipe(&j, one, &ref, NULL) == 0);
  /* Layer 4 is the first block's first convolution's output side: 2-5 is inside it. */
  snprintf(place, sizeof place, "1-5=cpu,6-8=cpu,9-%d=cpu", m.n_layers - 1);
  pst_pipe_options o = {.place = place, .micro_batches = 2};
  CHECK(run_pipe(&j, o, &got, NULL) == 0);
  compare("resnet20 16x16: cut inside blocks by --place", &j, &got, &ref);
  free(ref.grad);
  free(got.grad);
  free_job(&j);
}

static void refusals(void) {
  static pst_model m;
  char err[256], note[256];
  CHECK(pst_model_load("mlp", &m, err, sizeof err) == 0);
  pst_pipe *p = NULL;
  pst_pipe_options o = {.device = "cpu", .threads = 1, .stages = 5};
  CHECK(pst_pipe_create(&m, &o, 8, &p, note, sizeof note, err, sizeof err) == -EINVAL);
  printf("--stages 5 on mlp: %s\n", err);
  o = (pst_pipe_options){.device = "cpu", .threads = 1, .place = "1=cpu,3=cpu"};
  CHECK(pst_pipe_create(&m, &o, 8, &p, note, sizeof note, err, sizeof err) == -EINVAL);
  printf("--place 1=cpu,3=cpu: %s\n", err);
  o = (pst_pipe_options){.device = "cpu", .threads = 1, .place = "1-2=cpu"};
  CHECK(pst_pipe_create(&m, &o, 8, &p, note, sizeof note, err, sizeof err) == -EINVAL);
  o = (pst_pipe_options){.device = "cpu", .threads = 1, .place = "1-2=cpu:3,3=cpu",
                         .virtual_devices = 2};
  CHECK(pst_pipe_create(&m, &o, 8, &p, note, sizeof note, err, sizeof err) == -EINVAL);
  o = (pst_pipe_options){.device = "cpu", .threads = 1, .micro_batches = 9};
  CHECK(pst_pipe_create(&m, &o, 8, &p, note, sizeof note, err, sizeof err) == -EINVAL);
  CHECK(p == NULL);
}

/* The predicted need is what creation allocates, stage by stage; a cap below one
 * device's need refuses one stage and takes two. */
static void memory(void) {
  static pst_model m;
  char err[512], note[512];
  CHECK(pst_model_load("cnn2", &m, err, sizeof err) == 0);
  pst_backend *be;
  CHECK(pst_cpu_backend_create(1, &be) == 0);
  int cuts[][2] = {{1, 8}, {1, 4}, {4, 8}, {3, 7}};
  for (int c = 0; c < 4; c++) {
    pst_stage_need need;
    pst_net *net;
    CHECK(pst_net_stage_need(&m, cuts[c][0], cuts[c][1], 32, 4, 1, &need) == 0);
    CHECK(pst_net_create_stage(&m, be, 32, cuts[c][0], cuts[c][1], 4, &net) == 0);
    CHECK(need.total == pst_net_stage_bytes(net));
    pst_net_destroy(net);
  }
  be->destroy(be);
  pst_plan_need whole;
  CHECK(pst_plan_stage_need(&m, 1, m.n_layers, 256, 1, 1, &whole) == 0);
  size_t cap_mib = (whole.total >> 20) * 3 / 4; /* below one device's need */
  pst_pipe *p = NULL;
  pst_pipe_options o = {.device = "cpu", .threads = 1, .device_mem_mib = cap_mib};
  CHECK(pst_pipe_create(&m, &o, 256, &p, note, sizeof note, err, sizeof err) == -ENOSPC);
  printf("cnn2 at 256 under a %zu MiB cap: %s\n", cap_mib, err);
  o.stages = 2;
  CHECK(pst_pipe_create(&m, &o, 256, &p, note, sizeof note, err, sizeof err) == 0);
  if (p) {
    for (int s = 0; s < 2; s++) CHECK(pst_pipe_stage_peak(p, s) <= cap_mib << 20);
    printf("cnn2 on 2 stages: %s\n", note);
  }
  pst_pipe_destroy(p);
}

/* mobilenetv2 at batch 256 under a cap below its one-device need: refused on one device
 * with the figures, and one training step on the stages that fit, each under the cap. */
static void too_big(void) {
  static pst_model m;
  char err[512], note[512];
  CHECK(pst_model_load("mobilenetv2:input=28x28x1", &m, err, sizeof err) == 0);
  pst_plan_need whole;
  CHECK(pst_plan_stage_need(&m, 1, m.n_layers, 256, 1, 1, &whole) == 0);
  size_t cap_mib = (whole.total >> 20) * 2 / 3;
  pst_pipe *p = NULL;
  pst_pipe_options o = {.device = "cpu", .threads = 1, .device_mem_mib = cap_mib};
  CHECK(pst_pipe_create(&m, &o, 256, &p, note, sizeof note, err, sizeof err) == -ENOSPC);
  printf("mobilenetv2 at 256, one device under a %zu MiB cap: %s\n", cap_mib, err);
  o.stages = 2;
  o.virtual_devices = 2;
  CHECK(pst_pipe_create(&m, &o, 256, &p, note, sizeof note, err, sizeof err) == 0);
  if (p == NULL) return;
  job j = make_job(&m, 256, 3);
  float *grad = calloc(m.n_params, sizeof(float));
  double loss = 0;
  int correct = 0;
  CHECK(pst_pipe_load_params(p, j.params) == 0);
  CHECK(pst_pipe_train_step(p, j.x, j.y, 256, 1.0f / 256, grad, &loss, &correct) == 0);
  CHECK(isfinite(loss) && loss > 0);
  for (int s = 0; s < 2; s++) {
    printf("mobilenetv2 stage %d peak %.1f MiB (cap %zu MiB)\n", s,
           (double)pst_pipe_stage_peak(p, s) / 1048576.0, cap_mib);
    CHECK(pst_pipe_stage_peak(p, s) <= cap_mib << 20);
  }
  printf("mobilenetv2 on 2 stages: %s; loss %.4f\n", note, loss / 256);
  free(grad);
  free_job(&j);
  pst_pipe_destroy(p);
}

int main(void) {
  pst_log_init("pipeline_test", 0);
  parity("mlp", 32, 0);
  parity("cnn2", 16, 0);
  parity("resnet20:input=16x16x3", 8, 1);
  residual_cut();
  refusals();
  memory();
  too_big();
  return t_summary();
}
