/* The pipeline's flags checked (flags.h). */
#include "kernels/pipeline/flags.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device_spec.h"

/* "layer A" or "layers A-B", for the messages. */
static const char *layers_text(int a, int b, char *out, size_t len) {
  if (a == b) snprintf(out, len, "layer %d", a);
  else snprintf(out, len, "layers %d-%d", a, b);
  return out;
}

/* Parses a layer index at *s, advancing it; -1 when there is none. */
static int layer_number(const char **s) {
  char *end;
  if (**s < '0' || **s > '9') return -1; /* no sign, no space: strtol would take them */
  long v = strtol(*s, &end, 10);
  if (end == *s || v < 0 || v > 100000) return -1;
  *s = end;
  return (int)v;
}

int pst_plan_parse_place(const pst_model *m, const char *text, pst_stage_plan *plan, char *err,
                         size_t errlen) {
  memset(plan, 0, sizeof *plan);
  int last = m ? m->n_layers - 1 : 100000, next = 1;
  char example[64] = "1-4=cpu:0,5-9=cpu:1";
  if (m) snprintf(example, sizeof example, "1-%d=cpu:0,%d-%d=cpu:1", last / 2, last / 2 + 1, last);
  const char *s = text;
  if (!*s) {
    snprintf(err, errlen, "--place: empty; give LAYERS=DEVICE,... (e.g. %s)", example);
    return -EINVAL;
  }
  while (*s) {
    if (plan->n == PST_PIPE_MAX_STAGES) {
      snprintf(err, errlen, "--place: more than %d stages", PST_PIPE_MAX_STAGES);
      return -EINVAL;
    }
    int a = layer_number(&s), b = a;
    if (a >= 0 && *s == '-') {
      s++;
      b = layer_number(&s);
    }
    if (a < 0 || b < 0 || *s != '=') {
      snprintf(err, errlen, "--place: \"%.100s\" is not LAYERS=DEVICE,... (e.g. %s)", text,
               example);
      return -EINVAL;
    }
    s++;
    size_t len = strcspn(s, ",");
    if (len == 0 || len >= PST_PIPE_DEVICE_LEN) {
      char r[40];
      snprintf(err, errlen, "--place: %s ha%s no device (or a name too long)",
               layers_text(a, b, r, sizeof r), a == b ? "s" : "ve");
      return -EINVAL;
    }
    if (a != next || b < a || b > last) {
      char r[40];
      if (m)
        snprintf(err, errlen,
                 "--place: %s do%s not follow on: the stages must be contiguous, in order, "
                 "from layer 1 to layer %d (the next stage must start at layer %d)",
                 layers_text(a, b, r, sizeof r), a == b ? "es" : "", last, next);
      else
        snprintf(err, errlen,
                 "--place: %s do%s not follow on: the stages must be contiguous and in "
                 "order, from layer 1 (the next stage must start at layer %d)",
                 layers_text(a, b, r, sizeof r), a == b ? "es" : "", next);
      return -EINVAL;
    }
    plan->lo[plan->n] = a;
    memcpy(plan->device[plan->n], s, len);
    plan->device[plan->n][len] = '\0';
    plan->n++;
    next = b + 1;
    s += len;
    if (*s == ',') {
      s++;
      if (!*s) {
        snprintf(err, errlen, "--place: \"%.100s\" ends with a comma", text);
        return -EINVAL;
      }
    }
  }
  if (m && next != last + 1) {
    char r[40];
    snprintf(err, errlen, "--place: %s %s on no device (the model has layers 1-%d)",
             layers_text(next, last, r, sizeof r), next == last ? "is" : "are", last);
    return -EINVAL;
  }
  plan->lo[plan->n] = m ? m->n_layers : 0;
  return 0;
}

/* What memory a stage's device computes in, as far as its name says: the host's (cpu,
 * cpu:N, null), a GPU's (cuda, cuda:N, cuda:N.K), or not known until it is opened (auto). */
enum { DEV_HOST, DEV_CUDA, DEV_AUTO };

/* A stage's device name: cpu:N or cuda:N.K of the virtual devices, or a spec the loader
 * takes. *kind gets its memory's kind and *gpu, *inst which GPU and virtual instance a
 * CUDA one is (inst -1: the whole GPU). */
