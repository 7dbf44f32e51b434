/* The device loader: picks the CPU backend or dlopen()s the CUDA backend.
 *
 * Plain C with no CUDA header and no CUDA library at link time (only -ldl): whether CUDA
 * is usable is found out at run time, one step at a time, so that the note given back
 * names the first missing piece (driver, library, device) rather than a symptom. */
#include "kernels/device.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "kernels/cuda/pst_cuda.h"
#include "kernels/device_spec.h"

#define CUDA_LIB_NAME "libpstrain_cuda.so"

/* The loaded library; filled once under g_lock and never unloaded, since backends created
 * from it point into its code. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  int tried;
  int rc;
  char where[PATH_MAX + 512]; /* the path loaded, or why nothing was */
  pst_cuda_probe_fn probe;
  pst_cuda_describe_device_fn describe_device;
  pst_cuda_backend_create_fn create;
} g_cuda;

/* Makes out a single line, in place: newlines become spaces. */
static void one_line(char *out, size_t outlen) {
  for (size_t i = 0; i < outlen && out[i]; i++)
    if (out[i] == '\n' || out[i] == '\r') out[i] = ' ';
}

/* Lines logged by the library go through our logger, with the daemon's name and level. */
static void log_bridge(int level, const char *line) { pst_log(level, "%s", line); }

/* Whether the NVIDIA driver library is present; the CUDA runtime itself only says
 * "CUDA driver version is insufficient" when there is no driver at all. */
static int driver_present(char *why, size_t whylen) {
  void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h) return 1; /* kept loaded: the CUDA runtime is about to load it anyway */
  const char *e = dlerror();
  if (!e || strstr(e, "No such file"))
    snprintf(why, whylen, "no CUDA driver (libcuda.so.1 not found)");
  else
    snprintf(why, whylen, "no usable CUDA driver (%s)", e);
  return 0;
}

/* dlopen()s path and resolves the entry points; 0, or -ENOENT with dlerror() in err. */
static int try_load(const char *path, char *err, size_t errlen) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(err, errlen, "%s", e ? e : "dlopen failed");
    return -ENOENT;
  }
  pst_cuda_probe_fn probe = (pst_cuda_probe_fn)dlsym(h, "pst_cuda_probe");
  pst_cuda_describe_device_fn describe =
      (pst_cuda_describe_device_fn)dlsym(h, "pst_cuda_describe_device");
  pst_cuda_backend_create_fn create =
      (pst_cuda_backend_create_fn)dlsym(h, "pst_cuda_backend_create");
  pst_cuda_set_log_fn set_log = (pst_cuda_set_log_fn)dlsym(h, "pst_cuda_set_log");
  if (!probe || !describe || !create || !set_log) {
    snprintf(err, errlen, "%s lacks the pst_cuda_* entry points (a stale build?)", path);
    dlclose(h);
    return -ENOENT;
  }
  set_log(log_bridge);
  g_cuda.probe = probe;
  g_cuda.describe_device = describe;
  g_cuda.create = create;
  return 0;
}

/* The directory of the running executable, without a trailing slash; 0 or -1. */
static int exe_dir(char *out, size_t outlen) {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return -1;
  buf[n] = '\0';
  char *slash = strrchr(buf, '/');
  if (!slash) return -1;
  *slash = '\0';
  if ((size_t)snprintf(out, outlen, "%s", buf[0] ? buf : "/") >= outlen) return -1;
  return 0;
}

static int load_locked(void) {
  char err[PATH_MAX + 256];
  const char *env = getenv("PSTRAIN_CUDA_LIB");
  if (env && env[0]) {
    if (try_load(env, err, sizeof err) == 0) {
      snprintf(g_cuda.where, sizeof g_cuda.where, "%s", env);
      return 0;
    }
    snprintf(g_cuda.where, sizeof g_cuda.where, "cannot load PSTRAIN_CUDA_LIB=%s: %s", env, err);
    return -ENOENT;
  }
  /* A candidate that exists but does not load (a missing cuDNN, say) explains more than
   * the final "not found", so its error is the one reported. */
  char first_err[PATH_MAX + 256] = "";
  char dir[PATH_MAX];
  if (exe_dir(dir, sizeof dir) == 0) {
    const char *const rel[] = {"/" CUDA_LIB_NAME, "/../kernels/cuda/" CUDA_LIB_NAME};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
      char path[PATH_MAX + 64];
      if ((size_t)snprintf(path, sizeof path, "%s%s", dir, rel[i]) >= sizeof path) continue;
      if (access(path, F_OK) != 0) continue;
      if (try_load(path, err, sizeof err) == 0) {
        snprintf(g_cuda.where, sizeof g_cuda.where, "%s", path);
        return 0;
      }
      if (!first_err[0]) snprintf(first_err, sizeof first_err, "%s", err);
    }
  }
  if (try_load(CUDA_LIB_NAME, err, sizeof err) == 0) {
    snprintf(g_cuda.where, sizeof g_cuda.where, "%s (through the loader path)", CUDA_LIB_NAME);
    return 0;
  }
  snprintf(g_cuda.where, sizeof g_cuda.where, "cannot load " CUDA_LIB_NAME ": %s",
           first_err[0] ? first_err : err);
  return -ENOENT;
}

