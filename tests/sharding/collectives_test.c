/* collectives_test.c - every collective on every group of the mesh, checked on every rank.
 *
 * Run on 1, 2, 3, 4 and 8 ranks. With 8 ranks the mesh is 2x2x2 (R x S x T), so tp, shard,
 * replicate and dp are all real groups of different membership; otherwise it is 1xNx1.
 * Inputs are chosen so the exact result is known (nccl-tests' habit): small integers, exact
 * in fp32 and bf16 even after summing over 8 ranks. Per-rank counts 1, 7 and 1003 are not
 * multiples of any rank count. Byte counters are compared with the ring formulas computed
 * here in double; sequence numbers must advance by one per collective. Group membership is
 * checked against the rank layout rank = (r*S + s)*T + t recomputed from the coordinates.
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/alloc.h"
#include "sharding/comm.h"
#include "sharding/mesh.h"
#include "tests/testing_mpi.h"

static const size_t counts[] = {1, 7, 1003};

/* World rank of group member k, from DESIGN.md's layout (independent of mesh.c's splits). */
static int member_world_rank(const st_mesh_coords *c, st_group g, int k) {
  int r = c->r, s = c->s, t = c->t;
  switch (g) {
    case ST_GROUP_TP: t = k; break;
    case ST_GROUP_SHARD: s = k; break;
    case ST_GROUP_REPLICATE: r = k; break;
    case ST_GROUP_DP: r = k / c->S; s = k % c->S; break;
    default: return k;
  }
  return (r * c->S + s) * c->T + t;
}

static int expected_group_size(const st_mesh_coords *c, st_group g) {
  switch (g) {
    case ST_GROUP_TP: return c->T;
    case ST_GROUP_SHARD: return c->S;
    case ST_GROUP_REPLICATE: return c->R;
    case ST_GROUP_DP: return c->R * c->S;
    default: return c->world_size;
  }
}

static uint64_t ring_formula(comm_op op, int n, double bytes) {
  double factor = op == COMM_ALL_REDUCE ? 2.0 : op == COMM_BARRIER ? 0.0 : 1.0;
  return (uint64_t)floor(factor * (n - 1) * bytes / n);
}

/* Reads element i of a buffer of `dtype` as a double. */
static double get(const void *buf, st_dtype dtype, size_t i) {
  return dtype == ST_FP32 ? ((const float *)buf)[i] : f32_from_bf16(((const uint16_t *)buf)[i]);
}

static void set(void *buf, st_dtype dtype, size_t i, double v) {
  if (dtype == ST_FP32) {
    ((float *)buf)[i] = (float)v;
  } else {
    ((uint16_t *)buf)[i] = bf16_from_f32((float)v);
  }
}

/* Checks the op's counter moved by exactly the ring formula and the sequence by one. */
static void check_accounting(comm *c, comm_op op, double bytes, const comm_counters *before,
                             uint64_t seq_before) {
  comm_counters after;
  comm_counters_get(c, &after);
  uint64_t moved = after.bytes_sent[op] - before->bytes_sent[op];
  CHECK_MSG(moved == ring_formula(op, comm_size(c), bytes),
            "group %s %s: counted %llu bytes, ring formula %llu", comm_group_name(c),
            comm_op_name(op), (unsigned long long)moved,
            (unsigned long long)ring_formula(op, comm_size(c), bytes));
  CHECK_EQ_INT(after.calls[op] - before->calls[op], 1);
  CHECK_EQ_INT(comm_next_seq(c), seq_before + 1);
}

static void test_all_gather(comm *c, st_dtype dtype, size_t count, int in_place) {
  int me = comm_rank(c), n = comm_size(c);
  size_t es = dtype_size(dtype);
  char *recv = NULL, *send = NULL;
  CHECK_OK(mem_alloc((void **)&recv, count * n * es, MEM_HOST, MEM_WORKSPACE, NULL));
  CHECK_OK(mem_alloc((void **)&send, count * es, MEM_HOST, MEM_WORKSPACE, NULL));
  char *src = in_place ? recv + (size_t)me * count * es : send;
  for (size_t j = 0; j < count; j++) set(src, dtype, j, me * 16 + (double)(j % 16));
  comm_counters before;
  comm_counters_get(c, &before);
  uint64_t seq = comm_next_seq(c);
  CHECK_OK(comm_all_gather(c, src, recv, count, dtype, NULL));
  check_accounting(c, COMM_ALL_GATHER, (double)count * n * es, &before, seq);
  int bad = 0;
  for (int k = 0; k < n; k++) {
    for (size_t j = 0; j < count; j++) bad += get(recv, dtype, k * count + j) != k * 16 + (double)(j % 16);
  }
  CHECK_MSG(!bad, "all_gather %s %s count %zu%s: %d wrong elements", comm_group_name(c),
            dtype_name(dtype), count, in_place ? " in place" : "", bad);
  mem_free(send);
  mem_free(recv);
}

