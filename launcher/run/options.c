/* A local job's options: their defaults, and the workers they start (launcher/run/options.h). */
#include "launcher/run/options.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"

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
  o->shm = -1;
}

int pl_default_chunk_kib(const char *device, int gpus_given) {
  int gpu = gpus_given || (device && (strncmp(device, "cuda", 4) == 0 ||
                                      strncmp(device, "null", 4) == 0));
  return gpu ? PL_GPU_CHUNK_KIB : 4096;
}

int pl_auto_finds_gpu(const char *worker_bin, double timeout_s) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) < 0) return 0;
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return 0;
  }
  if (pid == 0) {
    setpgid(0, 0); /* its own group, so that whatever it started goes with it */
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (dup2(fds[1], 1) < 0 || (null >= 0 && dup2(null, 2) < 0)) _exit(127);
    execl(worker_bin, worker_bin, "--list-devices", (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  /* The first line is enough: a CUDA device's, or why there is none. */
  char out[256];
  size_t got = 0;
  double deadline = pst_now() + timeout_s;
  while (got + 1 < sizeof out && !memchr(out, '\n', got)) {
    int left_ms = (int)((deadline - pst_now()) * 1e3);
    struct pollfd p = {.fd = fds[0], .events = POLLIN};
    if (left_ms <= 0 || poll(&p, 1, left_ms) <= 0) break;
    ssize_t r = read(fds[0], out + got, sizeof out - 1 - got);
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fds[0]);
  /* Its answer is in (or it is late): it need not go on. */
  kill(-pid, SIGKILL);
  kill(pid, SIGKILL);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
  }
  return got >= 5 && strncmp(out, "cuda:", 5) == 0;
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
