/* Tests of the device loader (kernels/device.c): spec parsing, the "auto" fallback with
 * its one-line note, errors for "cuda" without a usable GPU, pst_device_list, and that
 * libpstrain_cuda.so (a data dependency) is found and exports its entry points.
 * On a machine with a GPU the expectations flip: "auto" and "cuda:0" give the CUDA backend. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/pst_cuda.h"
#include "kernels/device.h"
#include "kernels/testing.h"

static int one_line(const char *s) { return s[0] != '\0' && strchr(s, '\n') == NULL; }

static void test_bad_specs(void) {
  const char *bad[] = {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:0x", "cuda0", "CPU", "",
                       "cuda:99999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    pst_backend *b = (pst_backend *)1;
    char note[256];
    int rc = pst_device_open(bad[i], 0, 1, &b, note, sizeof note);
    CHECK(rc == -EINVAL);
    CHECK(b == NULL);
    CHECK(one_line(note) && strstr(note, "expected auto, cpu, cuda, cuda:N, null or null:RATE") != NULL);
    if (rc != -EINVAL) fprintf(stderr, "  spec \"%s\": rc %d, note: %s\n", bad[i], rc, note);
  }
  char note[64];
  CHECK(pst_device_open("cpu", 0, 1, NULL, note, sizeof note) == -EINVAL);
}

static void test_cpu(void) {
  pst_backend *b = NULL;
  char note[256];
  CHECK(pst_device_open("cpu", 0, 2, &b, note, sizeof note) == 0);
  CHECK(b != NULL && b->host_memory == 1 && strcmp(b->name, "cpu") == 0);
  CHECK(one_line(note));
  printf("cpu: %s\n", note);
  if (b) b->destroy(b);
}

/* The library is found next to this test binary (Bazel puts it there as a data
 * dependency) and exports the entry points with C names. */
static void test_library(void) {
  char where[1024];
  int rc = pst_device_load_cuda(where, sizeof where);
  printf("library: %s\n", where);
  CHECK(rc == 0);
  CHECK(one_line(where));
  if (rc != 0) return;
  void *h = dlopen(where, RTLD_NOW | RTLD_NOLOAD);
  CHECK(h != NULL);
  if (!h) return;
  pst_cuda_device_count_fn count = (pst_cuda_device_count_fn)dlsym(h, "pst_cuda_device_count");
  pst_cuda_describe_device_fn describe =
      (pst_cuda_describe_device_fn)dlsym(h, "pst_cuda_describe_device");
  CHECK(count != NULL && describe != NULL);
  /* Internal helpers stay hidden. */
  CHECK(dlsym(h, "pst_cuda_log") == NULL && dlsym(h, "pst_cuda_dense_forward") == NULL);
  if (count && describe) {
    int n = count();
    char line[256] = "";
    int drc = describe(n > 0 ? n : 0, line, sizeof line); /* one past the last: an error */
    CHECK(drc < 0 && one_line(line));
    printf("device count %d; describe(%d): %s\n", n, n > 0 ? n : 0, line);
  }
}

int main(void) {
  test_bad_specs();
  test_cpu();
  test_library();

  pst_backend *b = NULL;
  char note[512];
  int rc = pst_device_open("auto", 0, 1, &b, note, sizeof note);
  printf("auto: rc %d: %s\n", rc, note);
  CHECK(rc == 0 && b != NULL);
  CHECK(one_line(note));
  int have_gpu = b && !b->host_memory;
  if (b) b->destroy(b);

  FILE *f = tmpfile();
  CHECK(f != NULL);
  if (f) {
    int n = pst_device_list(f);
    char buf[1024] = "";
    rewind(f);
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    buf[len] = '\0';
    fclose(f);
    printf("list (%d):\n%s", n, buf);
    if (have_gpu)
      CHECK(n > 0 && strncmp(buf, "cuda:0: ", 8) == 0);
    else
      CHECK(n == 0 && strncmp(buf, "no CUDA devices: ", 17) == 0 &&
            strchr(buf, '\n') == buf + len - 1);
  }

  if (!have_gpu) {
    /* No GPU: "auto" falls back with the reason, "cuda" and "cuda:0" are errors. */
    CHECK(strstr(note, "; using the CPU backend") != NULL);
    const char *specs[] = {"cuda", "cuda:0", "cuda:3"};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
      pst_backend *g = (pst_backend *)1;
      char gnote[512];
      int grc = pst_device_open(specs[i], 0, 1, &g, gnote, sizeof gnote);
      printf("%s: rc %d: %s\n", specs[i], grc, gnote);
      CHECK(grc < 0 && g == NULL && one_line(gnote));
    }
  } else {
    pst_backend *g = NULL;
    char gnote[512];
    CHECK(pst_device_open("cuda:0", 64, 1, &g, gnote, sizeof gnote) == 0);
    CHECK(g != NULL && strcmp(g->name, "cuda:0") == 0 && strstr(gnote, "memory cap 64 MiB"));
    if (g) g->destroy(g);
    CHECK(pst_device_open("cuda:4095", 0, 1, &g, gnote, sizeof gnote) == -ENODEV);
  }
  return t_summary();
}
