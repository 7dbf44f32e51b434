/* The parameter vector's contents (model.h): where the model state (batch norm's moving
 * statistics) lies in it (pst_model_state_ranges), and the initial values of a seed
 * (pst_model_init_params), the same on every machine. */
#include "model/model.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* splitmix64: tiny, fast and identical on every machine, unlike rand(). */
static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int pst_model_state_ranges(const pst_model *m, size_t *off, size_t *count) {
  int n = 0;
  for (int i = 1; i < m->n_layers; i++) {
    const pst_layer *L = &m->layers[i];
    if (L->s_count == 0) continue;
    off[n] = L->s_offset;
    count[n] = L->s_count;
    n++;
  }
  return n;
}

void pst_model_init_params(const pst_model *m, uint64_t seed, float *params) {
  for (int i = 1; i < m->n_layers; i++) {
    const pst_layer *L = &m->layers[i];
    if (L->kind == PST_LAYER_BATCHNORM) {
      /* Keras's initialisers: the identity transform, and moving statistics of a
       * standardised input. */
      for (size_t j = 0; j < L->w_count; j++) {
        params[L->w_offset + j] = 1.0f;
        params[L->b_offset + j] = 0.0f;
        params[L->s_offset + j] = 0.0f;
        params[L->s_offset + L->w_count + j] = 1.0f;
      }
      continue;
    }
    if (L->w_count == 0) continue;
    double fan_in, fan_out;
    if (L->kind == PST_LAYER_CONV2D) {
      fan_in = (double)L->k_h * L->k_w * L->in_c;
      fan_out = (double)L->k_h * L->k_w * L->filters;
    } else if (L->kind == PST_LAYER_DEPTHWISE_CONV2D) {
      /* Each output sees KHxKW inputs of its own channel: that is its true fan (Keras
       * counts the channels in as well, which would shrink the initial weights C-fold). */
      fan_in = fan_out = (double)L->k_h * L->k_w;
    } else {
      fan_in = L->in_c;
      fan_out = L->units;
    }
    double limit = (L->act == PST_ACT_RELU || L->act == PST_ACT_RELU6) ? sqrt(6.0 / fan_in) : sqrt(6.0 / (fan_in + fan_out));
    /* One stream per layer, so a layer's initial weights depend only on the seed and
     * its position, not on the sizes of the layers before it. */
    uint64_t state = seed ^ (0x632be59bd9b4e019ull * (uint64_t)i);
    float *w = params + L->w_offset;
    for (size_t j = 0; j < L->w_count; j++) {
      double u = ((double)(splitmix64(&state) >> 40) + 0.5) * (1.0 / 16777216.0);
      w[j] = (float)((2.0 * u - 1.0) * limit);
    }
    memset(params + L->b_offset, 0, L->b_count * sizeof(float));
  }
}
