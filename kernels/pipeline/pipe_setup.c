/* Making the pipeline (pipeline.h): the options checked, the stages' devices opened, the
 * layers balanced by their measured times within each device's cap (or the model refused
 * with the figures), the stage nets made and bound to each other; the placement log and
 * the end. It calls pipe.c (the stage threads), plan.c and devices.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "kernels/device_spec.h"
#include "kernels/net_stage.h"
#include "kernels/pipeline/pipe_internal.h"

#define MIB (1024.0 * 1024.0)

/* Each layer's seconds (forward and backward) over two steps at the micro-batch's size (at
 * most 64: a layer's share of the time hardly moves above it) on the first stage's device,
 * for the balance. 0, or a negative code (then equal weights serve). */
static int measure(const pst_model *m, pst_backend *be, int rows, double *cost) {
  int b = rows < 64 ? rows : 64, rc;
  pst_net *net = NULL;
  float *params = malloc(m->n_params * sizeof(float)), *grad = malloc(m->n_params * sizeof(float));
  float *x = malloc((size_t)b * m->input_size * sizeof(float));
  int32_t *y = calloc((size_t)b, sizeof(int32_t));
  rc = params && grad && x && y ? pst_net_create(m, be, b, &net) : -ENOMEM;
  if (rc == 0) {
    pst_model_init_params(m, 1, params);
    for (size_t i = 0; i < (size_t)b * m->input_size; i++) x[i] = (float)(i % 97) / 97.0f;
    rc = pst_net_load_params(net, params);
  }
  for (int step = 0; step < 3 && rc == 0; step++) {
    if (step == 1) pst_net_stage_profile(net, 1); /* the first step warms up */
    rc = pst_net_train_step(net, x, y, b, 1.0f / (float)b, grad, NULL, NULL);
  }
  for (int i = 1; rc == 0 && i < m->n_layers; i++)
    cost[i] = pst_net_layer_seconds(net, i) + 1e-7; /* no layer is free */
  pst_net_destroy(net);
  free(params);
  free(grad);
  free(x);
  free(y);
  return rc;
}

static void need_text(const pst_plan_need *n, char *out, size_t len) {
  snprintf(out, len,
           "%.1f MiB (weights %.1f, gradients %.1f, activations %.1f, workspace %.1f MiB)",
           (double)n->total / MIB, (double)n->weights / MIB, (double)n->gradients / MIB,
           (double)n->activations / MIB, (double)n->workspace / MIB);
}

/* A stage over the cap: the figures, and the fewest stages that would fit. */
static void refuse(const pst_model *m, const pst_pipe_options *o, const pst_stage_plan *plan,
                   int s, const char *spec, const pst_plan_need *need, int max_batch, int micro,
                   int host, char *err, size_t errlen) {
  size_t cap_mib = pst_pipe_device_cap_mib(o, spec), cap = cap_mib << 20;
  char figures[200], fits[300] = "";
  need_text(need, figures, sizeof figures);
  for (int k = plan->n + 1; k <= PST_PIPE_MAX_STAGES && k < m->n_layers; k++) {
    pst_stage_plan alt;
    if (pst_plan_balance(m, NULL, k, cap, max_batch, micro, host, &alt) != 0) continue;
    size_t used = (size_t)snprintf(fits, sizeof fits, "--stages %d fits (stage peaks", k);
    for (int t = 0; t < k && used < sizeof fits; t++) {
      pst_plan_need n;
      pst_plan_stage_need(m, alt.lo[t], alt.lo[t + 1], max_batch, micro, host, &n);
      used += (size_t)snprintf(fits + used, sizeof fits - used, "%s%.1f", t ? ", " : " ",
                               (double)n.total / MIB);
    }
    if (used < sizeof fits) snprintf(fits + used, sizeof fits - used, " MiB)");
    break;
  }
  if (fits[0] == '\0') snprintf(fits, sizeof fits, "no --stages up to %d fits", PST_PIPE_MAX_STAGES);
  char where[64] = "one device";
  if (plan->n > 1)
    snprintf(where, sizeof where, "stage %d (layers %d-%d)", s, plan->lo[s], plan->lo[s + 1] - 1);
  snprintf(err, errlen,
           "the model at batch %d needs %s on %s, over the %s cap of %zu MiB; %s", max_batch,
           figures, where, cap_mib == o->device_mem_mib ? "--device-mem" : "virtual device's",
           cap_mib, fits);
}

