/* launcher/links/place.c in-process: the placements parsed and planned (which namespace each
 * shard sits in, what is refused) and the bytes model's figures against BytePS's formulas. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "common/check.h"
#include "launcher/links/place.h"

#define M 940584.0 /* the mlp's 235146 parameters as float32 */
#define NEAR(a, b) (fabs((a) - (b)) <= 1e-9 * fabs(b) + 1e-12)

int main(void) {
  pl_placement p;
  char err[400];
  CHECK(pl_placement_parse("one-host", &p) == 0 && p == PL_PLACE_ONE_HOST);
  CHECK(pl_placement_parse("one", &p) == 0 && p == PL_PLACE_ONE_HOST);
  CHECK(pl_placement_parse("colocated", &p) == 0 && p == PL_PLACE_COLOCATED);
  CHECK(pl_placement_parse("separate", &p) == 0 && p == PL_PLACE_SEPARATE);
  CHECK(pl_placement_parse("elsewhere", &p) == -EINVAL);
  CHECK(!strcmp(pl_placement_name(PL_PLACE_SEPARATE), "separate"));

  /* The plans: where each shard sits, how many extra namespaces, who talks to whom. */
  pl_place_plan plan;
  CHECK(pl_place_plan_make(PL_PLACE_ONE_HOST, 4, 2, 0, 1, &plan, err, sizeof err) == 0);
  CHECK(plan.extra == 0 && !plan.peers && plan.shard_node[0] == -1 && plan.shard_node[1] == -1);
  CHECK(pl_place_plan_make(PL_PLACE_ONE_HOST, 4, 1, 0, 0, &plan, err, sizeof err) == 0);
  CHECK(pl_place_plan_make(PL_PLACE_COLOCATED, 4, 4, 0, 1, &plan, err, sizeof err) == 0);
  CHECK(plan.extra == 0 && plan.peers);
  for (int s = 0; s < 4; s++) CHECK(plan.shard_node[s] == s);
  CHECK(pl_place_plan_make(PL_PLACE_SEPARATE, 4, 2, 0, 1, &plan, err, sizeof err) == 0);
  CHECK(plan.extra == 2 && plan.peers && plan.shard_node[0] == 4 && plan.shard_node[1] == 5);
  CHECK(pl_place_plan_make(PL_PLACE_ONE_HOST, 4, 0, 1, 1, &plan, err, sizeof err) == 0);
  CHECK(plan.shards == 0 && plan.extra == 0 && plan.peers); /* a ring between the ranks */
  char addr[32];
  pl_place_addr(-1, addr, sizeof addr);
  CHECK(!strcmp(addr, "10.214.0.1"));
  pl_place_addr(5, addr, sizeof addr);
  CHECK(!strcmp(addr, "10.214.0.7"));
  /* Refused, each with its reason. */
  CHECK(pl_place_plan_make(PL_PLACE_COLOCATED, 4, 2, 0, 1, &plan, err, sizeof err) == -EINVAL);
  CHECK(strstr(err, "must equal the workers (4), not 2") != NULL);
  CHECK(pl_place_plan_make(PL_PLACE_SEPARATE, 4, 2, 0, 0, &plan, err, sizeof err) == -EINVAL);
  CHECK(strstr(err, "needs --link") != NULL);
  CHECK(pl_place_plan_make(PL_PLACE_COLOCATED, 2, 0, 1, 1, &plan, err, sizeof err) == -EINVAL);
  CHECK(strstr(err, "--mode allreduce") != NULL);
  CHECK(pl_place_plan_make(PL_PLACE_SEPARATE, 240, 20, 0, 1, &plan, err, sizeof err) == -EINVAL);
  CHECK(strstr(err, "at most 250") != NULL);

  /* The bytes model, n = 4 workers at 1 Gbit/s, no delay. */
  pl_bytes_model m;
  CHECK(pl_bytes_model_of(PL_PLACE_ONE_HOST, 0, 4, 1, M, 1e9, 0, &m) == 0);
  CHECK(NEAR(m.link_bytes, M) && NEAR(m.seconds, 2 * M * 8 / 1e9));
  CHECK(pl_bytes_model_of(PL_PLACE_SEPARATE, 0, 4, 1, M, 1e9, 0, &m) == 0);
  CHECK(NEAR(m.link_bytes, 4 * M) && !strcmp(m.formula, "nM")); /* one ps: n M each way */
  CHECK(pl_bytes_model_of(PL_PLACE_SEPARATE, 0, 4, 2, M, 1e9, 0, &m) == 0);
  CHECK(NEAR(m.link_bytes, 2 * M) && !strcmp(m.formula, "nM/k"));
  CHECK(pl_bytes_model_of(PL_PLACE_SEPARATE, 0, 4, 4, M, 1e9, 0, &m) == 0);
  CHECK(NEAR(m.link_bytes, M)); /* k = n: M per link */
  CHECK(pl_bytes_model_of(PL_PLACE_COLOCATED, 0, 4, 4, M, 1e9, 0, &m) == 0);
  CHECK(NEAR(m.link_bytes, 1.5 * M) && NEAR(m.phase_bytes[0], 0.75 * M));
  CHECK(pl_bytes_model_of(PL_PLACE_ONE_HOST, 1, 4, 0, M, 1e9, 0, &m) == 0);
  CHECK(NEAR(m.link_bytes, 1.5 * M) && !strcmp(m.formula, "2(n-1)/n M")); /* the ring */
  CHECK(NEAR(m.seconds, 1.5 * M * 8 / 1e9));
  CHECK(pl_bytes_model_of(PL_PLACE_COLOCATED, 0, 4, 2, M, 1e9, 0, &m) == -EINVAL);
  /* Round trips at 1 ms per link each way: a ps on the hub one round trip over one link
   * (2 ms), a shard on another node over two (4 ms), a ring 2(n-1) hops of two links. */
  CHECK(pl_bytes_model_of(PL_PLACE_ONE_HOST, 0, 4, 1, M, 1e9, 1e-3, &m) == 0);
  CHECK(NEAR(m.latency_s, 2e-3));
  CHECK(pl_bytes_model_of(PL_PLACE_SEPARATE, 0, 4, 4, M, 1e9, 1e-3, &m) == 0);
  CHECK(NEAR(m.latency_s, 4e-3) && NEAR(m.seconds, 2 * M * 8 / 1e9 + 4e-3));
  CHECK(pl_bytes_model_of(PL_PLACE_ONE_HOST, 1, 4, 0, M, 1e9, 1e-3, &m) == 0);
  CHECK(NEAR(m.latency_s, 12e-3));

  /* BytePS's formula: k = 0 is the ring's 2(n-1)/n M / B, k = n is M / B. */
  CHECK(NEAR(pl_byteps_seconds(4, 0, M, 1.25e8), 1.5 * M / 1.25e8));
  CHECK(NEAR(pl_byteps_seconds(4, 4, M, 1.25e8), M / 1.25e8));
  CHECK(pl_byteps_seconds(4, 2, M, 1.25e8) < pl_byteps_seconds(4, 0, M, 1.25e8));

  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
