/* sim_collective.c - alpha-beta collective costs and group placement (see sim_collective.h). */
#include "engine/plan/sim_collective.h"

double sim_ring_all_gather(int n, double bytes, sim_link link) {
  if (n <= 1) return 0;
  return (double)(n - 1) / n * bytes / link.bw + (n - 1) * link.latency;
}

double sim_ring_reduce_scatter(int n, double bytes, sim_link link) {
  return sim_ring_all_gather(n, bytes, link);
}

double sim_ring_all_reduce(int n, double bytes, sim_link link) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) / n * bytes / link.bw + 2.0 * (n - 1) * link.latency;
}

double sim_tree_all_reduce(int n, double bytes, sim_link link) {
  if (n <= 1) return 0;
  int depth = 0;
  while ((1 << depth) < n) depth++;
  return 2.0 * bytes / link.bw + 2.0 * depth * link.latency;
}

double sim_all_reduce(int n, double bytes, sim_link link) {
  double ring = sim_ring_all_reduce(n, bytes, link), tree = sim_tree_all_reduce(n, bytes, link);
  return ring < tree ? ring : tree;
}

int sim_group_nodes(int size, int stride, int gpus_per_node) {
  int nodes = 0, last = -1;
  for (int k = 0; k < size; k++) {
    int node = (int)((long long)k * stride / gpus_per_node);
    if (node != last) nodes++; /* members are increasing, so nodes are too */
    last = node;
  }
  return nodes;
}

sim_link sim_group_link(const sim_hardware *hw, int size, int stride) {
  int nodes = sim_group_nodes(size, stride, hw->gpus_per_node);
  if (nodes <= 1) return (sim_link){hw->intra_bw, hw->intra_latency};
  double per_node = (double)size / nodes, bw = per_node * hw->inter_bw;
  return (sim_link){bw < hw->intra_bw ? bw : hw->intra_bw, hw->inter_latency};
}