/* The stages' layers and devices, before the balance: --place's, or n stages on the
 * virtual devices in order, or each on a device of the --device kind. */
static int first_plan(const pst_model *m, const pst_pipe_options *o, int n, pst_stage_plan *plan,
                      char *err, size_t errlen) {
  if (o->place && o->place[0]) {
    return pst_plan_parse_place(m, o->place, plan, err, errlen);
  }
  memset(plan, 0, sizeof *plan);
  plan->n = n;
  plan->lo[0] = 1;
  plan->lo[n] = m->n_layers;
  for (int s = 0; s < n; s++) {
    if (o->virtual_devices > 0)
      pst_pipe_virtual_device(o, s, plan->device[s], PST_PIPE_DEVICE_LEN);
    else
      snprintf(plan->device[s], PST_PIPE_DEVICE_LEN, "%s", o->device ? o->device : "cpu");
  }
  return 0;
}

/* Stages on devices that share no memory (CUDA): each stage's own buffers for its cuts,
 * allocated on its device and bound to its net, [max_batch, floats(j)] each: the tensors of
 * its lower cut (copied up from the stage below) and the gradients of its upper cut
 * (copied down from the stage above's outbox). Their bytes count in the stage's figures and
 * against its device's cap. NOT RUN ON A GPU. 0, or a negative code with one line in err. */
static int cut_buffers(pst_pipe *p, const pst_pipe_options *o, int max_batch, char *err,
                       size_t errlen) {
  for (int s = 0; s < p->n; s++) {
    pst_stage *st = &p->st[s];
    pst_backend *be = st->dev.be;
    for (int j = 1; j < st->hi; j++) {
      int in = s > 0 && pst_net_stage_takes(st->net, j);
      int up = s + 1 < p->n && pst_net_stage_sends(st->net, j) &&
               pst_net_stage_gin(p->st[s + 1].net, j) != NULL;
      size_t bytes = (size_t)max_batch * pst_net_stage_tensor_floats(st->net, j) * sizeof(float);
      for (int k = 0; k < 2; k++) {
        if (!(k == 0 ? in : up)) continue;
        float *buf = be->alloc(be, bytes);
        if (buf == NULL) {
          const char *why = be->last_error ? be->last_error(be) : "";
          snprintf(err, errlen, "stage %d on %s: cannot allocate its buffer for %s of tensor %d "
                   "(%.1f MiB)%s%s", s, st->dev.spec, k == 0 ? "the activations" : "the gradient",
                   j, (double)bytes / MIB, why[0] ? ": " : "", why);
          return -ENOMEM;
        }
        if (k == 0) st->in[j] = buf;
        else st->gup[j] = buf;
        st->cut_bytes += bytes;
        pst_net_stage_bind(st->net, j, k == 0 ? buf : NULL, k == 0 ? NULL : buf);
      }
    }
    size_t cap = pst_pipe_device_cap_mib(o, st->dev.spec) << 20;
    if (cap > 0 && st->need.total + st->cut_bytes > cap) {
      snprintf(err, errlen, "stage %d on %s: %.1f MiB with its buffers for the cuts (%.1f MiB), "
               "over the device's cap of %.1f MiB", s, st->dev.spec,
               (double)(st->need.total + st->cut_bytes) / MIB, (double)st->cut_bytes / MIB,
               (double)cap / MIB);
      return -ENOSPC;
    }
  }
  return 0;
}