static int check_device(const char *what, const char *spec, int vdevs, int *kind, int *gpu,
                        int *inst, char *err, size_t errlen) {
  *kind = DEV_HOST;
  *gpu = *inst = -1;
  if (strncmp(spec, "cpu:", 4) == 0) {
    char *end;
    long idx = spec[4] >= '0' && spec[4] <= '9' ? strtol(spec + 4, &end, 10) : -1;
    if (idx < 0 || *end) {
      snprintf(err, errlen, "%s: device \"%s\": a CPU virtual device is cpu:N", what, spec);
      return -EINVAL;
    }
    if (idx >= vdevs) {
      if (vdevs == 0)
        snprintf(err, errlen, "%s: device \"%s\" needs --virtual-devices (cpu:0 .. cpu:V-1)",
                 what, spec);
      else
        snprintf(err, errlen, "%s: device \"%s\": --virtual-devices %d gives cpu:0 .. cpu:%d",
                 what, spec, vdevs, vdevs - 1);
      return -EINVAL;
    }
    return 0;
  }
  int v = pst_device_spec_virtual_gpu(spec, gpu, inst);
  if (v < 0) {
    snprintf(err, errlen, "%s: device \"%s\": a virtual GPU device is cuda:N.K", what, spec);
    return -EINVAL;
  }
  if (v == 1) {
    *kind = DEV_CUDA;
    if (*inst >= vdevs) {
      if (vdevs == 0)
        snprintf(err, errlen,
                 "%s: device \"%s\" needs --virtual-devices (cuda:%d.0 .. cuda:%d.V-1)", what,
                 spec, *gpu, *gpu);
      else
        snprintf(err, errlen, "%s: device \"%s\": --virtual-devices %d gives cuda:%d.0 .. "
                 "cuda:%d.%d", what, spec, vdevs, *gpu, *gpu, vdevs - 1);
      return -EINVAL;
    }
    return 0;
  }
  char why[200];
  pst_spec_kind k;
  double rate;
  if (pst_device_check_spec(spec, why, sizeof why) != 0) {
    snprintf(err, errlen, "%s: %s", what, why);
    return -EINVAL;
  }
  pst_device_spec_parse(spec, &k, gpu, &rate);
  *kind = k == PST_SPEC_CUDA ? DEV_CUDA : k == PST_SPEC_AUTO ? DEV_AUTO : DEV_HOST;
  if (*kind != DEV_CUDA) *gpu = -1;
  return 0;
}

/* Virtual GPU devices' memory: each needs its cap, from --device-mem or from the GPU's
 * --gpu-memory-limit split V ways, and a split under a MiB is no cap at all. */
static int check_split(const pst_pipe_options *o, const char *what, char *err, size_t errlen) {
  if (o->device_mem_mib == 0 && o->gpu_memory_limit_mib == 0) {
    snprintf(err, errlen,
             "%s: virtual GPU devices need a memory cap each: --gpu-memory-limit MiB (the GPU's, "
             "split among the %d) or --device-mem MiB (each one's)", what, o->virtual_devices);
    return -EINVAL;
  }
  if (o->device_mem_mib == 0 && o->gpu_memory_limit_mib < (size_t)o->virtual_devices) {
    snprintf(err, errlen, "--gpu-memory-limit %zu split among --virtual-devices %d is under 1 MiB "
             "each", o->gpu_memory_limit_mib, o->virtual_devices);
    return -EINVAL;
  }
  return 0;
}

size_t pst_pipe_device_cap_mib(const pst_pipe_options *o, const char *spec) {
  int gpu, inst;
  size_t cap = o->device_mem_mib;
  if (pst_device_spec_virtual_gpu(spec, &gpu, &inst) == 1 && o->virtual_devices > 0 &&
      o->gpu_memory_limit_mib > 0) {
    size_t share = o->gpu_memory_limit_mib / (size_t)o->virtual_devices;
    if (cap == 0 || share < cap) cap = share;
  }
  return cap;
}

const char *pst_pipe_virtual_device(const pst_pipe_options *o, int s, char *out, size_t len) {
  pst_spec_kind k;
  int gpu = 0;
  double rate;
  if (pst_device_spec_parse(o->device, &k, &gpu, &rate) == 0 && k == PST_SPEC_CUDA)
    snprintf(out, len, "cuda:%d.%d", gpu, s);
  else
    snprintf(out, len, "cpu:%d", s);
  return out;
}

