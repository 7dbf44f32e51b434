/* The floating-point environment of pstrain's computing threads.
 *
 * Every thread that computes on floats (the ps's loop, a CPU worker's thread and OpenBLAS's
 * threads beside it) flushes denormals to zero: FTZ (results that would be denormal become
 * zero) and DAZ (denormal inputs are read as zero). On Intel CPUs an operation on a denormal
 * costs about a hundred times a normal one, and optimizer state decays into denormals by
 * itself: the Adam slots of a parameter whose gradient stays zero (a pixel that is almost
 * always black) shrink by beta1 and beta2 every step, so a long run would slow down by an
 * order of magnitude as it goes. Values below FLT_MIN (1.2e-38) carry nothing a model can
 * use; with both bits set the cost of a step no longer depends on the values.
 *
 * The bits are per thread and a new thread inherits its creator's: set them first in main,
 * before any thread starts (a library's threads made before main, like OpenBLAS's pool, must
 * be made again: kernels/blas_setup.h). */
#ifndef PSTRAIN_COMMON_FPENV_H
#define PSTRAIN_COMMON_FPENV_H

/* Sets FTZ and DAZ in the calling thread. Returns 0, or -ENOTSUP on a CPU where pstrain does
 * not know how (the values are then computed with denormals, only slower). */
int pst_fp_flush_denormals(void);
/* 1 when the calling thread flushes denormals (both bits set), else 0. */
int pst_fp_flushing(void);

#endif
