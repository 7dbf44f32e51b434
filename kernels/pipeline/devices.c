/* Stage devices (devices.h). */
#include "kernels/pipeline/devices.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"

/* The cores this process may run on, in order. */
static int allowed_cores(int *cores, int max) {
  cpu_set_t set;
  int n = 0;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  for (int c = 0; c < CPU_SETSIZE && n < max; c++)
    if (CPU_ISSET(c, &set)) cores[n++] = c;
  return n;
}

int pst_vdev_open(const char *spec, int virtual_devices, int threads, size_t gpu_memory_limit_mib,
                  pst_vdev *d, char *note, size_t notelen, char *err, size_t errlen) {
  memset(d, 0, sizeof *d);
  snprintf(d->spec, sizeof d->spec, "%s", spec);
  note[0] = '\0';
  if (strncmp(spec, "cpu:", 4) == 0) {
    char *end;
    long idx = strtol(spec + 4, &end, 10);
    if (end == spec + 4 || *end || idx < 0) {
      snprintf(err, errlen, "device \"%s\": a CPU virtual device is cpu:N", spec);
      return -EINVAL;
    }
    if (idx >= virtual_devices) {
      snprintf(err, errlen,
               "device \"%s\": there are %d CPU virtual devices (--virtual-devices %d gives "
               "cpu:0 .. cpu:%d)", spec, virtual_devices, virtual_devices,
               virtual_devices > 0 ? virtual_devices - 1 : 0);
      return -EINVAL;
    }
    static int all[PST_VDEV_MAX_CORES];
    int n = allowed_cores(all, PST_VDEV_MAX_CORES);
    if (n < 1) {
      snprintf(err, errlen, "device \"%s\": cannot read the cores this process may use", spec);
      return -EIO;
    }
    /* Disjoint sets where there are enough cores; else devices share them, round robin. */
    int a = n >= virtual_devices ? (int)(idx * n / virtual_devices) : (int)(idx % n);
    int b = n >= virtual_devices ? (int)((idx + 1) * n / virtual_devices) : a + 1;
    for (int c = a; c < b && d->n_cores < 64; c++) d->cores[d->n_cores++] = all[c];
    d->pinned = 1;
    int rc = pst_cpu_backend_create(threads > 0 ? threads : 1, &d->be);
    if (rc < 0) {
      snprintf(err, errlen, "device \"%s\": cannot open the CPU backend: %s", spec, strerror(-rc));
      return rc;
    }
    char cores[64];
    pst_vdev_cores_text(d, cores, sizeof cores);
    snprintf(note, notelen, "%s: CPU virtual device %ld of %d on core%s %s%s", spec, idx,
             virtual_devices, d->n_cores > 1 ? "s" : "", cores,
             n < virtual_devices ? " (fewer cores than devices: shared)" : "");
    return 0;
  }
  int gpu, inst, v = pst_device_spec_virtual_gpu(spec, &gpu, &inst);
  if (v != 0) {
    /* A virtual GPU device: a backend instance of its own on GPU N (its own stream, cuBLAS
     * and cuDNN handles, memory cap), as two GPUs would have. NOT RUN ON A GPU. */
    if (v < 0 || inst >= virtual_devices) {
      snprintf(err, errlen, "device \"%s\": --virtual-devices %d gives cuda:N.0 .. cuda:N.%d",
               spec, virtual_devices, virtual_devices > 0 ? virtual_devices - 1 : 0);
      return -EINVAL;
    }
    if (gpu_memory_limit_mib == 0) {
      snprintf(err, errlen, "device \"%s\": a virtual GPU device needs its memory cap", spec);
      return -EINVAL;
    }
    char whole[32], dnote[256];
    snprintf(whole, sizeof whole, "cuda:%d", gpu);
    int rc = pst_device_open(whole, gpu_memory_limit_mib, threads, &d->be, dnote, sizeof dnote);
    if (rc < 0) {
      snprintf(err, errlen, "device \"%s\": %s", spec, dnote);
      return rc;
    }
    snprintf(note, notelen, "%s: virtual GPU device %d of %d on %s, memory cap %zu MiB", spec, inst,
             virtual_devices, dnote, gpu_memory_limit_mib);
    return 0;
  }
  int rc = pst_device_check_spec(spec, err, errlen);
  if (rc < 0) return rc;
  rc = pst_device_open(spec, gpu_memory_limit_mib, threads, &d->be, note, notelen);
  if (rc < 0) snprintf(err, errlen, "%s", note);
  else if (strcmp(spec, "auto") == 0) snprintf(d->spec, sizeof d->spec, "%s", d->be->name);
  return rc;
}

void pst_vdev_pin(const pst_vdev *d) {
  if (!d->pinned) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int i = 0; i < d->n_cores; i++) CPU_SET(d->cores[i], &set);
  /* Best effort: a thread that cannot be pinned still computes right, only slower. */
  (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

void pst_vdev_cores_text(const pst_vdev *d, char *out, size_t len) {
  if (!d->pinned || d->n_cores == 0) {
    snprintf(out, len, "any");
    return;
  }
  if (d->n_cores == 1)
    snprintf(out, len, "%d", d->cores[0]);
  else
    snprintf(out, len, "%d-%d", d->cores[0], d->cores[d->n_cores - 1]);
}

void pst_vdev_close(pst_vdev *d) {
  if (d->be) d->be->destroy(d->be);
  d->be = NULL;
}
