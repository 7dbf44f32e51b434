/* The merge layers on the CPU: element-wise add (also the gradients' fan-in) and channel
 * concatenation. Plain loops that the compiler vectorises; the reference the CUDA backend's
 * merge.cu is compared with. */
#include <errno.h>
#include <string.h>

#include "kernels/cpu_internal.h"

int cpu_add(pst_backend *b, const float *x0, const float *x1, float *y, size_t n) {
  (void)b;
  if (n > 0 && (x0 == NULL || y == NULL)) return -EINVAL;
  if (x1 == NULL) {
    if (y != x0) memmove(y, x0, n * sizeof(float));
    return 0;
  }
  for (size_t i = 0; i < n; i++) y[i] = x0[i] + x1[i];
  return 0;
}

static int check_concat(const float *a, const float *b, int c, int y_c, int offset) {
  if (a == NULL || b == NULL || c <= 0 || offset < 0 || y_c < c || offset > y_c - c)
    return -EINVAL;
  return 0;
}

int cpu_concat_forward(pst_backend *b, const float *x, float *y, size_t rows, int c, int y_c,
                       int offset) {
  (void)b;
  if (rows == 0) return 0;
  if (check_concat(x, y, c, y_c, offset) != 0) return -EINVAL;
  for (size_t r = 0; r < rows; r++)
    memcpy(y + r * (size_t)y_c + offset, x + r * (size_t)c, (size_t)c * sizeof(float));
  return 0;
}

int cpu_concat_backward(pst_backend *b, const float *dy, float *dx, size_t rows, int c, int y_c,
                        int offset) {
  (void)b;
  if (rows == 0) return 0;
  if (check_concat(dy, dx, c, y_c, offset) != 0) return -EINVAL;
  for (size_t r = 0; r < rows; r++)
    memcpy(dx + r * (size_t)c, dy + r * (size_t)y_c + offset, (size_t)c * sizeof(float));
  return 0;
}
