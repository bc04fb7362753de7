/* sim_collective_test.c - the simulator's alpha-beta collective model against its formulas,
 * computed here by hand for chosen numbers, and the placement of mesh groups on nodes:
 *   ring all-reduce      2(n-1)/n * bytes / bw + 2(n-1) * latency
 *   ring all-gather and reduce-scatter  (n-1)/n * bytes / bw + (n-1) * latency
 *   tree all-reduce      2 * bytes / bw + 2 * ceil(log2 n) * latency
 *   all-reduce           the faster of the two; one rank costs nothing. */
#include "engine/plan/sim_collective.h"

#include <math.h>

#include "tests/testing.h"

/* 1 GB/s and 10 us: the numbers below are then easy to follow. */
static const sim_link link = {1e9, 10e-6};

static void check_ring(void) {
  /* 4 ranks, 8 MB: 2 * 3/4 * 8e6 / 1e9 = 12 ms of bandwidth, 6 steps of 10 us. */
  CHECK_NEAR(sim_ring_all_reduce(4, 8e6, link), 12e-3 + 60e-6, 1e-12);
  /* (n-1)/n * bytes / bw + (n-1) alpha: 3/4 * 8 ms + 30 us. */
  CHECK_NEAR(sim_ring_all_gather(4, 8e6, link), 6e-3 + 30e-6, 1e-12);
  CHECK_NEAR(sim_ring_reduce_scatter(4, 8e6, link), 6e-3 + 30e-6, 1e-12);
  /* An all-reduce is a reduce-scatter followed by an all-gather. */
  for (int n = 2; n <= 64; n *= 2) {
    CHECK_NEAR(sim_ring_all_reduce(n, 1e7, link),
               sim_ring_reduce_scatter(n, 1e7, link) + sim_ring_all_gather(n, 1e7, link), 1e-12);
  }
  /* 8 ranks, 1 MB: 7/8 ms + 70 us. */
  CHECK_NEAR(sim_ring_all_gather(8, 1e6, link), 0.875e-3 + 70e-6, 1e-12);
}

static void check_tree(void) {
  /* 8 ranks: depth 3; 2 * 1 MB / 1 GB/s = 2 ms plus 2 * 3 * 10 us. */
  CHECK_NEAR(sim_tree_all_reduce(8, 1e6, link), 2e-3 + 60e-6, 1e-12);
  /* 5 ranks: depth ceil(log2 5) = 3. */
  CHECK_NEAR(sim_tree_all_reduce(5, 1e6, link), 2e-3 + 60e-6, 1e-12);
  CHECK_NEAR(sim_tree_all_reduce(2, 0, link), 2 * 10e-6, 1e-15);
}

static void check_choice(void) {
  /* Large buffers take the ring (bandwidth 2(n-1)/n < 2), small ones on many ranks the tree
   * (latency 2 log2 n < 2(n-1)). */
  CHECK_NEAR(sim_all_reduce(64, 1e9, link), sim_ring_all_reduce(64, 1e9, link), 1e-12);
  CHECK(sim_ring_all_reduce(64, 1e9, link) < sim_tree_all_reduce(64, 1e9, link));
  CHECK_NEAR(sim_all_reduce(64, 4, link), sim_tree_all_reduce(64, 4, link), 1e-15);
  CHECK(sim_tree_all_reduce(64, 4, link) < sim_ring_all_reduce(64, 4, link));
  /* One rank moves nothing. */
  CHECK(sim_all_reduce(1, 1e9, link) == 0);
  CHECK(sim_ring_all_gather(1, 1e9, link) == 0);
  CHECK(sim_ring_reduce_scatter(1, 1e9, link) == 0);
  CHECK(sim_tree_all_reduce(1, 1e9, link) == 0);
}

/* Groups on nodes of 8: rank = (r S + s) T + t, so tp has stride 1, shard stride T, replicate
 * stride S T. */
static void check_placement(void) {
  sim_hardware hw = {.intra_bw = 400e9,
                     .intra_latency = 5e-6,
                     .inter_bw = 40e9,
                     .inter_latency = 20e-6,
                     .gpus_per_node = 8};
  CHECK_EQ_INT(sim_group_nodes(8, 1, 8), 1);  /* tp 8 */
  CHECK_EQ_INT(sim_group_nodes(16, 1, 8), 2); /* a shard group of 16 */
  CHECK_EQ_INT(sim_group_nodes(4, 8, 8), 4);  /* replicate 4 over shard groups of 8 */
  CHECK_EQ_INT(sim_group_nodes(4, 2, 8), 1);  /* shard 4 inside tp 2: ranks 0 2 4 6 */
  CHECK_EQ_INT(sim_group_nodes(8, 2, 8), 2);  /* shard 8 with tp 2: ranks 0..14 */
  sim_link l = sim_group_link(&hw, 8, 1);     /* inside a node */
  CHECK(l.bw == 400e9 && l.latency == 5e-6);
  l = sim_group_link(&hw, 4, 8); /* one member per node: that member's own network port */
  CHECK(l.bw == 40e9 && l.latency == 20e-6);
  l = sim_group_link(&hw, 16, 1); /* 8 members per node: 8 ports, capped by the node's link */
  CHECK(l.bw == 320e9 && l.latency == 20e-6);
  hw.inter_bw = 100e9;
  l = sim_group_link(&hw, 16, 1);
  CHECK(l.bw == 400e9);
  l = sim_group_link(&hw, 8, 2); /* 4 members on each of 2 nodes */
  CHECK(l.bw == 400e9 && l.latency == 20e-6);
}

int main(void) {
  check_ring();
  check_tree();
  check_choice();
  check_placement();
  return test_finish("sim_collective_test");
}
