/* The push order's rules (push_order.h), in process: every order a worker sends is taken,
 * and every frame out of place is refused with the chunk that was due. */
#include "ps/net/push_order.h"

#include "common/check.h"

/* Whether the whole sequence seq[0..k) is a push of n chunks the rules take. */
static int takes(uint32_t n, const uint32_t *seq, uint32_t k) {
  ps_push_order o;
  ps_push_order_begin(&o, n);
  uint32_t want;
  for (uint32_t i = 0; i < k; i++)
    if (ps_push_order_take(&o, seq[i], &want) < 0) return 0;
  return 1;
}

/* Every sequence of n distinct chunks that the rules take covers all n: checked over all
 * permutations of 5 chunks (120), counting those taken: they are the 2^(n-1) ways to cut
 * [0, n) into runs. */
static uint32_t perm[5];
static int used[5];
static int taken_count;
static void all_perms(uint32_t n, uint32_t k) {
  if (k == n) {
    if (takes(n, perm, n)) taken_count++;
    return;
  }
  for (uint32_t c = 0; c < n; c++) {
    if (used[c]) continue;
    used[c] = 1;
    perm[k] = c;
    all_perms(n, k + 1);
    used[c] = 0;
  }
}

int main(void) {
  /* The three orders workers send. */
  const uint32_t asc[] = {0, 1, 2, 3, 4, 5};
  const uint32_t desc[] = {5, 4, 3, 2, 1, 0};
  const uint32_t layers[] = {5, 3, 4, 0, 1, 2}; /* layers {5}, {3,4}, {0,1,2} */
  CHECK(takes(6, asc, 6));
  CHECK(takes(6, desc, 6));
  CHECK(takes(6, layers, 6));
  const uint32_t one[] = {0};
  CHECK(takes(1, one, 1));

  /* Out of place: a chunk twice, a run left before its end, a run that starts too high, a
   * skipped chunk. */
  const uint32_t twice[] = {5, 5};
  const uint32_t left[] = {3, 5};
  const uint32_t high[] = {3, 4, 5, 4};
  const uint32_t skip[] = {0, 2};
  CHECK(!takes(6, twice, 2));
  CHECK(!takes(6, left, 2));
  CHECK(!takes(6, high, 4));
  CHECK(!takes(6, skip, 2));

  /* The chunk that was due is named. */
  ps_push_order o;
  uint32_t want = 0;
  ps_push_order_begin(&o, 6);
  CHECK(ps_push_order_take(&o, 3, &want) == 0);
  CHECK(ps_push_order_take(&o, 0, &want) < 0 && want == 4);
  CHECK(ps_push_order_take(&o, 4, &want) == 0);
  CHECK(ps_push_order_take(&o, 5, &want) == 0);
  CHECK(ps_push_order_take(&o, 3, &want) < 0 && want == UINT32_MAX);
  CHECK(ps_push_order_take(&o, 2, &want) == 0);
  /* The last run, [0, 2); a refused frame leaves the state as it was. */
  CHECK(ps_push_order_take(&o, 0, &want) == 0);
  CHECK(ps_push_order_take(&o, 2, &want) < 0 && want == 1);
  CHECK(ps_push_order_take(&o, 1, &want) == 0);
  /* A new push begins anew. */
  ps_push_order_begin(&o, 6);
  CHECK(ps_push_order_take(&o, 5, &want) == 0);

  /* The header's check: a table of 3 chunks, [0, 10), [10, 25), [25, 40). */
  size_t offs[] = {0, 10, 25, 40};
  pst_update u = {0};
  u.chunk_off = offs;
  u.n_chunks = 3;
  char why[160];
  uint32_t chunk = 99;
  Pstrain__Header h = PSTRAIN__HEADER__INIT;
  h.type = PSTRAIN__MSG_TYPE__PUSH;
  h.version = 7;
  h.offset = 25, h.count = 15;
  CHECK(ps_push_order_check(&o, &u, 0, 0, &h, &chunk, why, sizeof why) == 0 && chunk == 2);
  h.offset = 0, h.count = 10; /* the first layer's run, [0, 2) */
  CHECK(ps_push_order_check(&o, &u, 1, 7, &h, &chunk, why, sizeof why) == 0 && chunk == 0);
  h.offset = 25, h.count = 15; /* chunk 2 again */
  CHECK(ps_push_order_check(&o, &u, 2, 7, &h, &chunk, why, sizeof why) < 0);
  h.offset = 10, h.count = 14; /* chunk 1's offset, a wrong count */
  CHECK(ps_push_order_check(&o, &u, 2, 7, &h, &chunk, why, sizeof why) < 0);
  h.offset = 11, h.count = 15; /* no chunk begins there */
  CHECK(ps_push_order_check(&o, &u, 2, 7, &h, &chunk, why, sizeof why) < 0);
  h.offset = 10, h.count = 15, h.version = 8; /* another version within the push */
  CHECK(ps_push_order_check(&o, &u, 2, 7, &h, &chunk, why, sizeof why) < 0);
  h.version = 7; /* the push's last frame must say so */
  CHECK(ps_push_order_check(&o, &u, 2, 7, &h, &chunk, why, sizeof why) < 0);
  h.last = 1;
  CHECK(ps_push_order_check(&o, &u, 2, 7, &h, &chunk, why, sizeof why) == 0 && chunk == 1);

  taken_count = 0;
  all_perms(5, 0);
  CHECK(taken_count == 16);

  /* Offsets to chunks. */
  const size_t off[] = {0, 10, 25, 40};
  CHECK(ps_push_order_chunk_at(off, 3, 0) == 0);
  CHECK(ps_push_order_chunk_at(off, 3, 25) == 2);
  CHECK(ps_push_order_chunk_at(off, 3, 11) == -1);
  CHECK(ps_push_order_chunk_at(off, 3, 40) == -1); /* the end is no chunk */
  CHECK(ps_push_order_chunk_at(off, 3, 1000) == -1);

  printf("push_order_test: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
