/* What a worker computes with (worker/setup.h): moved here from register.c and trainer.c so
 * that an all-reduce rank (worker/allreduce/) sets up its shard, batches, device and net
 * exactly as a ps's worker does. */
#include "worker/setup.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/shard.h"
#include "kernels/pipeline/pipeline.h"
#include "data/dataset.h"

/* The weights and the gradient live where the backend moves them fastest (pinned memory
 * for CUDA): pulls land there straight from the socket and pushes leave from there. */
static float *host_buffer(wk_trainer *t, size_t bytes) {
  if (t->backend->host_alloc) return t->backend->host_alloc(t->backend, bytes);
  return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}

void wk_host_buffer_free(wk_trainer *t, float *p) {
  if (p && t->backend && t->backend->host_free)
    t->backend->host_free(t->backend, p);
  else
    free(p);
}

int wk_setup_data(wk_trainer *t, char *desc, size_t desclen, char *err, size_t errlen) {
  /* The data comes first, before anything else: a worker with a bad --data-dir never takes
   * a slot (or a rank), and the seconds of decompression never hold up its heartbeats. */
  if (pst_dataset_open(t->opt.data_dir, &t->opt.image, &t->train, &t->test, t->data_mean,
                       t->data_std, desc, desclen, err, errlen) < 0)
    return -EIO;
  for (int i = 0; i < t->train.n; i++)
    if (t->train.labels[i] + 1 > t->classes) t->classes = t->train.labels[i] + 1;
  return 0;
}

int wk_setup_compute(wk_trainer *t, pst_grad_ready_fn grad_ready, char *err, size_t errlen) {
  /* Data (loaded at start): this worker's disjoint shard of the training and test sets,
   * made into batches of the model's input shape (data/imageops.h). */
  const pst_layer *in = &t->model.layers[0];
  if (pst_batch_prep_init(&t->prep, &t->train, t->opt.data_dir, in->in_h, in->in_w, in->in_c,
                          t->model.input_size, &t->opt.image, t->data_mean, t->data_std,
                          t->seed, t->index, err, errlen) < 0)
    return -EINVAL;
  t->test_prep = t->prep;
  t->test_prep.data = &t->test;
  pst_data_shard_range(t->train.n, t->index, t->world, &t->shard_begin, &t->shard_end);
  pst_data_shard_range(t->test.n, t->index, t->world, &t->test_begin, &t->test_end);
  /* Every worker takes the same number of steps per epoch, so sync steps line up: the
   * smallest shard's full batches (the shards differ by at most one sample). */
  t->steps_per_epoch = pst_steps_per_epoch(t->train.n, t->world, t->batch);
  if (t->data_ranges) t->steps_per_epoch = (t->train.n + t->batch - 1) / t->batch; /* ranges */
  if (t->steps_per_epoch < 1) {
    snprintf(err, errlen, "a shard of %d samples holds no full batch of %d", t->train.n / t->world,
             t->batch);
    return -EINVAL;
  }
  /* Compute: the model on its stages, each on a device of its own (one by default). */
  pst_pipe_options po = {
      .device = t->opt.device,
      .threads = t->opt.threads,
      .gpu_memory_limit_mib = t->opt.gpu_memory_limit_mib,
      .stages = t->opt.stages,
      .place = t->opt.place,
      .micro_batches = t->opt.micro_batches,
      .virtual_devices = t->opt.virtual_devices,
      .device_mem_mib = t->opt.device_mem_mib,
  };
  char note[512];
  int rc = pst_pipe_create(&t->model, &po, t->batch, &t->net, note, sizeof note, err, errlen);
  if (rc < 0) return rc;
  if (note[0]) LOG_INFO("%s", note);
  t->backend = pst_pipe_backend(t->net);
  for (int s = 0; s < pst_pipe_stages(t->net) && pst_pipe_stages(t->net) > 1; s++)
    LOG_INFO("stage %d: peak device memory %.1f MiB", s,
             (double)pst_pipe_stage_peak(t->net, s) / (1024.0 * 1024.0));
  /* The layer-by-layer flags not given: the device decides (worker/state.h). */
  int gpu_like = strncmp(t->backend->name, "cpu", 3) != 0;
  if (t->opt.push_by_layer == WK_LAYERED_AUTO) t->opt.push_by_layer = gpu_like;
  if (t->opt.pull_by_layer == WK_LAYERED_AUTO) t->opt.pull_by_layer = gpu_like;
  /* Pieces change the sums' order (kernels/backend.h): on by default only where the layers'
   * transfers overlap a device's compute, never for a CPU worker's whole-layer results. */
  if (t->opt.layer_pieces == WK_LAYERED_AUTO)
    t->opt.layer_pieces = gpu_like && (t->opt.push_by_layer || t->opt.pull_by_layer);
  /* A step of a GPU-like device is a dozen hand-offs and waits for chunks: each wake-up of
   * a sleeping CPU would be on its critical path. A CPU device's threads keep their own
   * CPUs busy. Held until wk_setup_free; set up once (a reconnection keeps it). */
  if (t->opt.keep_awake == WK_LAYERED_AUTO) t->opt.keep_awake = gpu_like;
  if (t->opt.keep_awake && t->awake.how == PST_AWAKE_OFF) {
    char note[512];
    pst_keep_awake_start(&t->awake, NULL, note, sizeof note);
    LOG_INFO("%s", note);
  }
  if (grad_ready && t->opt.push_by_layer) pst_pipe_on_grad_ready(t->net, grad_ready, t);
  size_t n = t->model.n_params;
  t->params = host_buffer(t, n * sizeof(float));
  t->grad = host_buffer(t, n * sizeof(float));
  t->xb = malloc((size_t)t->batch * (size_t)t->model.input_size * sizeof(float));
  t->yb = malloc((size_t)t->batch * sizeof(int32_t));
  t->order = malloc((size_t)(t->data_ranges ? t->train.n : t->shard_end - t->shard_begin) *
                    sizeof(int32_t));
  t->rg_idx = malloc((size_t)t->batch * sizeof(int32_t));
  if (!t->params || !t->grad || !t->xb || !t->yb || !t->order || !t->rg_idx ||
      wk_prefetch_start(&t->prefetch, &t->prep, t->batch) < 0) {
    snprintf(err, errlen, "out of memory for %zu parameters", n);
    return -ENOMEM;
  }
  return 0;
}

