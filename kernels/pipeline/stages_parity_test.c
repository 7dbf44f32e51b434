/* Stages that hand their cuts off by copying (issue 40): the path stages on CUDA devices
 * take, where each stage keeps its own buffers for the tensors it takes from below and
 * for the gradients it gets from above, copied by the receiving backend's copy_from
 * (kernels/pipeline/pipe.c, kernels/cuda/peer.cu). One step's gradient, loss and right
 * answers, and an evaluation, must match one stage's within 1e-5 relative (the L2 norm of
 * the difference over the reference's): mlp and cnn2 over 2 stages with 4 micro-batches
 * against one stage with 4 micro-batches (the hand-off alone) and with one (the issue's
 * case), and resnet20 cut inside its residual blocks over 3 stages (skip edges across the
 * boundaries, one passing through the middle stage) against one stage with the same 2
 * micro-batches (batch normalisation: statistics per micro-batch).
 *
 * Always on the CPU: cpu:0 .. cpu:2 with the copies forced (pst_pipe_options.copy_cuts),
 * the CPU backend's copy_from being memcpy, so the buffers, bindings, rows and order of the
 * hand-off are checked on every machine. Then on PSTRAIN_PARITY_DEVICE (cuda:0 unless set;
 * "cpu" stops after the CPU cases) split into virtual GPU devices cuda:N.0 .. cuda:N.2
 * (--virtual-devices, each instance its own stream, handles and a share of
 * --gpu-memory-limit), against one stage on cuda:N: the same-GPU device-to-device copies
 * of peer.cu, then again with each of its other ways forced ($PSTRAIN_CUDA_COPY=peer:
 * cudaMemcpyPeerAsync; =staged: through pinned host memory), so that one GPU checks all
 * three. Without a usable GPU those cases print "SKIP: <why>" and pass, unless
 * PSTRAIN_REQUIRE_GPU=1 (gpu-check). NOT RUN ON A GPU yet: the GPU cases have only been
 * compiled; `pstrain gpu-check` runs them. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "kernels/backend.h"
#include "kernels/device.h"
#include "kernels/pipeline/pipeline.h"
#include "kernels/pipeline/test_jobs.h"
#include "kernels/testing.h"
#include "model/model.h"

/* One step and one evaluation through a pipeline of these options. */
static int run_pipe(const job *j, pst_pipe_options o, outcome *out) {
  return run_pipe_with(j, o, out, NULL, NULL, NULL);
}

static void compare(const char *what, const job *j, const outcome *a, const outcome *ref) {
  double g = rel_diff(a->grad, ref->grad, j->m->n_params);
  double l = fabs(a->loss - ref->loss) / fmax(fabs(ref->loss), 1e-30);
  double e = fabs(a->eval_loss - ref->eval_loss) / fmax(fabs(ref->eval_loss), 1e-30);
  printf("%-60s gradient relative error %.2e, loss %.2e, evaluation %.2e, correct %d/%d\n",
         what, g, l, e, a->correct, ref->correct);
  CHECK(g <= 1e-5);
  CHECK(l <= 1e-5);
  CHECK(e <= 1e-5);
  CHECK(a->correct == ref->correct);
  CHECK(a->eval_correct == ref->eval_correct);
}

/* The stages' devices: on the CPU cpu:0 .. with the copies forced; on a GPU its virtual
 * devices, each with a share of 3 GiB (the models here need a few MiB). */
static pst_pipe_options stages_on(const char *device, int vdevs) {
  pst_pipe_options o = {.device = device, .virtual_devices = vdevs};
  if (strncmp(device, "cuda", 4) == 0)
    o.gpu_memory_limit_mib = 3072;
  else
    o.copy_cuts = 1;
  return o;
}

