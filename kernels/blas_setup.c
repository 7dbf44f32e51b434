#include "kernels/blas_setup.h"

#include <ctype.h>
#include <dlfcn.h>
#include <sched.h>
#include <unistd.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/fpenv.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

/* OpenBLAS extensions, declared here because not every cblas.h carries them. */
char *openblas_get_corename(void);
char *openblas_get_config(void);

/* Set beside OPENBLAS_CORETYPE when pstrain chose it, so that the process executed again
 * knows the value is its own (and never executes itself a third time). Holds OpenBLAS's own
 * choice, for the log line. */
#define CHOSEN_ENV "PSTRAIN_BLAS_CHOSEN_OVER"

void pst_cpu_features_detect(pst_cpu_features *f) {
  memset(f, 0, sizeof *f);
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return;
  int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, avx = (c >> 28) & 1;
  if (!osxsave || !avx) return;
  unsigned xlo, xhi;
  __asm__ __volatile__("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  (void)xhi;
  int os_ymm = (xlo & 0x6) == 0x6;     /* XMM and YMM state */
  int os_zmm = (xlo & 0xe6) == 0xe6;   /* and opmask, ZMM_Hi256, Hi16_ZMM */
  if (!os_ymm || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
  f->fma = fma;
  f->avx2 = (b >> 5) & 1;
  if (os_zmm) {
    f->avx512f = (b >> 16) & 1;
    f->avx512dq = (b >> 17) & 1;
    f->avx512bw = (b >> 30) & 1;
    f->avx512vl = (b >> 31) & 1;
  }
#endif
}

/* How wide OpenBLAS's kernels for a core are: 2 for AVX-512, 1 for AVX2/FMA, 0 for older
 * ones. Names from OpenBLAS's dynamic.c (corename[]); one it did not have when this was
 * written counts as old, so pstrain would rather choose than leave a CPU on old kernels. */
static int core_level(const char *core) {
  static const char *const avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids",
                                       "Sapphirerapids"};
  static const char *const avx2[] = {"Haswell", "Zen", "Zen2", "Zen3"};
  if (core == NULL) return 0;
  for (size_t i = 0; i < sizeof avx512 / sizeof avx512[0]; i++)
    if (strcasecmp(core, avx512[i]) == 0) return 2;
  for (size_t i = 0; i < sizeof avx2 / sizeof avx2[0]; i++)
    if (strcasecmp(core, avx2[i]) == 0) return 1;
  return 0;
}

const char *pst_blas_pick_core(const pst_cpu_features *f, const char *current, char *why,
                               size_t whylen) {
  int level = 0;
  const char *best = NULL, *has = "";
  if (f->avx512f && f->avx512bw && f->avx512dq && f->avx512vl && f->avx2 && f->fma) {
    level = 2, best = "SkylakeX", has = "AVX-512 (F, BW, DQ, VL)";
  } else if (f->avx2 && f->fma) {
    level = 1, best = "Haswell", has = "AVX2 and FMA";
  }
  if (best == NULL || core_level(current) >= level) {
    if (why)
      snprintf(why, whylen, "OpenBLAS's own choice for this CPU%s",
               best == NULL ? " (it has neither AVX2 with FMA nor AVX-512)" : "");
    return NULL;
  }
  if (why)
    snprintf(why, whylen, "OpenBLAS chose %s kernels, but this CPU has %s", current ? current : "no",
             has);
  return best;
}

int pst_blas_choose(char *note, size_t notelen) {
  const char *current = openblas_get_corename();
  const char *env = getenv("OPENBLAS_CORETYPE");
  const char *chosen_over = getenv(CHOSEN_ENV);
  const char *stand_in = getenv(PST_BLAS_TEST_CORE_ENV);
  if (stand_in != NULL && stand_in[0] == '\0') stand_in = NULL;
  if (chosen_over != NULL) {
    /* The second run: OpenBLAS took the value set by the first. */
    snprintf(note, notelen,
             "OpenBLAS uses %s kernels, set by pstrain (OPENBLAS_CORETYPE=%s): OpenBLAS's own "
             "choice was %s, older kernels than this CPU can run",
             current ? current : "unknown", env ? env : "", chosen_over);
    unsetenv(CHOSEN_ENV);
    return PST_BLAS_CHOSEN;
  }
  if (env != NULL && env[0] != '\0') {
    snprintf(note, notelen, "OpenBLAS uses %s kernels, as OPENBLAS_CORETYPE=%.40s asks",
             current ? current : "unknown", env);
    return 0;
  }
  pst_cpu_features f;
  pst_cpu_features_detect(&f);
  /* What OpenBLAS chose, or what a test says it chose: a CPU whose model OpenBLAS does not
   * know is rare on a developer's machine, and the path below must run in CI anyway. */
  const char *seen = stand_in ? stand_in : current;
  char why[160], over[96];
  const char *pick = pst_blas_pick_core(&f, seen, why, sizeof why);
  if (pick == NULL) {
    snprintf(note, notelen, "OpenBLAS uses %s kernels: %s", current ? current : "unknown", why);
    return 0;
  }
  if (stand_in)
    snprintf(over, sizeof over, "%.40s, as %s pretends", stand_in, PST_BLAS_TEST_CORE_ENV);
  else
    snprintf(over, sizeof over, "%.40s", current ? current : "unknown");
  if (setenv("OPENBLAS_CORETYPE", pick, 1) != 0 || setenv(CHOSEN_ENV, over, 1) != 0) {
    snprintf(note, notelen, "OpenBLAS uses %s kernels (%s; setting OPENBLAS_CORETYPE=%s failed)",
             current ? current : "unknown", why, pick);
    return 0;
  }
  char aside[128] = "";
  if (stand_in)
    snprintf(aside, sizeof aside, " (%s stands in for OpenBLAS's own choice, %.40s)",
             PST_BLAS_TEST_CORE_ENV, current ? current : "unknown");
  snprintf(note, notelen, "%s%s: running again with OPENBLAS_CORETYPE=%s", why, aside, pick);
  return PST_BLAS_REEXEC;
}

int pst_blas_flush_denormals(void) {
  int rc = pst_fp_flush_denormals();
  if (rc < 0) return rc;
  /* OpenBLAS's thread pool was made by its constructor, with the default floating-point
   * environment. blas_thread_shutdown_ (exported by its pthreads and OpenMP builds, used by
   * its own fork handler) ends the pool; the next parallel call makes it again from this
   * thread, whose FTZ/DAZ bits the new threads inherit. A serial build has no pool. */
  void (*shutdown)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "blas_thread_shutdown_");
  if (shutdown == NULL) return 0;
  shutdown();
  return 0;
}

