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

  /* The bytes model, n = 4 workers at 1 Gbit/s, no delay, no compute. */
  pl_bytes_model m;
  CHECK(pl_bytes_model_of(PL_PLACE_ONE_HOST, 0, 4, 1, M, 1e9, 0, 0, &m) == 0);
  CHECK(NEAR(m.link_bytes, M) && NEAR(m.seconds, 2 * M * 8 / 1e9));
  CHECK(pl_bytes_model_of(PL_PLACE_SEPARATE, 0, 4, 1, M, 1e9, 0, 0, &m) == 0);
  CHECK(NEAR(m.link_bytes, 4 * M) && !strcmp(m.formula, "nM")); /* one ps: n M each way */
  CHECK(pl_bytes_model_of(PL_PLACE_SEPARATE, 0, 4, 2, M, 1e9, 0, 0, &m) == 0);
  CHECK(NEAR(m.link_bytes, 2 * M) && !strcmp(m.formula, "nM/k"));
  CHECK(pl_bytes_model_of(PL_PLACE_SEPARATE, 0, 4, 4, M, 1e9, 0, 0, &m) == 0);
  CHECK(NEAR(m.link_bytes, M)); /* k = n: M per link */
  CHECK(pl_bytes_model_of(PL_PLACE_COLOCATED, 0, 4, 4, M, 1e9, 0, 0, &m) == 0);
  CHECK(NEAR(m.link_bytes, 1.5 * M) && NEAR(m.phase_bytes[0], 0.75 * M));
  CHECK(pl_bytes_model_of(PL_PLACE_ONE_HOST, 1, 4, 0, M, 1e9, 0, 0, &m) == 0);
  CHECK(NEAR(m.link_bytes, 1.5 * M) && !strcmp(m.formula, "2(n-1)/n M")); /* the ring */
  CHECK(NEAR(m.seconds, 1.5 * M * 8 / 1e9));
  CHECK(pl_bytes_model_of(PL_PLACE_COLOCATED, 0, 4, 2, M, 1e9, 0, 0, &m) == -EINVAL);
  CHECK(pl_bytes_model_of(PL_PLACE_SEPARATE, 0, 4, 4, M, 1e9, 0, -1e-3, &m) == -EINVAL);
  CHECK(pl_bytes_model_of(PL_PLACE_SEPARATE, 0, 4, 4, M, 0, 0, 0, &m) == -EINVAL);

  /* The whole step at 1 Gbit/s, 1 ms a link each way and 5 ms of compute, each figure worked
   * out by hand from M = 940584 bytes (T = M x 8 / 1e9 = 7.524672 ms a model at the rate):
   *   one separate ps   2 phases of 4 M: 60.197376 ms, + 2 hops of 2 ms, + 5 = 69.197376 ms;
   *   4 separate shards 2 phases of M:   15.049344 ms, + 4 ms, + 5           = 24.049344 ms;
   *   4 colocated       2 phases of 3/4 M: 11.287008 ms, + 4 ms, + 5         = 20.287008 ms;
   *   ring of 4         the same bytes, + 6 hops of 2 ms, + 5                = 28.287008 ms;
   *   one-host ps       2 phases of M, + 2 hops of 1 ms, + 5                 = 22.049344 ms. */
  CHECK(pl_bytes_model_of(PL_PLACE_SEPARATE, 0, 4, 1, M, 1e9, 1e-3, 5e-3, &m) == 0);
  CHECK(NEAR(m.transfer_s, 60.197376e-3) && m.hops == 2 && NEAR(m.hop_delay_s, 2e-3));
  CHECK(NEAR(m.latency_s, 4e-3) && NEAR(m.compute_s, 5e-3) && NEAR(m.seconds, 69.197376e-3));
  CHECK(pl_bytes_model_of(PL_PLACE_SEPARATE, 0, 4, 4, M, 1e9, 1e-3, 5e-3, &m) == 0);
  CHECK(NEAR(m.transfer_s, 15.049344e-3) && NEAR(m.seconds, 24.049344e-3));
  CHECK(pl_bytes_model_of(PL_PLACE_COLOCATED, 0, 4, 4, M, 1e9, 1e-3, 5e-3, &m) == 0);
  CHECK(NEAR(m.transfer_s, 11.287008e-3) && m.hops == 2 && NEAR(m.seconds, 20.287008e-3));
  CHECK(pl_bytes_model_of(PL_PLACE_ONE_HOST, 1, 4, 0, M, 1e9, 1e-3, 5e-3, &m) == 0);
  CHECK(m.hops == 6 && NEAR(m.latency_s, 12e-3) && NEAR(m.seconds, 28.287008e-3));
  CHECK(pl_bytes_model_of(PL_PLACE_ONE_HOST, 0, 4, 1, M, 1e9, 1e-3, 5e-3, &m) == 0);
  CHECK(m.hops == 2 && NEAR(m.hop_delay_s, 1e-3) && NEAR(m.seconds, 22.049344e-3));
  /* At 100 Mbit/s the bytes weigh ten times as much: one separate ps 601.97376 ms of
   * transfer, 4 separate shards 150.49344 ms, the ring 112.87008 ms. */
  CHECK(pl_bytes_model_of(PL_PLACE_SEPARATE, 0, 4, 1, M, 1e8, 1e-3, 0, &m) == 0);
  CHECK(NEAR(m.transfer_s, 601.97376e-3) && NEAR(m.seconds, 605.97376e-3));
  CHECK(pl_bytes_model_of(PL_PLACE_SEPARATE, 0, 4, 4, M, 1e8, 1e-3, 0, &m) == 0);
  CHECK(NEAR(m.transfer_s, 150.49344e-3));
  CHECK(pl_bytes_model_of(PL_PLACE_ONE_HOST, 1, 4, 0, M, 1e8, 1e-3, 0, &m) == 0);
  CHECK(NEAR(m.transfer_s, 112.87008e-3) && NEAR(m.seconds, 124.87008e-3));

  /* BytePS's formula: k = 0 is the ring's 2(n-1)/n M / B, k = n is M / B. */
  CHECK(NEAR(pl_byteps_seconds(4, 0, M, 1.25e8), 1.5 * M / 1.25e8));
  CHECK(NEAR(pl_byteps_seconds(4, 4, M, 1.25e8), M / 1.25e8));
  CHECK(pl_byteps_seconds(4, 2, M, 1.25e8) < pl_byteps_seconds(4, 0, M, 1.25e8));

  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
