/* The slots' books (ps/train/liveness.c's roster functions) and the data facts
 * (ps/train/validate.c), in process on a hand-made roster: which slot a registering worker
 * takes, leaving and finishing counted once, strikes counted per slot, the workers present,
 * and facts fixed by --data-facts never forgotten. */
#include <stdio.h>
#include <string.h>

#include "ps/ps.h"

#include "common/check.h"

int main(void) {
  ps_worker w[3];
  memset(w, 0, sizeof w);
  ps_roster r = {.n = 3, .workers = w};
  ps_conn *held = (ps_conn *)&r; /* any non-NULL connection: the roster only compares it */

  /* Any index: a slot nobody has held yet first, then one whose worker was lost. */
  CHECK(ps_slot_free(&r, -1) == 0);
  w[0].conn = held;
  w[0].ever = 1;
  CHECK(ps_slot_free(&r, -1) == 1);
  w[1].ever = 1; /* held once, lost: free, but after the never-held slot 2 */
  CHECK(ps_slot_free(&r, -1) == 2);
  w[2].conn = held;
  w[2].ever = 1;
  CHECK(ps_slot_free(&r, -1) == 1);
  /* A finished slot is free only when asked for by index (its worker back for the final
   * weights); a held one never; an index out of range never. */
  w[1].done = 1;
  CHECK(ps_slot_free(&r, -1) == -1);
  CHECK(ps_slot_free(&r, 1) == 1);
  CHECK(ps_slot_free(&r, 0) == -1);
  CHECK(ps_slot_free(&r, 3) == -1);
  w[1].done = 0;

  /* Present: connected and not finished. Finishing and leaving count once. */
  CHECK(ps_present_workers(&r) == 2);
  CHECK(ps_worker_finished(&r, 0) == 1 && r.finished == 1);
  CHECK(ps_worker_finished(&r, 0) == 0 && r.finished == 1);
  CHECK(ps_present_workers(&r) == 1);
  CHECK(ps_worker_leaving(&r, 2) == 1 && w[2].leaving);
  CHECK(ps_worker_leaving(&r, 2) == 0);

  /* Strikes add up over the workers that held the slot. */
  CHECK(ps_slot_struck(&r, 1) == 1);
  CHECK(ps_slot_struck(&r, 1) == 2);
  CHECK(w[0].rejected_total == 0 && w[2].rejected_total == 0);

  /* Data facts: a HELLO's are forgotten when asked, --data-facts' never. */
  ps_facts f;
  memset(&f, 0, sizeof f);
  f.data_known = 1;
  ps_facts_forget(&f);
  CHECK(!f.data_known);
  ps_facts_fix(&f, 60000, 10000, 10);
  CHECK(f.data_known && f.data_fixed && f.train_n == 60000 && f.test_n == 10000 && f.classes == 10);
  ps_facts_forget(&f);
  CHECK(f.data_known);
  printf("roster_test: ok\n");
  return 0;
}
