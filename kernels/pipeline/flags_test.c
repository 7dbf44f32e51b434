/* The pipeline's flags checked before anything starts (flags.h): every bad value of
 * --stages, --place, --micro-batches, --virtual-devices and the stages' devices is refused
 * with one line naming its flag, without the model (where the worker reads its flags) and
 * with it (where `pstrain local` and the pipeline's creation know it); good ones pass. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kernels/pipeline/flags.h"
#include "kernels/testing.h"
#include "model/model.h"

static int one_line(const char *s) { return s[0] != '\0' && strchr(s, '\n') == NULL; }

/* o refused with m (NULL: none) at batch, the reason one line naming flag. */
static void refused(const char *what, pst_pipe_options o, const pst_model *m, int batch,
                    const char *flag) {
  char err[400] = "";
  int rc = pst_pipe_check_flags(&o, m, batch, err, sizeof err);
  CHECK(rc == -EINVAL);
  CHECK(one_line(err) && strstr(err, flag) != NULL);
  if (rc != -EINVAL || !strstr(err, flag)) fprintf(stderr, "%s: rc %d, \"%s\"\n", what, rc, err);
  else printf("%s: %s\n", what, err);
}

static void passes(const char *what, pst_pipe_options o, const pst_model *m, int batch) {
  char err[400] = "";
  int rc = pst_pipe_check_flags(&o, m, batch, err, sizeof err);
  CHECK(rc == 0);
  if (rc != 0) fprintf(stderr, "%s: refused: %s\n", what, err);
}

