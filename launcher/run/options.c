/* A local job's options: their defaults, and the workers they start (launcher/run/options.h). */
#include "launcher/run/options.h"

#include <errno.h>
#include <string.h>

void pl_run_defaults(pl_run_options *o) {
  memset(o, 0, sizeof *o);
  o->workers = 2;
  o->mode = "sync";
  o->staleness = 2;
  o->model = "mlp";
  o->epochs = 2;
  o->batch_size = 64;
  o->lr = 1e-3;
  o->optimizer = "adam";
  o->seed = 42;
  o->data_dir = "/usr/share/datasets/fashion-mnist";
  o->threads = 1;
  o->workers_per_gpu = 1;
  o->chunk_kib = 4096;
  o->push_by_layer = o->pull_by_layer = o->layer_pieces = -1; /* the workers' own default */
  o->keep_awake = -1;
}

int pl_default_chunk_kib(const char *device, int gpus_given) {
  int gpu = gpus_given || (device && (strncmp(device, "cuda", 4) == 0 ||
                                      strncmp(device, "null", 4) == 0));
  return gpu ? PL_GPU_CHUNK_KIB : 4096;
}

int pl_default_ps_threads(int cores, int worker_threads, int n_ps, size_t shard_floats) {
  int free_cores = (cores - worker_threads) / (n_ps > 0 ? n_ps : 1);
  size_t by_size = 1 + shard_floats / PL_PS_FLOATS_PER_THREAD;
  int t = free_cores < (int)(by_size < 1024 ? by_size : 1024) ? free_cores : (int)by_size;
  return t > 1 ? t : 1;
}

int pl_job_workers(const pl_run_options *o) {
  int ids[64];
  int n = pl_parse_int_list(o->gpus ? o->gpus : "", ids, 64, 0, PL_MAX_GPU_ID);
  if (n < 0) return -EINVAL;
  return n > 0 ? n * o->workers_per_gpu : o->workers;
}