/* /proc/cpuinfo's first "model name" (x86; "unknown" elsewhere, or where it is empty). */
static void cpu_model(char *out, size_t len) {
  snprintf(out, len, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) != 0) continue;
    const char *v = strchr(line, ':');
    if (!v) break;
    v++;
    while (*v == ' ' || *v == '\t') v++;
    size_t n = strcspn(v, "\n");
    while (n > 0 && isspace((unsigned char)v[n - 1])) n--;
    if (n > 0) snprintf(out, len, "%.*s", (int)n, v);
    break;
  }
  fclose(f);
}

void pst_cpu_describe(char *line, size_t len) {
  char model[256];
  cpu_model(model, sizeof model);
  /* The cores this process may use, as nproc counts them: a container or taskset limits them,
   * and so does what the machine has online. */
  cpu_set_t set;
  long cores = 0;
  if (sched_getaffinity(0, sizeof set, &set) == 0) cores = CPU_COUNT(&set);
  if (cores <= 0) cores = sysconf(_SC_NPROCESSORS_ONLN);
  const char *core = openblas_get_corename();
  const char *config = openblas_get_config();
  char conf[256];
  snprintf(conf, sizeof conf, "%s", config ? config : "");
  /* One line whatever the build string holds. */
  for (char *p = conf; *p; p++)
    if (*p == '\n' || *p == '\r') *p = ' ';
  size_t n = strlen(conf);
  while (n > 0 && conf[n - 1] == ' ') conf[--n] = '\0';
  snprintf(line, len, "cpu: model %s; cores %ld; OpenBLAS kernels %s (%s)", model, cores,
           core && core[0] ? core : "unknown", conf[0] ? conf : "no build string");
}
