/* The in-process tests' check: counts a passed or failed condition, and names a failed one
 * with its file and line on stderr. A test's main() prints the counts and exits non-zero
 * when g_fail is not 0. One copy, included by each test (one translation unit each). */
#ifndef PSTRAIN_COMMON_CHECK_H
#define PSTRAIN_COMMON_CHECK_H

#include <stdio.h>

static int g_pass, g_fail;

#define CHECK(cond)                                                   \
  do {                                                                \
    if (cond) {                                                       \
      g_pass++;                                                       \
    } else {                                                          \
      g_fail++;                                                       \
      fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                 \
  } while (0)

/* CHECK with the values that failed: a printf format and its arguments after the condition. */
#define CHECKF(cond, ...)                                                  \
  do {                                                                     \
    if (cond) {                                                            \
      g_pass++;                                                            \
    } else {                                                               \
      g_fail++;                                                            \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);      \
      fprintf(stderr, __VA_ARGS__);                                        \
      fputc('\n', stderr);                                                 \
    }                                                                      \
  } while (0)

#endif
