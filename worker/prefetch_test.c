/* The thread that prepares the next batch (worker/prefetch.h): a batch asked for ahead is the
 * one pst_batch_fill makes in place for that step, a batch asked for a step that does not
 * come next is not used, and a stop with a batch asked for ends. In memory: 5 gray 6x6
 * images, augmented (flips and crops), so that each step's bytes are its own. */
#include <stdlib.h>
#include <string.h>

#include "kernels/testing.h"
#include "worker/prefetch.h"

int main(void) {
  pst_dataset d;
  memset(&d, 0, sizeof d);
  d.n = 5;
  d.rows = d.cols = 6;
  d.channels = 1;
  d.images = malloc(5 * 36 * sizeof(float));
  d.labels = malloc(5 * sizeof(int32_t));
  for (int i = 0; i < 5 * 36; i++) d.images[i] = (float)((i * 37) % 101) / 100.0f;
  for (int i = 0; i < 5; i++) d.labels[i] = i % 3;
  float mean[3], std[3];
  pst_data_channel_stats(&d, mean, std);
  pst_image_opts aug = {.flip = 1, .crop_pad = 2};
  pst_batch_prep p;
  char err[512];
  CHECK(pst_batch_prep_init(&p, &d, "/data", 6, 6, 1, 36, &aug, mean, std, 42, 1, err,
                            sizeof err) == 0);

  wk_prefetch pf;
  CHECK(wk_prefetch_start(&pf, &p, 5) == 0);
  const int32_t order[10] = {4, 3, 2, 1, 0, 0, 2, 4, 1, 3};
  float a[5 * 36], direct[5 * 36];
  int32_t yl[5], yd[5];
  wk_prefetch_take(&pf, 0, order, a, yl); /* nothing asked: made in place */
  pst_batch_fill(&p, order, 5, 1, 0, direct, yd);
  CHECK(memcmp(a, direct, sizeof a) == 0 && memcmp(yl, yd, sizeof yl) == 0);
  wk_prefetch_ask(&pf, 1, order + 5);
  CHECK(wk_prefetch_take(&pf, 1, order + 5, a, yl) >= 0);
  pst_batch_fill(&p, order + 5, 5, 1, 1, direct, yd);
  CHECK(memcmp(a, direct, sizeof a) == 0 && memcmp(yl, yd, sizeof yl) == 0);
  wk_prefetch_ask(&pf, 7, order + 5); /* a step that does not come next is not used */
  wk_prefetch_take(&pf, 2, order, a, yl);
  pst_batch_fill(&p, order, 5, 1, 2, direct, yd);
  CHECK(memcmp(a, direct, sizeof a) == 0);
  /* Another step's batch is other bytes: the check above compares something. */
  pst_batch_fill(&p, order, 5, 1, 3, direct, yd);
  CHECK(memcmp(a, direct, sizeof a) != 0);
  wk_prefetch_ask(&pf, 3, order); /* stopped with a batch asked for */
  wk_prefetch_stop(&pf);
  pst_data_free(&d);
  return t_summary();
}
