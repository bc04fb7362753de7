/* sim_collective.h - the alpha-beta cost of the collectives the engine issues, per algorithm
 * and per placement of a group on the nodes. A link is (bw, latency): one message step costs
 * `latency`, and a rank moves bytes at `bw` in each direction at once. For n ranks:
 *
 *   ring all-gather      (n-1)/n * bytes / bw + (n-1) * latency   (bytes: the gathered buffer)
 *   ring reduce-scatter  (n-1)/n * bytes / bw + (n-1) * latency   (bytes: the full input)
 *   ring all-reduce     2(n-1)/n * bytes / bw + 2(n-1) * latency  (a reduce-scatter, then an
 *                                                                  all-gather)
 *   tree all-reduce        2 * bytes / bw + 2 * ceil(log2 n) * latency  (a pipelined reduce up a
 *                           double binary tree, then a broadcast down: every rank receives and
 *                           sends the buffer once per phase, latency grows with the depth)
 *
 * sim_all_reduce takes the faster of ring and tree, as NCCL picks per size. One rank (n = 1)
 * costs nothing. A group of ranks spaced `stride` apart (the mesh puts tp innermost: tp groups
 * have stride 1, shard groups stride T, replicate groups stride S x T) runs on the intra-node
 * link when it lies inside one node; when it spans nodes, each ring step crosses the network:
 * latency is the inter-node one, and the bandwidth is that of the m members a node holds
 * sending over their own network ports at once (NCCL stripes rings over the ports), m x
 * inter_bw, but no more than the intra-node link. */
#ifndef ST_ENGINE_PLAN_SIM_COLLECTIVE_H
#define ST_ENGINE_PLAN_SIM_COLLECTIVE_H

#include "engine/plan/sim_hw.h"

typedef struct sim_link {
  double bw;      /* bytes/s per rank, each direction */
  double latency; /* s per message step */
} sim_link;

double sim_ring_all_gather(int n, double bytes, sim_link link);
double sim_ring_reduce_scatter(int n, double bytes, sim_link link);
double sim_ring_all_reduce(int n, double bytes, sim_link link);
double sim_tree_all_reduce(int n, double bytes, sim_link link);
double sim_all_reduce(int n, double bytes, sim_link link);

/* Nodes spanned by the group of `size` ranks `stride` apart that holds rank 0, on nodes of
 * gpus_per_node ranks (ranks fill nodes in order). */
int sim_group_nodes(int size, int stride, int gpus_per_node);

/* The link such a group's collectives run on. */
sim_link sim_group_link(const sim_hardware *hw, int size, int stride);

#endif /* ST_ENGINE_PLAN_SIM_COLLECTIVE_H */
