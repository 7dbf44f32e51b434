#include "ps/train/handout.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
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

int pst_handout_restore(pst_handout *h, uint32_t epoch, uint64_t next, const uint64_t *trained,
                        const pst_range *back, size_t n_back, char *why, size_t whylen) {
  if (epoch < 1 || epoch > h->epochs + 1 || next >= h->samples || (epoch > h->epochs && next)) {
    snprintf(why, whylen, "the fresh ranges' position (epoch %u, sample %" PRIu64 ") is outside "
             "%u epochs of %" PRIu64 " samples", epoch, next, h->epochs, h->samples);
    return -EINVAL;
  }
  /* What was handed out of each epoch must be trained or come back, once. */
  uint64_t *sum = calloc((size_t)h->epochs + 2, sizeof *sum);
  if (!sum) return -ENOMEM;
  int rc = 0;
  for (size_t i = 0; i < n_back && rc == 0; i++) {
    const pst_range *r = &back[i];
    uint64_t limit = r->epoch < epoch ? h->samples : next;
    if (r->epoch < 1 || r->epoch > h->epochs || r->count == 0 || r->count > h->range ||
        r->start + r->count > limit) {
      snprintf(why, whylen, "a range to hand out again (epoch %u, [%" PRIu64 ", +%u)) was never "
               "handed out", r->epoch, r->start, r->count);
      rc = -EINVAL;
    } else {
      sum[r->epoch] += r->count;
    }
  }
  for (uint32_t e = 1; e <= h->epochs && rc == 0; e++) {
    uint64_t out = e < epoch ? h->samples : e == epoch ? next : 0;
    if (trained[e] + sum[e] != out) {
      snprintf(why, whylen, "epoch %u's books do not add up: %" PRIu64 " samples trained and %"
               PRIu64 " to hand out again, of %" PRIu64 " handed out", e, trained[e], sum[e], out);
      rc = -EINVAL;
    }
  }
  free(sum);
  if (rc < 0) return rc;
  pst_range *b = NULL;
  if (n_back > 0) {
    b = malloc(n_back * sizeof *b);
    if (!b) return -ENOMEM;
    memcpy(b, back, n_back * sizeof *b);
  }
  free(h->back);
  h->back = b;
  h->n_back = h->cap_back = n_back;
  h->epoch = epoch;
  h->next = next;
  for (uint32_t e = 1; e <= h->epochs; e++) h->trained[e] = trained[e];
  h->complete = 0;
  while (h->complete < h->epochs && h->trained[h->complete + 1] == h->samples) h->complete++;
  h->out = 0;
  return 0;
}