/* mlp or cnn2: 2 stages, 4 micro-batches, against one stage with 4 and with 1. */
static void two_stages(const char *device, const char *name, int batch) {
  static pst_model m;
  char err[256], what[160];
  if (pst_model_load(name, &m, err, sizeof err) != 0) {
    fprintf(stderr, "%s: %s\n", name, err);
    CHECK(0);
    return;
  }
  job j = make_job(&m, batch, 11);
  outcome one_m = {0}, one = {0}, got = {0};
  pst_pipe_options o = {.device = device, .stages = 1, .micro_batches = 4};
  CHECK(run_pipe(&j, o, &one_m) == 0);
  o.micro_batches = 1;
  CHECK(run_pipe(&j, o, &one) == 0);
  o = stages_on(device, 2);
  o.stages = 2;
  o.micro_batches = 4;
  if (run_pipe(&j, o, &got) == 0) {
    snprintf(what, sizeof what, "%s on %s: 2 stages, M = 4 vs 1 stage, M = 4", name, device);
    compare(what, &j, &got, &one_m);
    snprintf(what, sizeof what, "%s on %s: 2 stages, M = 4 vs 1 stage, M = 1", name, device);
    compare(what, &j, &got, &one);
  } else {
    CHECK(0);
  }
  free(one_m.grad);
  free(one.grad);
  free(got.grad);
  free_job(&j);
}

/* resnet20 16x16 cut inside blocks by --place over 3 virtual devices. */
static void residual_cut(const char *device) {
  static pst_model m;
  char err[256], place[160], what[160];
  CHECK(pst_model_load("resnet20:input=16x16x3", &m, err, sizeof err) == 0);
  job j = make_job(&m, 8, 5);
  outcome ref = {0}, got = {0};
  pst_pipe_options one = {.device = device, .micro_batches = 2};
  CHECK(run_pipe(&j, one, &ref) == 0);
  int gpu = 0, cuda = strncmp(device, "cuda", 4) == 0;
  if (cuda && device[4] == ':') gpu = atoi(device + 5);
  if (cuda)
    snprintf(place, sizeof place, "1-5=cuda:%d.0,6-8=cuda:%d.1,9-%d=cuda:%d.2", gpu, gpu,
             m.n_layers - 1, gpu);
  else
    snprintf(place, sizeof place, "1-5=cpu:0,6-8=cpu:1,9-%d=cpu:2", m.n_layers - 1);
  pst_pipe_options o = stages_on(device, 3);
  o.place = place;
  o.micro_batches = 2;
  if (run_pipe(&j, o, &got) == 0) {
    snprintf(what, sizeof what, "resnet20 16x16 on %s: 3 stages cut inside blocks", device);
    compare(what, &j, &got, &ref);
  } else {
    CHECK(0);
  }
  free(ref.grad);
  free(got.grad);
  free_job(&j);
}

static void cases(const char *device) {
  two_stages(device, "mlp", 32);
  two_stages(device, "cnn2", 16);
  residual_cut(device);
}

int main(void) {
  pst_log_init("stages_parity_test", 0);
  cases("cpu");
  const char *spec = getenv("PSTRAIN_PARITY_DEVICE");
  spec = spec && spec[0] ? spec : "cuda:0";
  if (strcmp(spec, "cpu") == 0) return t_summary();
  pst_backend *be = NULL;
  char note[512];
  const char *req = getenv("PSTRAIN_REQUIRE_GPU");
  if (pst_device_open(spec, 0, 1, &be, note, sizeof note) != 0) {
    if (req && strcmp(req, "1") == 0) {
      fprintf(stderr, "FAIL: PSTRAIN_REQUIRE_GPU=1 but %s\n", note);
      CHECK(0);
    } else {
      printf("SKIP: the GPU cases: %s\n", note);
    }
    return t_summary();
  }
  printf("%s\n", note);
  be->destroy(be);
  /* Each way kernels/cuda/peer.cu copies, forced in turn (read as each backend is made):
   * by where the memory is (device to device on one GPU), cudaMemcpyPeerAsync, and through
   * pinned host memory. */
  const char *ways[] = {"", "peer", "staged"};
  for (int w = 0; w < 3; w++) {
    setenv("PSTRAIN_CUDA_COPY", ways[w], 1);
    printf("PSTRAIN_CUDA_COPY=%s\n", ways[w]);
    cases(spec);
  }
  unsetenv("PSTRAIN_CUDA_COPY");
  return t_summary();
}
