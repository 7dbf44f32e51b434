/* The weight store's holds (ps/state/store.h): a reply's buffer is never written while the reply
 * holds it, a streamed reply of the version being built does not hold up its own step, and
 * publishing turns it into an ordinary hold. */
#include <stdio.h>

#include "ps/state/store.h"

#include "common/check.h"

int main(void) {
  float init[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  pst_store s;
  CHECK(pst_store_init(&s, 8, init) == 0);

  /* A reply of version 0 holds the front buffer; once version 1 is published that buffer is
   * the back one, and no step may write it until the reply ends. */
  pst_store_hold a = pst_store_take(&s, 0);
  CHECK(a.version == 0 && a.buf == s.front && pst_store_hold_published(&s, &a));
  CHECK(!pst_store_back_busy(&s));
  pst_store_publish(&s);
  CHECK(s.version == 1 && pst_store_back_busy(&s));
  pst_store_release(&s, &a);
  CHECK(!pst_store_back_busy(&s));

  /* A streamed reply of version 2 (the one being built) leaves the back buffer free for the
   * step that builds it; publishing makes it a hold on the new front. */
  pst_store_hold b = pst_store_take(&s, 1);
  CHECK(b.version == 2 && b.buf == (s.front ^ 1) && !pst_store_hold_published(&s, &b));
  CHECK(!pst_store_back_busy(&s) && s.early_refs == 1);
  pst_store_publish(&s);
  CHECK(s.version == 2 && b.buf == s.front && pst_store_hold_published(&s, &b));
  CHECK(s.early_refs == 0 && s.refs[s.front] == 1 && !pst_store_back_busy(&s));
  /* Version 3 is published while b still streams: its buffer (now the back) is held. */
  pst_store_publish(&s);
  CHECK(pst_store_back_busy(&s));
  pst_store_release(&s, &b);
  CHECK(!pst_store_back_busy(&s) && s.refs[0] == 0 && s.refs[1] == 0);

  /* A streamed reply cut short before its step was published gives back its early hold. */
  pst_store_hold c = pst_store_take(&s, 1);
  pst_store_release(&s, &c);
  CHECK(s.early_refs == 0);
  pst_store_publish(&s);
  CHECK(s.refs[0] == 0 && s.refs[1] == 0 && !pst_store_back_busy(&s));

  /* Two replies on one buffer: it is free only after both. */
  pst_store_hold d = pst_store_take(&s, 0), e = pst_store_take(&s, 0);
  pst_store_publish(&s);
  pst_store_release(&s, &d);
  CHECK(pst_store_back_busy(&s));
  pst_store_release(&s, &e);
  CHECK(!pst_store_back_busy(&s));

  pst_store_free(&s);
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
