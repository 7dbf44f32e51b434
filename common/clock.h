/* Monotonic time in seconds, for durations (never wall-clock dates). */
#ifndef PSTRAIN_COMMON_CLOCK_H
#define PSTRAIN_COMMON_CLOCK_H

#include <time.h>

static inline double pst_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
