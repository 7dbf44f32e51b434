/* The ps's default --threads (pl_default_ps_threads): the cores the workers leave free,
 * shared among the shards, capped by the shard's part of the model; and its default chunk
 * (pl_default_chunk_kib). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/check.h"
#include "common/clock.h"
#include "launcher/run/options.h"

/* A stand-in for `pstrain-worker --list-devices`: a script that runs body. */
static void fake_worker(const char *path, const char *body) {
  FILE *f = fopen(path, "w");
  if (!f) return;
  fprintf(f, "#!/bin/sh\n%s\n", body);
  fclose(f);
  chmod(path, 0755);
}

int main(void) {
  /* This 2-core VM: no core is left free by one worker or more: 1 thread. */
  CHECK(pl_default_ps_threads(2, 1, 1, 235146) == 1);
  CHECK(pl_default_ps_threads(2, 2, 1, 2270000) == 1);
  CHECK(pl_default_ps_threads(2, 4, 1, 4000000) == 1); /* more workers than cores */
  /* 16 cores, one worker: the mlp (0.24M floats) keeps 1; mobilenetv2's 2.27M take 3; a
   * 100M-float model takes every free core. */
  CHECK(pl_default_ps_threads(16, 1, 1, 235146) == 1);
  CHECK(pl_default_ps_threads(16, 1, 1, 2270000) == 3);
  CHECK(pl_default_ps_threads(16, 1, 1, 100000000) == 15);
  /* Shards share the free cores, and each counts its own part. */
  CHECK(pl_default_ps_threads(16, 4, 4, 25000000) == 3);
  CHECK(pl_default_ps_threads(16, 8, 2, 1500000) == 2);
  CHECK(pl_default_ps_threads(0, 0, 0, 0) == 1);
  /* The chunk when --chunk-kib is not given: 256 KiB for GPU and null workers (their large
   * dense layers in pieces of one chunk), 4 MiB for the CPU and for a device not known. */
  CHECK(pl_default_chunk_kib("null:193500", 0) == 256 && pl_default_chunk_kib("null", 0) == 256);
  CHECK(pl_default_chunk_kib("cuda:1", 0) == 256 && pl_default_chunk_kib(NULL, 1) == 256);
  CHECK(pl_default_chunk_kib(NULL, 0) == 4096 && pl_default_chunk_kib("cpu", 0) == 4096);
  CHECK(pl_default_chunk_kib("auto", 0) == 4096);
  /* What `--device auto` finds, by the workers' own probe: a GPU when it lists one. */
  char dir[] = "/tmp/pstrain-auto-test-XXXXXX", path[64];
  if (mkdtemp(dir)) {
    snprintf(path, sizeof path, "%s/worker", dir);
    fake_worker(path, "[ \"$1\" = --list-devices ] || exit 2\n"
                      "echo 'cuda:0: NVIDIA H200 (sm_90, 139 GiB, driver 12.4)'");
    CHECK(pl_auto_finds_gpu(path, 10) == 1);
    fake_worker(path, "echo 'no CUDA devices: no CUDA driver (libcuda.so.1 not found)'");
    CHECK(pl_auto_finds_gpu(path, 10) == 0);
    /* A probe that hangs is given up at its deadline, and one that cannot run finds none. */
    fake_worker(path, "echo -n cu; sleep 30; echo 'da:0: late'");
    double t0 = pst_now();
    CHECK(pl_auto_finds_gpu(path, 0.3) == 0 && pst_now() - t0 < 5);
    unlink(path);
    CHECK(pl_auto_finds_gpu(path, 10) == 0);
    rmdir(dir);
  }
  printf("ps_threads_test: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail != 0;
}
