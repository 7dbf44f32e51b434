/* The data handout's books (ps/train/handout.h): every sample of every epoch is trained exactly
 * once whatever ranges come back and when, returned ranges go out again first, an epoch is
 * complete only once all of its samples are trained, and ranges it never gave are refused. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "ps/train/handout.h"


#define SAMPLES 1003 /* not a multiple of the range */
#define RANGE 64
#define EPOCHS 3

/* Random workers take ranges, train them or give them back (left, lost, dropped), until the
 * handout is finished; every position of every epoch must be trained once. */
static void exactly_once(unsigned seed) {
  static unsigned char seen[EPOCHS + 1][SAMPLES];
  memset(seen, 0, sizeof seen);
  srand(seed);
  pst_handout h;
  CHECK(pst_handout_init(&h, SAMPLES, RANGE, EPOCHS) == 0);
  pst_range held[8];
  memset(held, 0, sizeof held);
  int bad = 0, steps = 0;
  while (!pst_handout_finished(&h) && steps < 100000) {
    steps++;
    int w = rand() % 8;
    if (held[w].count == 0) {
      pst_range r;
      int got = pst_handout_next(&h, &r);
      if (got) held[w] = r;
      else if (r.count != 0) bad++;
      continue;
    }
    if (rand() % 5 == 0) {
      if (pst_handout_return(&h, &held[w]) < 0) bad++;
    } else {
      for (uint32_t i = 0; i < held[w].count; i++)
        seen[held[w].epoch][held[w].start + i]++;
      if (pst_handout_trained(&h, &held[w]) < 0) bad++;
    }
    memset(&held[w], 0, sizeof held[w]);
  }
  CHECK(bad == 0);
  CHECK(pst_handout_finished(&h));
  CHECK(h.out == 0);
  int wrong = 0;
  for (int e = 1; e <= EPOCHS; e++)
    for (int i = 0; i < SAMPLES; i++) wrong += seen[e][i] != 1;
  CHECK(wrong == 0);
  pst_range r;
  CHECK(pst_handout_next(&h, &r) == 0 && r.count == 0);
  pst_handout_free(&h);
}

/* A fixed sequence: the ranges in order, the short last one, a returned range first again,
 * an epoch complete only when its last sample is trained. */
static void order(void) {
  pst_handout h;
  CHECK(pst_handout_init(&h, 150, 64, 2) == 0);
  pst_range a, b, c, d;
  CHECK(pst_handout_next(&h, &a) == 1 && a.epoch == 1 && a.start == 0 && a.count == 64);
  CHECK(pst_handout_next(&h, &b) == 1 && b.epoch == 1 && b.start == 64 && b.count == 64);
  CHECK(pst_handout_next(&h, &c) == 1 && c.epoch == 1 && c.start == 128 && c.count == 22);
  CHECK(pst_handout_return(&h, &b) == 0);
  CHECK(pst_handout_next(&h, &d) == 1 && d.epoch == 1 && d.start == 64 && d.count == 64);
  CHECK(pst_handout_trained(&h, &a) == 0 && pst_handout_trained(&h, &c) == 0);
  CHECK(h.complete == 0);
  pst_range e;
  CHECK(pst_handout_next(&h, &e) == 1 && e.epoch == 2 && e.start == 0);
  CHECK(pst_handout_trained(&h, &d) == 0 && h.complete == 1);
  /* Ranges it never gave: an epoch past the last, positions past the samples or not yet
   * handed out, more than a range. */
  pst_range never[] = {{3, 0, 10}, {2, 140, 20}, {2, 64, 64}, {1, 0, 65}};
  for (size_t i = 0; i < sizeof never / sizeof never[0]; i++) {
    CHECK(pst_handout_trained(&h, &never[i]) == -EINVAL);
    CHECK(pst_handout_return(&h, &never[i]) == -EINVAL);
  }
  pst_handout_free(&h);
  CHECK(pst_handout_init(&h, 0, 64, 1) == -EINVAL);
  pst_handout_free(&h);
}

/* A checkpoint's position: taken mid-epoch with ranges out, restored into a fresh handout,
 * the rest of the run trains every sample once with what was trained before; books that do
 * not add up are refused. */
static void restore(void) {
  static unsigned char seen[EPOCHS + 1][SAMPLES];
  memset(seen, 0, sizeof seen);
  pst_handout h, g;
  CHECK(pst_handout_init(&h, SAMPLES, RANGE, EPOCHS) == 0);
  pst_range out[3];
  /* Epoch 1 whole, then part of epoch 2 trained, one range given back, three out. */
  int n = 0;
  while (h.complete < 1 || n < 5) {
    pst_range r;
    CHECK(pst_handout_next(&h, &r) == 1);
    if (n++ == 3) {
      CHECK(pst_handout_return(&h, &r) == 0);
      continue;
    }
    for (uint32_t i = 0; i < r.count; i++) seen[r.epoch][r.start + i]++;
    CHECK(pst_handout_trained(&h, &r) == 0);
  }
  for (int i = 0; i < 3; i++) CHECK(pst_handout_next(&h, &out[i]) == 1);
  /* What a checkpoint holds: the returned range and the three out go back. */
  pst_range back[8];
  size_t nb = 0;
  for (size_t i = 0; i < h.n_back; i++) back[nb++] = h.back[i];
  for (int i = 0; i < 3; i++) back[nb++] = out[i];
  char why[200];
  CHECK(pst_handout_init(&g, SAMPLES, RANGE, EPOCHS) == 0);
  CHECK(pst_handout_restore(&g, h.epoch, h.next, h.trained, back, nb, why, sizeof why) == 0);
  CHECK(g.complete == h.complete);
  /* Books that do not add up: a range missing, one twice, one never handed out. */
  CHECK(pst_handout_restore(&g, h.epoch, h.next, h.trained, back, nb - 1, why, sizeof why) == -EINVAL);
  back[nb] = back[0];
  CHECK(pst_handout_restore(&g, h.epoch, h.next, h.trained, back, nb + 1, why, sizeof why) == -EINVAL);
  pst_range never = {h.epoch, h.next, 1};
  back[nb] = never;
  CHECK(pst_handout_restore(&g, h.epoch, h.next, h.trained, back, nb + 1, why, sizeof why) == -EINVAL);
  CHECK(pst_handout_restore(&g, EPOCHS + 2, 0, h.trained, back, nb, why, sizeof why) == -EINVAL);
  int bad = 0;
  pst_range r;
  while (pst_handout_next(&g, &r) == 1) {
    for (uint32_t i = 0; i < r.count; i++) seen[r.epoch][r.start + i]++;
    if (pst_handout_trained(&g, &r) < 0) bad++;
  }
  CHECK(bad == 0 && pst_handout_finished(&g));
  int wrong = 0;
  for (int e = 1; e <= EPOCHS; e++)
    for (int i = 0; i < SAMPLES; i++) wrong += seen[e][i] != 1;
  CHECK(wrong == 0);
  pst_handout_free(&h);
  pst_handout_free(&g);
}

int main(void) {
  order();
  restore();
  for (unsigned s = 1; s <= 20; s++) exactly_once(s);
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
