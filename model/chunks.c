/* The chunks the parameter vector travels in (model.h, pst_model_chunks). */
#include <stddef.h>

#include "model/model.h"

/* Layer l's parameters, [*a, *b) of the vector (every range it has: weights, bias, state);
 * 0 when it has none. */
static int layer_range(const pst_layer *L, size_t *a, size_t *b) {
  const size_t off[3] = {L->w_offset, L->b_offset, L->s_offset};
  const size_t cnt[3] = {L->w_count, L->b_count, L->s_count};
  int any = 0;
  for (int k = 0; k < 3; k++) {
    if (cnt[k] == 0) continue;
    if (!any || off[k] < *a) *a = off[k];
    if (!any || off[k] + cnt[k] > *b) *b = off[k] + cnt[k];
    any = 1;
  }
  return any;
}

size_t pst_model_chunks(const pst_model *m, size_t lo, size_t n, size_t max_floats,
                        size_t *starts) {
  if (n == 0 || max_floats == 0) return 0;
  size_t group = PST_CHUNK_GROUP_FLOATS < max_floats ? PST_CHUNK_GROUP_FLOATS : max_floats;
  size_t hi = lo + n, count = 0, open = 0, at = lo; /* open: floats of the group being made */
#define CUT(x)                                     \
  do {                                             \
    if (starts) starts[count] = (x) - lo;          \
    count++;                                       \
  } while (0)
  CUT(lo);
  for (int l = 1; l < m->n_layers; l++) {
    size_t a = 0, b = 0; /* set by layer_range when it returns 1 (gcc cannot tell) */
    if (!layer_range(&m->layers[l], &a, &b)) continue;
    if (a < lo) a = lo;
    if (b > hi) b = hi;
    if (a >= b) continue;
    /* Layers lie in order and cover the vector; a gap (none in a parsed model) joins the
     * layer after it. */
    a = at;
    size_t len = b - a;
    if (len >= group) {
      /* A layer of its own: the group before it ends, and it is cut into pieces of
       * max_floats when larger. */
      if (open > 0) CUT(a);
      for (size_t p = a + max_floats; p < b; p += max_floats) CUT(p);
      CUT(b);
      open = 0;
    } else {
      /* A small layer joins the group, which ends once it holds `group` floats or would
       * grow past max_floats. */
      if (open > 0 && open + len > max_floats) {
        CUT(a);
        open = 0;
      }
      open += len;
      if (open >= group) {
        CUT(b);
        open = 0;
      }
    }
    at = b;
  }
  /* The last group, and anything no layer covered. */
  if (open > 0 || at < hi) {
    if (at < hi && open + (hi - at) > max_floats) {
      if (open > 0) CUT(at);
      for (size_t p = at + max_floats; p < hi; p += max_floats) CUT(p);
    }
    CUT(hi);
  }
#undef CUT
  return count - 1;
}
