#include "ps/handout.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int pst_handout_init(pst_handout *h, uint64_t samples, uint32_t range, uint32_t epochs) {
  memset(h, 0, sizeof *h);
  if (samples == 0 || range == 0 || epochs == 0) return -EINVAL;
  h->samples = samples;
  h->range = range;
  h->epochs = epochs;
  h->epoch = 1;
  h->trained = calloc((size_t)epochs + 2, sizeof *h->trained);
  return h->trained ? 0 : -ENOMEM;
}

void pst_handout_free(pst_handout *h) {
  free(h->back);
  free(h->trained);
  memset(h, 0, sizeof *h);
}

int pst_handout_next(pst_handout *h, pst_range *r) {
  memset(r, 0, sizeof *r);
  if (h->n_back > 0) {
    *r = h->back[0];
    memmove(h->back, h->back + 1, (h->n_back - 1) * sizeof *h->back);
    h->n_back--;
  } else if (h->epoch <= h->epochs) {
    uint64_t left = h->samples - h->next;
    r->epoch = h->epoch;
    r->start = h->next;
    r->count = left < h->range ? (uint32_t)left : h->range;
    h->next += r->count;
    if (h->next == h->samples) {
      h->epoch++;
      h->next = 0;
    }
  } else {
    return 0;
  }
  h->out++;
  h->handed++;
  return 1;
}

/* Whether r lies within what has been handed out of its epoch. */
static int plausible(const pst_handout *h, const pst_range *r) {
  if (r->epoch < 1 || r->epoch > h->epochs || r->count > h->range ||
      r->start + r->count > h->samples || h->out == 0)
    return 0;
  return r->epoch < h->epoch || r->start + r->count <= h->next;
}

int pst_handout_trained(pst_handout *h, const pst_range *r) {
  if (r->count == 0) return 0;
  if (!plausible(h, r)) return -EINVAL;
  h->out--;
  h->trained[r->epoch] += r->count;
  while (h->complete < h->epochs && h->trained[h->complete + 1] == h->samples) h->complete++;
  return 0;
}

int pst_handout_return(pst_handout *h, const pst_range *r) {
  if (r->count == 0) return 0;
  if (!plausible(h, r)) return -EINVAL;
  if (h->n_back == h->cap_back) {
    size_t cap = h->cap_back ? 2 * h->cap_back : 16;
    pst_range *b = realloc(h->back, cap * sizeof *b);
    if (!b) return -ENOMEM;
    h->back = b;
    h->cap_back = cap;
  }
  h->back[h->n_back++] = *r;
  h->out--;
  h->returned++;
  return 0;
}