static void test_reduce_scatter(comm *c, st_dtype dtype, size_t count) {
  int me = comm_rank(c), n = comm_size(c);
  size_t es = dtype_size(dtype);
  char *send = NULL, *recv = NULL;
  CHECK_OK(mem_alloc((void **)&send, count * n * es, MEM_HOST, MEM_WORKSPACE, NULL));
  CHECK_OK(mem_alloc((void **)&recv, count * es, MEM_HOST, MEM_WORKSPACE, NULL));
  /* element (k, j) of rank q is (q + 1) * ((k + j) % 4 + 1): the sum over q is exact. */
  for (int k = 0; k < n; k++) {
    for (size_t j = 0; j < count; j++) set(send, dtype, k * count + j, (me + 1) * (double)((k + j) % 4 + 1));
  }
  comm_counters before;
  comm_counters_get(c, &before);
  uint64_t seq = comm_next_seq(c);
  CHECK_OK(comm_reduce_scatter(c, send, recv, count, dtype, COMM_SUM, NULL));
  check_accounting(c, COMM_REDUCE_SCATTER, (double)count * n * es, &before, seq);
  int bad = 0;
  for (size_t j = 0; j < count; j++) {
    bad += get(recv, dtype, j) != n * (n + 1) / 2 * (double)((me + j) % 4 + 1);
  }
  CHECK_MSG(!bad, "reduce_scatter %s %s count %zu: %d wrong elements", comm_group_name(c),
            dtype_name(dtype), count, bad);
  mem_free(recv);
  mem_free(send);
}

static void test_all_reduce(comm *c, st_dtype dtype, comm_reduce_op op, size_t count) {
  int me = comm_rank(c), n = comm_size(c);
  size_t es = dtype_size(dtype);
  char *buf = NULL;
  CHECK_OK(mem_alloc((void **)&buf, count * es, MEM_HOST, MEM_WORKSPACE, NULL));
  for (size_t j = 0; j < count; j++) {
    double v = op == COMM_SUM ? (me + 1) * (double)(j % 5) : (j % 3 == 0 ? me : -me);
    set(buf, dtype, j, v);
  }
  comm_counters before;
  comm_counters_get(c, &before);
  uint64_t seq = comm_next_seq(c);
  CHECK_OK(comm_all_reduce(c, buf, buf, count, dtype, op, NULL));
  check_accounting(c, COMM_ALL_REDUCE, (double)count * es, &before, seq);
  int bad = 0;
  for (size_t j = 0; j < count; j++) {
    double want = op == COMM_SUM ? n * (n + 1) / 2 * (double)(j % 5) : (j % 3 == 0 ? n - 1 : 0);
    bad += get(buf, dtype, j) != want;
  }
  CHECK_MSG(!bad, "all_reduce %s %s %s count %zu: %d wrong elements", comm_group_name(c),
            dtype_name(dtype), op == COMM_SUM ? "sum" : "max", count, bad);
  mem_free(buf);
}

static void test_broadcast(comm *c, size_t count) {
  int me = comm_rank(c), n = comm_size(c), root = n - 1;
  float *buf = NULL;
  CHECK_OK(mem_alloc((void **)&buf, count * sizeof(float), MEM_HOST, MEM_WORKSPACE, NULL));
  for (size_t j = 0; j < count; j++) buf[j] = me == root ? (float)(j % 251) : -1.0f;
  comm_counters before;
  comm_counters_get(c, &before);
  uint64_t seq = comm_next_seq(c);
  CHECK_OK(comm_broadcast(c, buf, count, ST_FP32, root, NULL));
  check_accounting(c, COMM_BROADCAST, (double)count * sizeof(float), &before, seq);
  int bad = 0;
  for (size_t j = 0; j < count; j++) bad += buf[j] != (float)(j % 251);
  CHECK_MSG(!bad, "broadcast %s count %zu: %d wrong elements", comm_group_name(c), count, bad);
  mem_free(buf);
}

