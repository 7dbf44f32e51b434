#include "common/fpenv.h"

#include <errno.h>

#if defined(__x86_64__) || defined(__i386__)
#include <pmmintrin.h>
#include <xmmintrin.h>

int pst_fp_flush_denormals(void) {
  _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
  _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
  return 0;
}

int pst_fp_flushing(void) {
  return _MM_GET_FLUSH_ZERO_MODE() == _MM_FLUSH_ZERO_ON &&
         _MM_GET_DENORMALS_ZERO_MODE() == _MM_DENORMALS_ZERO_ON;
}

#elif defined(__aarch64__)
/* FPCR.FZ (bit 24) flushes both inputs and results of single and double operations. */
#define FPCR_FZ (1ull << 24)

int pst_fp_flush_denormals(void) {
  unsigned long long fpcr;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
  fpcr |= FPCR_FZ;
  __asm__ __volatile__("msr fpcr, %0" : : "r"(fpcr));
  return 0;
}

int pst_fp_flushing(void) {
  unsigned long long fpcr;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
  return (fpcr & FPCR_FZ) != 0;
}

#else
int pst_fp_flush_denormals(void) { return -ENOTSUP; }
int pst_fp_flushing(void) { return 0; }
#endif