void wk_setup_free(wk_trainer *t) {
  pst_keep_awake_stop(&t->awake);
  wk_prefetch_stop(&t->prefetch);
  wk_host_buffer_free(t, t->params);
  wk_host_buffer_free(t, t->grad);
  t->params = t->grad = NULL;
  if (t->net) pst_pipe_destroy(t->net); /* with its stages' backends */
  t->net = NULL;
  t->backend = NULL;
  pst_data_free(&t->train);
  pst_data_free(&t->test);
  free(t->xb);
  free(t->yb);
  free(t->order);
  free(t->rg_idx);
  free(t->subset_idx);
  t->xb = NULL;
  t->yb = NULL;
  t->order = t->rg_idx = t->subset_idx = NULL;
}

int wk_make_subset(wk_trainer *t, uint32_t samples) {
  int n = samples < (uint32_t)t->test.n ? (int)samples : t->test.n;
  int32_t *all = malloc((size_t)(t->test.n > 0 ? t->test.n : 1) * sizeof *all);
  if (!all) return -ENOMEM;
  for (int i = 0; i < t->test.n; i++) all[i] = i;
  pst_rng rng; /* its own: the training shuffles stay as they are */
  pst_rng_seed(&rng, t->seed ^ 0x5eed5ab5e7e7a1ull);
  pst_rng_shuffle(&rng, all, t->test.n);
  int b, e;
  pst_data_shard_range(n, t->index, t->world, &b, &e);
  free(t->subset_idx);
  t->subset_idx = malloc((size_t)(e - b > 0 ? e - b : 1) * sizeof *t->subset_idx);
  if (!t->subset_idx) {
    free(all);
    return -ENOMEM;
  }
  memcpy(t->subset_idx, all + b, (size_t)(e - b) * sizeof *t->subset_idx);
  t->subset_n = e - b;
  free(all);
  return 0;
}