/* Two collectives in flight at once, waited on in the reverse order of issue. */
static void test_async_overlap(comm *c) {
  int me = comm_rank(c), n = comm_size(c);
  float gathered[64], mine[8], summed[8];
  for (int j = 0; j < 8; j++) {
    mine[j] = (float)(me * 8 + j);
    summed[j] = 1.0f;
  }
  comm_work w1, w2;
  CHECK_OK(comm_all_gather(c, mine, gathered, 8, ST_FP32, &w1));
  CHECK_OK(comm_all_reduce(c, summed, summed, 8, ST_FP32, COMM_SUM, &w2));
  CHECK(w2.seq == w1.seq + 1);
  CHECK_OK(comm_wait(&w2));
  CHECK_OK(comm_wait(&w1));
  int bad = 0;
  for (int k = 0; k < n * 8; k++) bad += gathered[k] != (float)k;
  for (int j = 0; j < 8; j++) bad += summed[j] != (float)n;
  CHECK_MSG(!bad, "overlapped collectives on %s: %d wrong elements", comm_group_name(c), bad);
  CHECK_STATUS(comm_wait(&w1), ST_ERR_INVALID_ARG); /* already completed */
}

static void test_membership(const st_mesh *mesh, st_group g) {
  st_mesh_coords coords;
  CHECK_OK(st_mesh_get_coords(mesh, &coords));
  comm *c = mesh_comm(mesh, g);
  int n = comm_size(c);
  CHECK_MSG(n == expected_group_size(&coords, g), "group %s has %d ranks, expected %d",
            mesh_group_name(g), n, expected_group_size(&coords, g));
  CHECK(member_world_rank(&coords, g, comm_rank(c)) == coords.world_rank);
  float *ranks = calloc((size_t)n, sizeof *ranks);
  float mine = (float)coords.world_rank;
  CHECK_OK(comm_all_gather(c, &mine, ranks, 1, ST_FP32, NULL));
  for (int k = 0; k < n; k++) {
    CHECK_MSG(ranks[k] == (float)member_world_rank(&coords, g, k),
              "group %s member %d is world rank %g, layout says %d", mesh_group_name(g), k,
              ranks[k], member_world_rank(&coords, g, k));
  }
  free(ranks);
}

int main(int argc, char **argv) {
  CHECK_OK(st_init(&argc, &argv));
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  st_mesh_config config = ST_MESH_CONFIG_INIT;
  config.device = "cpu";
  config.backend = ST_COMM_MPI;
  if (world == 8) config.dp_replicate = config.tp = 2;
  st_mesh *mesh = NULL;
  CHECK_OK(st_mesh_create(&mesh, &config));
  if (mesh) {
    for (int g = 0; g < ST_GROUP_COUNT; g++) {
      comm *c = mesh_comm(mesh, (st_group)g);
      test_membership(mesh, (st_group)g);
      for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        for (st_dtype d = ST_FP32; d <= ST_BF16; d++) {
          test_all_gather(c, d, counts[i], 0);
          test_all_gather(c, d, counts[i], 1);
          test_reduce_scatter(c, d, counts[i]);
          test_all_reduce(c, d, COMM_SUM, counts[i]);
          test_all_reduce(c, d, COMM_MAX, counts[i]);
        }
        test_broadcast(c, counts[i]);
      }
      comm_counters before;
      comm_counters_get(c, &before);
      uint64_t seq = comm_next_seq(c);
      CHECK_OK(comm_barrier(c, NULL));
      check_accounting(c, COMM_BARRIER, 0, &before, seq);
      test_async_overlap(c);
    }
  }
  st_mesh_destroy(mesh);
  mem_stats stats;
  mem_stats_get(&stats);
  CHECK_EQ_INT(stats.live_blocks, 0);
  int rc = test_finish_mpi("collectives_test");
  st_finalize();
  return rc;
}