int pst_pipe_check_flags(const pst_pipe_options *o, const pst_model *m, int batch, char *err,
                         size_t errlen) {
  int L = m ? m->n_layers - 1 : PST_PIPE_MAX_STAGES;
  int most = L < PST_PIPE_MAX_STAGES ? L : PST_PIPE_MAX_STAGES;
  if (o->stages < 0 || o->stages > most) {
    if (m)
      snprintf(err, errlen, "--stages %d: the model has %d layers (1-%d), so 1 to %d stages",
               o->stages, L, L, most);
    else
      snprintf(err, errlen, "--stages %d: 1 to %d", o->stages, PST_PIPE_MAX_STAGES);
    return -EINVAL;
  }
  if (o->micro_batches < 0 || (batch > 0 && o->micro_batches > batch)) {
    if (batch > 0)
      snprintf(err, errlen, "--micro-batches %d: 1 to the batch size (%d)", o->micro_batches,
               batch);
    else
      snprintf(err, errlen, "--micro-batches %d: at least 1", o->micro_batches);
    return -EINVAL;
  }
  if (o->virtual_devices < 0 || o->virtual_devices > PST_PIPE_MAX_VDEVS) {
    snprintf(err, errlen, "--virtual-devices %d: 0 (none) to %d", o->virtual_devices,
             PST_PIPE_MAX_VDEVS);
    return -EINVAL;
  }
  if (o->place && o->place[0]) {
    pst_stage_plan plan;
    int rc = pst_plan_parse_place(m, o->place, &plan, err, errlen);
    if (rc != 0) return rc;
    if (o->stages > 1 && plan.n != o->stages) {
      snprintf(err, errlen, "--place gives %d stage%s, --stages %d", plan.n, plan.n > 1 ? "s" : "",
               o->stages);
      return -EINVAL;
    }
    int kind[PST_PIPE_MAX_STAGES], gpu[PST_PIPE_MAX_STAGES], inst[PST_PIPE_MAX_STAGES];
    int host = 0, cuda = 0, split = 0;
    for (int s = 0; s < plan.n; s++) {
      rc = check_device("--place", plan.device[s], o->virtual_devices, &kind[s], &gpu[s],
                        &inst[s], err, errlen);
      if (rc) return rc;
      host |= kind[s] == DEV_HOST;
      cuda |= kind[s] == DEV_CUDA;
      split |= inst[s] >= 0;
    }
    if (plan.n > 1 && host && cuda) {
      snprintf(err, errlen,
               "--place: stages on CPU and CUDA devices together are not supported (the "
               "hand-off between host memory and a GPU is not written); place every stage on "
               "CPU devices or every stage on CUDA devices");
      return -EINVAL;
    }
    for (int s = 0; plan.n > 1 && s < plan.n; s++)
      for (int t = s + 1; kind[s] == DEV_CUDA && t < plan.n; t++)
        if (kind[t] == DEV_CUDA && gpu[s] == gpu[t] && (inst[s] < 0 || inst[t] < 0 || inst[s] == inst[t])) {
          snprintf(err, errlen,
                   "--place: stages %d (%s) and %d (%s) share a CUDA device: each stage needs "
                   "a device of its own (on one GPU, --virtual-devices V and cuda:%d.0 .. "
                   "cuda:%d.V-1)", s, plan.device[s], t, plan.device[t], gpu[s], gpu[s]);
          return -EINVAL;
        }
    return split ? check_split(o, "--place", err, errlen) : 0;
  }
  int n = o->stages > 1 ? o->stages : 1;
  if (o->virtual_devices > 0) {
    if (n > o->virtual_devices) {
      snprintf(err, errlen,
               "--stages %d on --virtual-devices %d: each stage needs a device of its own", n,
               o->virtual_devices);
      return -EINVAL;
    }
    /* The stages go on cpu:0 .. cpu:n-1, or with a CUDA --device on cuda:N.0 .. cuda:N.n-1. */
    pst_spec_kind k;
    int gpu;
    double rate;
    if (pst_device_spec_parse(o->device, &k, &gpu, &rate) == 0 && k == PST_SPEC_CUDA)
      return check_split(o, "--virtual-devices", err, errlen);
    return 0;
  }
  int kind, gpu, inst;
  int rc = check_device("--device", o->device ? o->device : "auto", 0, &kind, &gpu, &inst, err,
                        errlen);
  if (rc == 0 && n > 1 && kind == DEV_CUDA) {
    snprintf(err, errlen,
             "--device %s with --stages %d: the stages would share one CUDA device; give each "
             "a device of its own: --virtual-devices %d (cuda:%d.0 .. cuda:%d.%d) or --place "
             "on cuda:N", o->device, n, n, gpu, gpu, n - 1);
    return -EINVAL;
  }
  return rc;
}
