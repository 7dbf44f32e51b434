/* Which OpenBLAS kernels a CPU worker computes with, and the floating-point environment of
 * OpenBLAS's threads.
 *
 * OpenBLAS picks its kernels once, in its library constructor (before main), from the CPU's
 * vendor, family and model. A CPU it does not know by model gets old generic kernels even when
 * it has AVX2/FMA or AVX-512: OpenBLAS 0.3.21 on a cloud VM that calls its CPU "Intel(R)
 * Xeon(R) Processor" chose Prescott, and the mlp trained 3-4x slower than with SkylakeX. Here
 * the choice is made again from CPUID's feature flags; when OpenBLAS's is worse, the process
 * sets OPENBLAS_CORETYPE and executes itself again (the only way to reach a choice made before
 * main). A user's own OPENBLAS_CORETYPE is left alone. */
#ifndef PSTRAIN_KERNELS_BLAS_SETUP_H
#define PSTRAIN_KERNELS_BLAS_SETUP_H

#include <stddef.h>

/* CPU features that decide which kernels can run, as CPUID and XGETBV report them (a
 * feature counts only when the OS also saves its registers). */
typedef struct {
  int avx2, fma;                          /* 256-bit kernels: Haswell */
  int avx512f, avx512bw, avx512dq, avx512vl; /* 512-bit kernels: SkylakeX */
} pst_cpu_features;

void pst_cpu_features_detect(pst_cpu_features *f);

/* The OPENBLAS_CORETYPE that suits a CPU with features f when OpenBLAS chose `current` (its
 * core name, as openblas_get_corename() says), or NULL when OpenBLAS's choice is as good as
 * what f allows (or f allows nothing better). why (may be NULL) gets the reason in words. */
const char *pst_blas_pick_core(const pst_cpu_features *f, const char *current, char *why,
                               size_t whylen);

/* For tests: the core name pstrain takes as OpenBLAS's own choice instead of asking OpenBLAS,
 * e.g. "Prescott" (what OpenBLAS 0.3.21 chose on a VM that hides its CPU model), so that the
 * correction below and the process executed again happen on any CPU that can run better
 * kernels. A user's OPENBLAS_CORETYPE still wins. */
#define PST_BLAS_TEST_CORE_ENV "PSTRAIN_TEST_OPENBLAS_CORENAME"

/* What main calls before any work (after reading its configuration): decides the kernels
 * (above), honouring a user's OPENBLAS_CORETYPE. note gets one line for the log saying which kernels are used and why.
 * Returns PST_BLAS_REEXEC when it set OPENBLAS_CORETYPE and the caller must execute itself
 * again to take it (execv("/proc/self/exe", argv)), PST_BLAS_CHOSEN in the process executed
 * again (the kernels are pstrain's choice, worth a line in the log), else 0. */
#define PST_BLAS_REEXEC 1
#define PST_BLAS_CHOSEN 2
int pst_blas_choose(char *note, size_t notelen);

/* The CPU as a compute device, in one line for --list-devices (first, as TensorFlow lists
 * CPU:0 before its GPUs): "cpu: model M; cores N; OpenBLAS kernels K (CONFIG)". M is
 * /proc/cpuinfo's model name ("unknown" where the VM hides it), N the cores this process may
 * run on (its affinity, as nproc counts them), K the kernel set OpenBLAS computes with in this
 * process (openblas_get_corename) and CONFIG its build (openblas_get_config). */
void pst_cpu_describe(char *line, size_t len);

/* Sets the calling thread to flush denormals (common/fpenv.h) and makes OpenBLAS start its
 * threads again, so that they inherit it (they were made by OpenBLAS's constructor, before
 * main could set anything). Call after openblas_set_num_threads. Returns 0, or a negative
 * code when OpenBLAS's threads could not be restarted (they then compute with denormals). */
int pst_blas_flush_denormals(void);

#endif