int main(void) {
  static pst_model mlp;
  char err[256];
  CHECK(pst_model_load("mlp", &mlp, err, sizeof err) == 0); /* layers 1-3 */
  const pst_pipe_options base = {.device = "cpu", .threads = 1};
  pst_pipe_options o;

  /* Without the model: syntax, ranges, names, the devices there are. */
  o = base, o.stages = 17;
  refused("--stages 17", o, NULL, 0, "--stages");
  o = base, o.stages = -1;
  refused("--stages -1", o, NULL, 0, "--stages");
  o = base, o.micro_batches = 9;
  refused("--micro-batches 9 at batch 8", o, NULL, 8, "--micro-batches");
  o = base, o.micro_batches = -2;
  refused("--micro-batches -2", o, NULL, 0, "--micro-batches");
  o = base, o.virtual_devices = 257;
  refused("--virtual-devices 257", o, NULL, 0, "--virtual-devices");
  o = base, o.stages = 3, o.virtual_devices = 2;
  refused("--stages 3 on 2 virtual devices", o, NULL, 0, "--stages");
  const char *bad_place[] = {"1=cpu,3=cpu", "2-3=cpu", "1-2", "1-2=,3=cpu", "x=cpu",
                             "1-2=cpu,", "3-1=cpu", "1-2=gpu,3=cpu", "1-2=cpu:2,3=cpu:0",
                             "1-2=cpu:x,3=cpu", " 1=cpu", "+1=cpu"};
  for (size_t i = 0; i < sizeof bad_place / sizeof *bad_place; i++) {
    o = base, o.place = bad_place[i], o.virtual_devices = 2;
    refused(bad_place[i], o, NULL, 0, "--place");
  }
  o = base, o.place = "1=cpu:0,2-3=cpu:1"; /* no --virtual-devices */
  refused("cpu:N without --virtual-devices", o, NULL, 0, "--virtual-devices");
  o = base, o.place = "1=cpu,2-3=cpu", o.stages = 3;
  refused("--place of 2 stages with --stages 3", o, NULL, 0, "--stages");
  o = base, o.device = "cuda:0", o.stages = 2;
  refused("2 stages sharing cuda:0", o, NULL, 0, "CUDA");
  o = base, o.place = "1=cpu,2-3=cuda:1";
  refused("stages on cpu and cuda:1", o, NULL, 0, "CUDA");
  o = base, o.place = "1=cuda:0,2-3=cuda:0";
  refused("two stages on cuda:0", o, NULL, 0, "CUDA");
  o = base, o.place = "1=cuda:0,2-3=cuda:0.1", o.virtual_devices = 2, o.gpu_memory_limit_mib = 1024;
  refused("cuda:0 and its cuda:0.1", o, NULL, 0, "CUDA");
  o = base, o.place = "1=cuda:0.1,2-3=cuda:0.1", o.virtual_devices = 2, o.gpu_memory_limit_mib = 1024;
  refused("two stages on cuda:0.1", o, NULL, 0, "CUDA");
  o = base, o.place = "1=cuda:0.0,2-3=cuda:0.2", o.virtual_devices = 2, o.gpu_memory_limit_mib = 1024;
  refused("cuda:0.2 of 2 virtual devices", o, NULL, 0, "--virtual-devices 2");
  o = base, o.place = "1=cuda:0.0,2-3=cuda:0.1";
  refused("cuda:0.1 without --virtual-devices", o, NULL, 0, "--virtual-devices");
  o = base, o.place = "1=cuda:0.0,2-3=cuda:0.x", o.virtual_devices = 2, o.gpu_memory_limit_mib = 1024;
  refused("cuda:0.x", o, NULL, 0, "cuda:N.K");
  o = base, o.place = "1=cuda:0.0,2-3=cuda:0.1", o.virtual_devices = 2;
  refused("virtual GPU devices without a cap", o, NULL, 0, "--gpu-memory-limit");
  o = base, o.device = "cuda:1", o.stages = 2, o.virtual_devices = 2;
  refused("--virtual-devices on cuda:1 without a cap", o, NULL, 0, "--gpu-memory-limit");
  o = base, o.device = "cuda", o.stages = 2, o.virtual_devices = 4, o.gpu_memory_limit_mib = 3;
  refused("a split under 1 MiB", o, NULL, 0, "under 1 MiB");
  o = base, o.device = "tpu", o.stages = 2;
  refused("--device tpu", o, NULL, 0, "bad device");

  /* With the model: its layers. */
  o = base, o.stages = 4;
  refused("--stages 4 on mlp", o, &mlp, 0, "3 layers");
  o = base, o.place = "1=cpu,2=cpu";
  refused("--place leaving layer 3 out", o, &mlp, 0, "on no device");
  o = base, o.place = "1=cpu,2-4=cpu";
  refused("--place past layer 3", o, &mlp, 0, "--place");

  /* Good ones: without the model what the model may still refuse passes. */
  o = base, o.stages = 16;
  passes("--stages 16 without the model", o, NULL, 0);
  o = base, o.stages = 3, o.micro_batches = 8;
  passes("--stages 3 --micro-batches 8 at batch 8 on mlp", o, &mlp, 8);
  o = base, o.place = "1=cpu:1,2-3=cpu:0", o.virtual_devices = 2, o.stages = 2;
  passes("--place on cpu:1, cpu:0", o, &mlp, 128);
  o = base, o.place = "1-2=cpu,3=null";
  passes("--place on cpu, null", o, &mlp, 0);
  o = base, o.device = "cuda:0";
  passes("one stage on cuda:0", o, NULL, 0);
  o = base, o.device = "cuda:0", o.stages = 2, o.virtual_devices = 2, o.gpu_memory_limit_mib = 2048;
  passes("2 stages on cuda:0 split in 2", o, &mlp, 128);
  o = base, o.place = "1=cuda:0.1,2-3=cuda:0.0", o.virtual_devices = 2, o.device_mem_mib = 512;
  passes("--place on cuda:0.1, cuda:0.0", o, &mlp, 128);
  o = base, o.place = "1=cuda:0,2-3=cuda:1";
  passes("--place on cuda:0, cuda:1", o, &mlp, 128);
  /* Each virtual GPU device's cap: the GPU's split, or --device-mem, the smaller. */
  o = base, o.virtual_devices = 2, o.gpu_memory_limit_mib = 2048;
  CHECK(pst_pipe_device_cap_mib(&o, "cuda:0.1") == 1024);
  CHECK(pst_pipe_device_cap_mib(&o, "cuda:0") == 0);
  o.device_mem_mib = 512;
  CHECK(pst_pipe_device_cap_mib(&o, "cuda:0.1") == 512);
  CHECK(pst_pipe_device_cap_mib(&o, "cpu:1") == 512);
  char name[32];
  o = base, o.device = "cuda:3";
  CHECK(strcmp(pst_pipe_virtual_device(&o, 1, name, sizeof name), "cuda:3.1") == 0);
  o.device = "cpu";
  CHECK(strcmp(pst_pipe_virtual_device(&o, 1, name, sizeof name), "cpu:1") == 0);
  o = base, o.device = "auto", o.stages = 2; /* auto's choice is known once opened */
  passes("2 stages on auto", o, NULL, 0);
  o = base, o.place = "1=cpu";
  passes("--place 1=cpu without the model", o, NULL, 0);
  pst_stage_plan plan;
  CHECK(pst_plan_parse_place(&mlp, "1-2=cpu:0,3=cpu:1", &plan, err, sizeof err) == 0);
  CHECK(plan.n == 2 && plan.lo[0] == 1 && plan.lo[1] == 3 && plan.lo[2] == 4);
  CHECK(strcmp(plan.device[1], "cpu:1") == 0);
  return t_summary();
}
