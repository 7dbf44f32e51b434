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

/* A stage's device name: cpu:N of the virtual devices, or a spec the loader takes. */
static int check_device(const char *what, const char *spec, int vdevs, int stages, char *err,
                        size_t errlen) {
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
  char why[200];
  pst_spec_kind kind;
  int index;
  double rate;
  if (pst_device_check_spec(spec, why, sizeof why) != 0) {
    snprintf(err, errlen, "%s: %s", what, why);
    return -EINVAL;
  }
  pst_device_spec_parse(spec, &kind, &index, &rate);
  if (stages > 1 && kind == PST_SPEC_CUDA) {
    snprintf(err, errlen,
             "%s: %d stages on %s: stages on CUDA devices are not supported yet (their hand-off, "
             "peer copies or pinned host memory, is not written); place the stages on CPU "
             "devices", what, stages, spec);
    return -EINVAL;
  }
  return 0;
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
    for (int s = 0; s < plan.n; s++)
      if ((rc = check_device("--place", plan.device[s], o->virtual_devices, plan.n, err, errlen)))
        return rc;
    return 0;
  }
  int n = o->stages > 1 ? o->stages : 1;
  if (o->virtual_devices > 0) {
    if (n > o->virtual_devices) {
      snprintf(err, errlen,
               "--stages %d on --virtual-devices %d: each stage needs a device of its own", n,
               o->virtual_devices);
      return -EINVAL;
    }
    return 0; /* the stages go on cpu:0 .. cpu:n-1 */
  }
  return check_device("--device", o->device ? o->device : "auto", 0, n, err, errlen);
}
