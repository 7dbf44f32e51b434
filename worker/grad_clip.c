/* The clip norm on a worker's share (worker/grad_clip.h), moved from worker/step.c so that an
 * all-reduce rank clips with the same arithmetic. */
#include "worker/grad_clip.h"

#include <math.h>

int wk_clip_gradient(const pst_model *m, float *grad, int world, double clip_norm) {
  size_t off[PST_MODEL_MAX_LAYERS], count[PST_MODEL_MAX_LAYERS];
  int ns = pst_model_state_ranges(m, off, count);
  size_t n = m->n_params;
  double sq = 0;
  size_t at = 0;
  for (int r = 0; r <= ns; r++) {
    size_t stop = r < ns ? off[r] : n;
    for (size_t i = at; i < stop; i++) sq += (double)grad[i] * grad[i];
    if (r < ns) at = off[r] + count[r];
  }
  double norm = sqrt(sq) * (double)world;
  if (!(norm > clip_norm)) return 0;
  float k = (float)(clip_norm / norm);
  at = 0;
  for (int r = 0; r <= ns; r++) {
    size_t stop = r < ns ? off[r] : n;
    for (size_t i = at; i < stop; i++) grad[i] *= k;
    if (r < ns) at = off[r] + count[r];
  }
  return 1;
}