int pst_pipe_create(const pst_model *m, const pst_pipe_options *o, int max_batch,
                    pst_pipe **out, char *note, size_t notelen, char *err, size_t errlen) {
  *out = NULL;
  note[0] = err[0] = '\0';
  int n = o->stages > 1 ? o->stages : 1, micro = o->micro_batches > 1 ? o->micro_batches : 1;
  pst_stage_plan plan;
  /* The flags' own checks, as where they were read, now with the model and the batch. */
  int rc = pst_pipe_check_flags(o, m, max_batch, err, errlen);
  if (rc == 0) rc = first_plan(m, o, n, &plan, err, errlen);
  if (rc != 0) return rc;
  n = plan.n;
  pst_pipe *p = calloc(1, sizeof *p);
  if (p == NULL || (p->m = malloc(sizeof *m)) == NULL) {
    free(p);
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  *p->m = *m;
  p->n = n;
  p->micro = micro;
  p->max_batch = max_batch;
  char dnote[256];
  for (int s = 0; s < n && rc == 0; s++) {
    int gpu, inst;
    size_t mem = pst_device_spec_virtual_gpu(plan.device[s], &gpu, &inst) == 1
                     ? pst_pipe_device_cap_mib(o, plan.device[s])
                     : o->gpu_memory_limit_mib;
    rc = pst_vdev_open(plan.device[s], o->virtual_devices, o->threads, mem, &p->st[s].dev, dnote,
                       sizeof dnote, err, errlen);
    if (rc == 0 && s == 0) snprintf(note, notelen, "%s", dnote);
    /* Stages hand off in host memory without copies, or between devices with memory of
     * their own by the receiver's copy_from; host memory and a GPU's together, no (what
     * auto chose is known only now). */
    pst_backend *be = rc == 0 ? p->st[s].dev.be : NULL;
    if (be && n > 1 && be->host_memory != p->st[0].dev.be->host_memory) {
      snprintf(err, errlen,
               "stage %d on %s, stage 0 on %s: stages on CPU and CUDA devices together are not "
               "supported (the hand-off between host memory and a GPU is not written)", s,
               plan.device[s], plan.device[0]);
      rc = -ENOTSUP;
    } else if (be && n > 1 && (!be->host_memory || o->copy_cuts) && be->copy_from == NULL) {
      snprintf(err, errlen, "stage %d on %s: its backend copies nothing from another", s,
               plan.device[s]);
      rc = -ENOTSUP;
    }
  }
  int host = rc == 0 ? p->st[0].dev.be->host_memory : 1;
  p->copies = n > 1 && (!host || o->copy_cuts);
  size_t cap = pst_pipe_device_cap_mib(o, plan.device[0]) << 20;
  if (rc == 0 && n > 1 && !(o->place && o->place[0])) {
    double *cost = calloc(PST_MODEL_MAX_LAYERS, sizeof *cost);
    if (cost == NULL) rc = -ENOMEM;
    int measured = rc == 0 && measure(m, p->st[0].dev.be, (max_batch + micro - 1) / micro, cost) == 0;
    if (rc == 0) rc = pst_plan_balance(m, measured ? cost : NULL, n, cap, max_batch, micro, host, &plan);
    free(cost);
    if (rc == -ENOSPC) {
      pst_plan_need whole;
      pst_plan_stage_need(m, 1, m->n_layers, max_batch, micro, host, &whole);
      refuse(m, o, &plan, 0, p->st[0].dev.spec, &whole, max_batch, micro, host, err, errlen);
      snprintf(err + strlen(err), errlen - strlen(err), " (%d stages do not)", n);
    }
  }
  for (int s = 0; s < n && rc == 0; s++) {
    pst_stage *st = &p->st[s];
    st->lo = plan.lo[s];
    st->hi = plan.lo[s + 1];
    rc = pst_plan_stage_need(m, st->lo, st->hi, max_batch, micro, host, &st->need);
    /* The opened device's spec: the balance leaves plan's device names empty. */
    size_t scap = pst_pipe_device_cap_mib(o, st->dev.spec) << 20;
    if (rc == 0 && scap > 0 && st->need.total > scap) {
      refuse(m, o, &plan, s, st->dev.spec, &st->need, max_batch, micro, host, err, errlen);
      rc = -ENOSPC;
    }
  }
  for (int s = 0; s < n && rc == 0; s++) {
    pst_stage *st = &p->st[s];
    rc = pst_net_create_stage(m, st->dev.be, max_batch, st->lo, st->hi, micro, &st->net);
    if (rc != 0) {
      const char *why = st->dev.be->last_error ? st->dev.be->last_error(st->dev.be) : "";
      snprintf(err, errlen, "cannot build %s of the model on %s: %s%s%s%s",
               n > 1 ? "a stage" : "the model", st->dev.be->name, strerror(-rc),
               why[0] ? " (" : "", why, why[0] ? ")" : "");
    }
  }
  /* Each stage writes the gradients of its lower cut into its outbox, which the stage
   * below reads as the gradients of its upper cut: in place in host memory, or copied into
   * buffers of its own (cut_buffers). */
  if (rc == 0 && p->copies) rc = cut_buffers(p, o, max_batch, err, errlen);
  for (int s = 0; rc == 0 && !p->copies && s + 1 < n; s++)
    for (int j = 0; j < p->st[s].hi; j++)
      if (pst_net_stage_sends(p->st[s].net, j))
        pst_net_stage_bind(p->st[s].net, j, NULL, pst_net_stage_gin(p->st[s + 1].net, j));
  if (rc == 0) {
    p->row = calloc((size_t)micro + 1, sizeof *p->row);
    p->loss_k = calloc((size_t)micro, sizeof *p->loss_k);
    p->correct_k = calloc((size_t)micro, sizeof *p->correct_k);
    rc = p->row && p->loss_k && p->correct_k ? pst_pipe_start(p) : -ENOMEM;
    if (rc != 0) snprintf(err, errlen, "cannot start the stages: %s", strerror(-rc));
  }
  if (rc != 0) {
    pst_pipe_destroy(p);
    return rc;
  }
  if (n > 1 || micro > 1) {
    size_t used = (size_t)snprintf(note, notelen, "%d stage%s (", n, n > 1 ? "s" : "");
    for (int s = 0; s < n && used < notelen; s++)
      used += (size_t)snprintf(note + used, notelen - used, "%slayers %d-%d on %s",
                               s ? ", " : "", p->st[s].lo, p->st[s].hi - 1, p->st[s].dev.spec);
    if (used < notelen)
      snprintf(note + used, notelen - used, "), %d micro-batch%s a step, GPipe", micro,
               micro > 1 ? "es" : "");
  }
  *out = p;
  return 0;
}

void pst_pipe_destroy(pst_pipe *p) {
  if (p == NULL) return;
  pst_pipe_stop(p);
  for (int s = 0; s < p->n; s++) {
    pst_stage *st = &p->st[s];
    for (int j = 0; j < PST_MODEL_MAX_LAYERS && st->dev.be; j++) {
      if (st->in[j]) st->dev.be->free(st->dev.be, st->in[j]);
      if (st->gup[j]) st->dev.be->free(st->dev.be, st->gup[j]);
    }
    pst_net_destroy(st->net);
    pst_vdev_close(&st->dev);
  }
  free(p->row);
  free(p->loss_k);
  free(p->correct_k);
  free(p->m);
  free(p);
}

pst_backend *pst_pipe_backend(const pst_pipe *p) { return p ? p->st[0].dev.be : NULL; }

int pst_pipe_stages(const pst_pipe *p) { return p ? p->n : 0; }

void pst_pipe_stage_layers(const pst_pipe *p, int s, int *lo, int *hi, const char **device) {
  *lo = p->st[s].lo;
  *hi = p->st[s].hi;
  *device = p->st[s].dev.spec;
}

size_t pst_pipe_stage_peak(const pst_pipe *p, int s) {
  if (p == NULL || s < 0 || s >= p->n) return 0;
  return pst_net_stage_bytes(p->st[s].net) + p->st[s].cut_bytes + p->st[s].need.workspace;
}

void pst_pipe_log_placement(pst_pipe *p) {
  if (p == NULL) return;
  if (p->n > 1 || p->micro > 1)
    LOG_INFO("pipeline: %d stage%s, %d micro-batch%s a step (GPipe: the bubble is %.0f%% of a "
             "step)", p->n, p->n > 1 ? "s" : "", p->micro, p->micro > 1 ? "es" : "",
             100.0 * (p->n - 1) / (p->micro + p->n - 1));
  for (int s = 0; s < p->n; s++) {
    const pst_stage *st = &p->st[s];
    char cores[64], figures[200];
    size_t plo, phi;
    pst_vdev_cores_text(&st->dev, cores, sizeof cores);
    pst_net_stage_params(st->net, &plo, &phi);
    pst_plan_need measured = st->need;
    measured.activations += st->cut_bytes; /* its buffers for the cuts, on CUDA */
    measured.total = pst_pipe_stage_peak(p, s);
    need_text(&measured, figures, sizeof figures);
    LOG_INFO("stage %d on %s (cores %s): layers %d-%d, parameters [%zu, %zu), device memory %s",
             s, st->dev.spec, cores, st->lo, st->hi - 1, plo, phi, figures);
    for (int i = st->lo; i < st->hi; i++) {
      char name[48];
      pst_model_layer_name(p->m, i, 1, name, sizeof name);
      LOG_INFO("layer %d %s: stage %d, device %s", i, name, s, st->dev.spec);
    }
    pst_net_log_placement(st->net);
  }
}