int pst_device_load_cuda(char *where, size_t wherelen) {
  pthread_mutex_lock(&g_lock);
  if (!g_cuda.tried) {
    g_cuda.rc = load_locked();
    g_cuda.tried = 1;
    one_line(g_cuda.where, sizeof g_cuda.where);
  }
  int rc = g_cuda.rc;
  if (where && wherelen) snprintf(where, wherelen, "%s", g_cuda.where);
  pthread_mutex_unlock(&g_lock);
  return rc;
}

/* Driver, library, device count: 0 and the count, or a negative code and why. */
static int cuda_available(int *count, char *why, size_t whylen) {
  *count = 0;
  if (!driver_present(why, whylen)) return -ENODEV;
  int rc = pst_device_load_cuda(why, whylen);
  if (rc != 0) return rc;
  char pwhy[256] = "";
  int n = g_cuda.probe(pwhy, sizeof pwhy);
  if (n <= 0) {
    snprintf(why, whylen, "no CUDA devices: %s", pwhy[0] ? pwhy : "none visible");
    return -ENODEV;
  }
  *count = n;
  return 0;
}

static int open_cpu(int cpu_threads, pst_backend **out) {
  int rc = pst_cpu_backend_create(cpu_threads > 0 ? cpu_threads : 1, out);
  if (rc == 0 && !*out) rc = -ENOMEM;
  return rc;
}

int pst_device_open(const char *spec, size_t mem_limit_mib, int cpu_threads, pst_backend **out,
                    char *note, size_t notelen) {
  char dummy[8];
  if (!note || notelen == 0) {
    note = dummy;
    notelen = sizeof dummy;
  }
  note[0] = '\0';
  if (!out) {
    snprintf(note, notelen, "pst_device_open: out is NULL");
    return -EINVAL;
  }
  *out = NULL;
  pst_spec_kind kind;
  int index, rc;
  double rate;
  if (pst_device_spec_parse(spec, &kind, &index, &rate) != 0)
    return pst_device_check_spec(spec, note, notelen); /* the one reason a spec is refused */
  if (kind == PST_SPEC_NULL) {
    rc = pst_null_backend_create(rate, out);
    if (rc != 0)
      snprintf(note, notelen, "cannot create the null backend: %s", strerror(-rc));
    else if (rate > 0)
      snprintf(note, notelen, "using the null device: no compute, each step paced like a "
                              "device that trains %.0f samples a second", rate);
    else
      snprintf(note, notelen, "using the null device: no compute, a fixed gradient");
    return rc;
  }
  if (kind == PST_SPEC_CPU) {
    rc = open_cpu(cpu_threads, out);
    if (rc != 0)
      snprintf(note, notelen, "cannot create the CPU backend: %s", strerror(-rc));
    else
      snprintf(note, notelen, "using the CPU backend (%d thread%s)",
               cpu_threads > 1 ? cpu_threads : 1, cpu_threads > 1 ? "s" : "");
    return rc;
  }
  if (mem_limit_mib > SIZE_MAX / (1024 * 1024)) {
    snprintf(note, notelen, "device memory cap of %zu MiB is too large", mem_limit_mib);
    return -EINVAL;
  }
  size_t cap = mem_limit_mib * 1024 * 1024;
  char why[768] = "";
  int count = 0;
  rc = cuda_available(&count, why, sizeof why);
  if (rc == 0) {
    char err[512] = "";
    rc = g_cuda.create(index, cap, out, err, sizeof err);
    if (rc == 0) {
      char desc[512] = "";
      if (g_cuda.describe_device(index, desc, sizeof desc) != 0)
        snprintf(desc, sizeof desc, "cuda:%d", index);
      if (cap)
        snprintf(note, notelen, "using %s; memory cap %zu MiB", desc, mem_limit_mib);
      else
        snprintf(note, notelen, "using %s", desc);
      one_line(note, notelen);
      return 0;
    }
    *out = NULL;
    snprintf(why, sizeof why, "%s", err[0] ? err : strerror(-rc));
  }
  if (kind == PST_SPEC_CUDA) {
    /* The backend's own errors already start with "cuda:N: ". */
    char prefix[32];
    int plen = snprintf(prefix, sizeof prefix, "cuda:%d: ", index);
    const char *reason = strncmp(why, prefix, (size_t)plen) == 0 ? why + plen : why;
    snprintf(note, notelen, "cuda:%d is not usable: %s", index, reason);
    one_line(note, notelen);
    return rc;
  }
  int crc = open_cpu(cpu_threads, out);
  if (crc != 0) {
    snprintf(note, notelen, "%s; and the CPU backend failed too: %s", why, strerror(-crc));
    one_line(note, notelen);
    return crc;
  }
  snprintf(note, notelen, "%s; using the CPU backend", why);
  one_line(note, notelen);
  return 0;
}

int pst_device_list(FILE *out) {
  char why[768] = "";
  int count = 0;
  if (cuda_available(&count, why, sizeof why) != 0) {
    /* "no CUDA devices: " is already the prefix of the probe's own message. */
    fprintf(out, "%s%s\n", strncmp(why, "no CUDA devices", 15) == 0 ? "" : "no CUDA devices: ",
            why);
    return 0;
  }
  for (int i = 0; i < count; i++) {
    char line[512];
    if (g_cuda.describe_device(i, line, sizeof line) != 0 && !line[0])
      snprintf(line, sizeof line, "cuda:%d: cannot be queried", i);
    one_line(line, sizeof line);
    fprintf(out, "%s\n", line);
  }
  return count;
}
