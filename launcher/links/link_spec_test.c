/* launcher/links/link.c in-process: --link and --link-worker parsed, nothing set up (no root,
 * no namespaces). */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "common/check.h"
#include "launcher/links/link.h"

int main(void) {
  pl_link_spec l;
  char err[400];

  CHECK(pl_link_parse("100mbit", &l, err, sizeof err) == 0);
  CHECK(l.set && l.bits_per_sec == 100e6 && !strcmp(l.rate, "100mbit"));
  CHECK(l.delay[0] == '\0' && l.delay_s == 0 && l.loss == 0);
  CHECK(pl_link_parse("1gbit,1ms,0.5%", &l, err, sizeof err) == 0);
  CHECK(l.bits_per_sec == 1e9 && l.delay_s == 1e-3 && l.loss == 0.005);
  CHECK(!strcmp(l.delay, "1ms") && !strcmp(l.loss_text, "0.5%"));
  CHECK(pl_link_parse("250mbit,400us", &l, err, sizeof err) == 0 && fabs(l.delay_s - 400e-6) < 1e-12);
  /* Too slow, no unit, a delay over 10 s, a loss over 100%, a fourth field. */
  CHECK(pl_link_parse("1kbit", &l, err, sizeof err) == -EINVAL);
  CHECK(strstr(err, "RATE[,DELAY[,LOSS]]") != NULL);
  CHECK(pl_link_parse("100", &l, err, sizeof err) == -EINVAL);
  CHECK(pl_link_parse("100mbit,11000ms", &l, err, sizeof err) == -EINVAL);
  CHECK(pl_link_parse("100mbit,1ms,101%", &l, err, sizeof err) == -EINVAL);
  CHECK(pl_link_parse("100mbit,1ms,1%,x", &l, err, sizeof err) == -EINVAL);
  CHECK(pl_link_parse("", &l, err, sizeof err) == -EINVAL);

  static pl_link_spec per[4];
  memset(per, 0, sizeof per);
  CHECK(pl_link_parse_workers("0:100mbit;3:10mbit,5ms", 4, per, err, sizeof err) == 0);
  CHECK(per[0].set && per[0].bits_per_sec == 100e6 && !per[1].set && !per[2].set);
  CHECK(per[3].set && per[3].delay_s == 5e-3);
  CHECK(pl_link_parse_workers("4:100mbit", 4, per, err, sizeof err) == -EINVAL);
  CHECK(strstr(err, "below 4") != NULL);
  CHECK(pl_link_parse_workers("1:fast", 4, per, err, sizeof err) == -EINVAL);
  CHECK(strncmp(err, "--link-worker: ", 15) == 0);

  CHECK(!strcmp(pl_delay_by_name(PL_DELAY_NONE), "none"));
  CHECK(!strcmp(pl_delay_by_name(PL_DELAY_NETEM), "netem"));
  CHECK(!strcmp(pl_delay_by_name(PL_DELAY_LINE), "delay line"));

  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
