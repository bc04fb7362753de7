/* collectives_test.c - every collective on every group of the mesh, checked on every rank.
 *
 * Run on 1, 2, 3, 4 and 8 ranks. With 8 ranks the mesh is 2x2x2 (R x S x T), so tp, shard,
 * replicate and dp are all real groups of different membership; otherwise it is 1xNx1.
 * Inputs are chosen so the exact result is known (nccl-tests' habit): small integers, exact
 * in fp32, bf16 and fp16 even after summing over 8 ranks. Per-rank counts 1, 7 and 1003 are not
 * multiples of any rank count. Byte counters are compared with the ring formulas computed
 * here in double; sequence numbers must advance by one per collective. Group membership is
 * checked against the rank layout rank = (r*S + s)*T + t recomputed from the coordinates.
 *
 * With `--device cuda` the buffers are device memory (NCCL with one GPU per rank, else MPI
 * staging through pinned memory); `--backend nccl` insists on NCCL, which ranks sharing one GPU
 * get with a distinct NCCL_HOSTID each. Without a usable GPU these variants print SKIP and pass.
 *
 * On NCCL in the CUDA emulation (tools/cuda_emu), which can report an asynchronous error on
 * demand, one more case: rank 1's communicator reports one (a peer gone); its collective fails,
 * and its communicator is aborted there, before any clean-up frees a buffer NCCL's kernels would
 * still be waiting on (on a GPU such a free waits for them): the next collective on it fails at
 * once, naming the abort, instead of running.
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/device.h"
#include "sharding/comm.h"
#include "sharding/mesh.h"
#include "tests/testing_mpi.h"

static const size_t counts[] = {1, 7, 1003};

/* The buffers under test live on the mesh's device; they are filled and read through a host
 * mirror. On the CPU device the copies are plain memmoves. */
typedef struct dbuf {
  void *host;
  void *dev;
  size_t bytes;
} dbuf;

static const st_device *test_device;
static st_stream test_stream;

static dbuf dbuf_alloc(size_t bytes) {
  dbuf b = {NULL, NULL, bytes};
  CHECK_OK(mem_alloc(&b.host, bytes, MEM_HOST, MEM_WORKSPACE, NULL));
  CHECK_OK(mem_alloc(&b.dev, bytes, MEM_DEVICE, MEM_WORKSPACE, test_device));
  return b;
}

static void dbuf_push(const dbuf *b) {
  CHECK_OK(stream_memcpy(&test_stream, b->dev, b->host, b->bytes));
  CHECK_OK(stream_sync(&test_stream));
}

static void dbuf_pull(const dbuf *b) {
  CHECK_OK(stream_memcpy(&test_stream, b->host, b->dev, b->bytes));
  CHECK_OK(stream_sync(&test_stream));
}

static void dbuf_free(dbuf *b) {
  mem_free(b->dev);
  mem_free(b->host);
}

/* World rank of group member k, from DESIGN.md's layout (independent of mesh.c's splits). */
static int member_world_rank(const st_mesh_coords *c, st_group g, int k) {
  int r = c->r, s = c->s, t = c->t;
  switch (g) {
    case ST_GROUP_TP: t = k; break;
    case ST_GROUP_SHARD: s = k; break;
    case ST_GROUP_REPLICATE: r = k; break;
    case ST_GROUP_DP:
      r = k / c->S;
      s = k % c->S;
      break;
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

/* Element i of a buffer of `dtype`, as a double; and its store. */
static double get(const void *buf, st_dtype dtype, size_t i) {
  return dtype_load_f32(buf, dtype, i);
}

static void set(void *buf, st_dtype dtype, size_t i, double v) {
  dtype_store_f32(buf, dtype, i, (float)v);
}

/* A group's counters and next sequence number, read before a collective. */
typedef struct comm_snapshot {
  comm_counters counters;
  uint64_t seq;
} comm_snapshot;

static comm_snapshot snapshot(comm *c) {
  comm_snapshot s;
  comm_counters_get(c, &s.counters);
  s.seq = comm_next_seq(c);
  return s;
}

/* Checks the op's counter moved by exactly the ring formula since `before` and the sequence
 * by one. */
static void check_accounting(comm *c, comm_op op, double bytes, const comm_snapshot *before) {
  comm_counters after;
  comm_counters_get(c, &after);
  uint64_t moved = after.bytes_sent[op] - before->counters.bytes_sent[op];
  CHECK_MSG(moved == ring_formula(op, comm_size(c), bytes),
            "group %s %s: counted %llu bytes, ring formula %llu", comm_group_name(c),
            comm_op_name(op), (unsigned long long)moved,
            (unsigned long long)ring_formula(op, comm_size(c), bytes));
  CHECK_EQ_INT(after.calls[op] - before->counters.calls[op], 1);
  CHECK_EQ_INT(comm_next_seq(c), before->seq + 1);
}

static void test_all_gather(comm *c, st_dtype dtype, size_t count, int in_place) {
  int me = comm_rank(c), n = comm_size(c);
  size_t es = dtype_size(dtype);
  dbuf recv = dbuf_alloc(count * n * es), send = dbuf_alloc(count * es);
  size_t mine = in_place ? (size_t)me * count * es : 0;
  dbuf *src = in_place ? &recv : &send;
  for (size_t j = 0; j < count; j++) {
    set((char *)src->host + mine, dtype, j, me * 16 + (double)(j % 16));
  }
  dbuf_push(src);
  const comm_snapshot before = snapshot(c);
  CHECK_OK(comm_all_gather(c, (char *)src->dev + mine, recv.dev, count, dtype, NULL));
  check_accounting(c, COMM_ALL_GATHER, (double)count * n * es, &before);
  dbuf_pull(&recv);
  int bad = 0;
  for (int k = 0; k < n; k++) {
    for (size_t j = 0; j < count; j++) {
      bad += get(recv.host, dtype, k * count + j) != k * 16 + (double)(j % 16);
    }
  }
  CHECK_MSG(!bad, "all_gather %s %s count %zu%s: %d wrong elements", comm_group_name(c),
            dtype_name(dtype), count, in_place ? " in place" : "", bad);
  dbuf_free(&send);
  dbuf_free(&recv);
}

static void test_reduce_scatter(comm *c, st_dtype dtype, size_t count, int in_place) {
  int me = comm_rank(c), n = comm_size(c);
  size_t es = dtype_size(dtype);
  dbuf send = dbuf_alloc(count * n * es), recv = dbuf_alloc(count * es);
  /* In place: the result lands on this rank's piece of the input buffer. */
  size_t mine = in_place ? (size_t)me * count * es : 0;
  dbuf *dst = in_place ? &send : &recv;
  /* element (k, j) of rank q is (q + 1) * ((k + j) % 4 + 1): the sum over q is exact. */
  for (int k = 0; k < n; k++) {
    for (size_t j = 0; j < count; j++) {
      set(send.host, dtype, k * count + j, (me + 1) * (double)((k + j) % 4 + 1));
    }
  }
  dbuf_push(&send);
  const comm_snapshot before = snapshot(c);
  CHECK_OK(comm_reduce_scatter(c, send.dev, (char *)dst->dev + mine, count, dtype, COMM_SUM, NULL));
  check_accounting(c, COMM_REDUCE_SCATTER, (double)count * n * es, &before);
  dbuf_pull(dst);
  int bad = 0;
  for (size_t j = 0; j < count; j++) {
    bad += get((char *)dst->host + mine, dtype, j) != n * (n + 1) / 2 * (double)((me + j) % 4 + 1);
  }
  CHECK_MSG(!bad, "reduce_scatter %s %s count %zu%s: %d wrong elements", comm_group_name(c),
            dtype_name(dtype), count, in_place ? " in place" : "", bad);
  dbuf_free(&recv);
  dbuf_free(&send);
}

static void test_all_reduce(comm *c, st_dtype dtype, comm_reduce_op op, size_t count) {
  int me = comm_rank(c), n = comm_size(c);
  size_t es = dtype_size(dtype);
  dbuf buf = dbuf_alloc(count * es);
  for (size_t j = 0; j < count; j++) {
    double v = op == COMM_SUM ? (me + 1) * (double)(j % 5) : (j % 3 == 0 ? me : -me);
    set(buf.host, dtype, j, v);
  }
  dbuf_push(&buf);
  const comm_snapshot before = snapshot(c);
  CHECK_OK(comm_all_reduce(c, buf.dev, buf.dev, count, dtype, op, NULL));
  check_accounting(c, COMM_ALL_REDUCE, (double)count * es, &before);
  dbuf_pull(&buf);
  int bad = 0;
  for (size_t j = 0; j < count; j++) {
    double want = op == COMM_SUM ? n * (n + 1) / 2 * (double)(j % 5) : (j % 3 == 0 ? n - 1 : 0);
    bad += get(buf.host, dtype, j) != want;
  }
  CHECK_MSG(!bad, "all_reduce %s %s %s count %zu: %d wrong elements", comm_group_name(c),
            dtype_name(dtype), op == COMM_SUM ? "sum" : "max", count, bad);
  dbuf_free(&buf);
}

static void test_broadcast(comm *c, size_t count) {
  int me = comm_rank(c), n = comm_size(c), root = n - 1;
  dbuf buf = dbuf_alloc(count * sizeof(float));
  float *h = buf.host;
  for (size_t j = 0; j < count; j++) h[j] = me == root ? (float)(j % 251) : -1.0f;
  dbuf_push(&buf);
  const comm_snapshot before = snapshot(c);
  CHECK_OK(comm_broadcast(c, buf.dev, count, ST_FP32, root, NULL));
  check_accounting(c, COMM_BROADCAST, (double)count * sizeof(float), &before);
  dbuf_pull(&buf);
  int bad = 0;
  for (size_t j = 0; j < count; j++) bad += h[j] != (float)(j % 251);
  CHECK_MSG(!bad, "broadcast %s count %zu: %d wrong elements", comm_group_name(c), count, bad);
  dbuf_free(&buf);
}

/* Two collectives in flight at once, waited on in the reverse order of issue. */
static void test_async_overlap(comm *c) {
  int me = comm_rank(c), n = comm_size(c);
  dbuf gathered = dbuf_alloc((size_t)n * 8 * sizeof(float)), mine = dbuf_alloc(8 * sizeof(float)),
       summed = dbuf_alloc(8 * sizeof(float));
  float *g = gathered.host, *m = mine.host, *sum = summed.host;
  for (int j = 0; j < 8; j++) {
    m[j] = (float)(me * 8 + j);
    sum[j] = 1.0f;
  }
  dbuf_push(&mine);
  dbuf_push(&summed);
  comm_work w1, w2;
  CHECK_OK(comm_all_gather(c, mine.dev, gathered.dev, 8, ST_FP32, &w1));
  CHECK_OK(comm_all_reduce(c, summed.dev, summed.dev, 8, ST_FP32, COMM_SUM, &w2));
  CHECK(w2.seq == w1.seq + 1);
  CHECK_OK(comm_wait(&w2));
  CHECK_OK(comm_wait(&w1));
  dbuf_pull(&gathered);
  dbuf_pull(&summed);
  int bad = 0;
  for (int k = 0; k < n * 8; k++) bad += g[k] != (float)k;
  for (int j = 0; j < 8; j++) bad += sum[j] != (float)n;
  CHECK_MSG(!bad, "overlapped collectives on %s: %d wrong elements", comm_group_name(c), bad);
  CHECK_STATUS(comm_wait(&w1), ST_ERR_INVALID_ARG); /* already completed */
  dbuf_free(&summed);
  dbuf_free(&mine);
  dbuf_free(&gathered);
}

/* A duplicate communicator, with a collective ordered on a stream: named "<group>.test", its
 * own sequence numbers from 0 (the group's do not move), its bytes in the group's counters, its
 * result seen by the stream's later work, and nothing left in flight after comm_drain. */
static void test_dup_stream_order(comm *c) {
  int me = comm_rank(c), n = comm_size(c);
  comm *dup = NULL;
  CHECK_OK(comm_dup(c, "test", &dup));
  if (!dup) return;
  char name[64];
  snprintf(name, sizeof name, "%s.test", comm_group_name(c));
  CHECK_MSG(strcmp(comm_group_name(dup), name) == 0, "dup named %s", comm_group_name(dup));
  CHECK_EQ_INT(comm_size(dup), n);
  CHECK_EQ_INT(comm_rank(dup), me);
  dbuf full = dbuf_alloc((size_t)n * 5 * sizeof(float));
  float *h = full.host;
  for (int j = 0; j < n * 5; j++) h[j] = (float)((me + 1) * j);
  dbuf_push(&full);
  const comm_snapshot before = snapshot(c);
  comm_work work;
  CHECK_OK(comm_reduce_scatter_on(dup, &test_stream, full.dev, (char *)full.dev + me * 5 * 4, 5,
                                  ST_FP32, COMM_SUM, &work));
  CHECK_EQ_INT(work.seq, 0);
  CHECK_OK(comm_order_after(&work, &test_stream));
  CHECK_STATUS(comm_order_after(&work, &test_stream), ST_ERR_INVALID_ARG); /* the record is free */
  CHECK_EQ_INT(comm_next_seq(c), before.seq);
  CHECK_EQ_INT(comm_next_seq(dup), 1);
  comm_counters after;
  comm_counters_get(c, &after);
  CHECK_EQ_INT(
      after.bytes_sent[COMM_REDUCE_SCATTER] - before.counters.bytes_sent[COMM_REDUCE_SCATTER],
      ring_formula(COMM_REDUCE_SCATTER, n, (double)n * 5 * sizeof(float)));
  dbuf_pull(&full); /* through test_stream: after the reduce-scatter */
  int bad = 0;
  for (int j = 0; j < 5; j++) bad += h[me * 5 + j] != (float)(n * (n + 1) / 2 * (me * 5 + j));
  CHECK_MSG(!bad, "reduce_scatter on %s ordered on a stream: %d wrong elements", name, bad);
  CHECK_OK(comm_drain(dup));
  dbuf_free(&full);
  comm_destroy(dup);
}

/* Whether the mesh runs NCCL on the CUDA emulation (its device's product name says so). */
static int on_emulated_nccl(const st_mesh *mesh) {
  char name[DEVICE_NAME_SIZE];
  return strcmp(st_mesh_backend_name(mesh), "nccl") == 0 &&
         device_product_name(mesh_device(mesh), name) == ST_OK && strncmp(name, "cuda_emu", 8) == 0;
}

/* The case of the file's header, on a duplicate of the dp group (2 ranks): rank 0 joins the first
 * all-reduce only. */
static void test_async_error(comm *dp, int me) {
  comm *c = NULL;
  CHECK_OK(comm_dup(dp, "async-error", &c));
  if (!c) return;
  dbuf b = dbuf_alloc(sizeof(float));
  *(float *)b.host = 1.0f;
  dbuf_push(&b);
  comm_work work;
  CHECK_OK(comm_all_reduce_on(c, &test_stream, b.dev, b.dev, 1, ST_FP32, COMM_SUM, &work));
  /* Finished on both ranks first (under CUDA_EMU_ASYNC=1 it runs on the stream's worker): the
   * emulation's abort unmaps the communicator at once. */
  CHECK_OK(stream_sync(&test_stream));
  if (me == 1) CHECK(setenv("CUDA_EMU_NCCL_ASYNC_ERROR", "1", 1) == 0);
  const st_status waited = comm_wait(&work);
  if (me == 1) {
    CHECK(unsetenv("CUDA_EMU_NCCL_ASYNC_ERROR") == 0);
    CHECK_MSG(waited == ST_ERR_NCCL, "an asynchronous NCCL error fails the wait (got %s)",
              st_status_string(waited));
    const st_status again =
        comm_all_reduce_on(c, &test_stream, b.dev, b.dev, 1, ST_FP32, COMM_SUM, &work);
    CHECK_MSG(again == ST_ERR_NCCL && strstr(st_last_error(), "aborted") != NULL,
              "after the error the communicator is aborted: the next collective fails at once "
              "(got %s: %s)",
              st_status_string(again), st_last_error());
  } else {
    CHECK_OK(waited);
  }
  /* A duplicate of a communicator aborted on one rank fails on both: the other rank does not
   * wait for it in the set-up's agreement. */
  comm *dup = NULL;
  const st_status duped = comm_dup(c, "after-error", &dup);
  CHECK_MSG(duped != ST_OK && dup == NULL,
            "a duplicate of a communicator aborted on rank 1 fails on rank %d (got %s)", me,
            st_status_string(duped));
  comm_destroy(dup);
  dbuf_free(&b);
  comm_destroy(c);
}

static void test_membership(const st_mesh *mesh, st_group g) {
  st_mesh_coords coords;
  CHECK_OK(st_mesh_get_coords(mesh, &coords));
  comm *c = mesh_comm(mesh, g);
  int n = comm_size(c);
  CHECK_MSG(n == expected_group_size(&coords, g), "group %s has %d ranks, expected %d",
            mesh_group_name(g), n, expected_group_size(&coords, g));
  CHECK(member_world_rank(&coords, g, comm_rank(c)) == coords.world_rank);
  dbuf all = dbuf_alloc((size_t)n * sizeof(float)), one = dbuf_alloc(sizeof(float));
  float *ranks = all.host;
  *(float *)one.host = (float)coords.world_rank;
  dbuf_push(&one);
  CHECK_OK(comm_all_gather(c, one.dev, all.dev, 1, ST_FP32, NULL));
  dbuf_pull(&all);
  for (int k = 0; k < n; k++) {
    CHECK_MSG(ranks[k] == (float)member_world_rank(&coords, g, k),
              "group %s member %d is world rank %g, layout says %d", mesh_group_name(g), k,
              ranks[k], member_world_rank(&coords, g, k));
  }
  dbuf_free(&one);
  dbuf_free(&all);
}

/* With NCCL_HOSTID set on every rank (the hostid variant), an empty one on the last rank, which
 * NCCL would read as a host named "", is refused on every rank: the rank itself names the
 * variable, the others that rank. */
static void test_empty_host_id(const st_mesh_config *config, int world, int me) {
  const char *mine = getenv("NCCL_HOSTID");
  if (!mine || world < 2) return;
  char saved[256];
  snprintf(saved, sizeof saved, "%s", mine);
  if (me == world - 1) setenv("NCCL_HOSTID", "", 1);
  st_mesh *mesh = NULL;
  CHECK_STATUS(st_mesh_create(&mesh, config), ST_ERR_INVALID_ARG);
  CHECK(mesh == NULL);
  char want[96] = "NCCL_HOSTID is set but empty";
  if (me != world - 1) snprintf(want, sizeof want, "abandoned: world rank %d failed", world - 1);
  CHECK_MSG(strstr(st_last_error(), want) != NULL, "rank %d: message '%s'", me, st_last_error());
  setenv("NCCL_HOSTID", saved, 1);
}

int main(int argc, char **argv) {
  CHECK_OK(st_init(&argc, &argv));
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  st_mesh_config config = ST_MESH_CONFIG_INIT;
  config.device = "cpu";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--device") == 0) config.device = argv[i + 1];
    if (strcmp(argv[i], "--backend") == 0 && strcmp(argv[i + 1], "nccl") == 0) {
      config.backend = ST_COMM_NCCL;
    }
  }
  if (strcmp(config.device, "cuda") == 0 && device_cuda_count() == 0) {
    int rc = test_skip("collectives_test --device cuda", "no usable GPU");
    st_finalize();
    return rc;
  }
  if (world == 8) config.dp_replicate = config.tp = 2;
  st_mesh *mesh = NULL;
  CHECK_OK(st_mesh_create(&mesh, &config));
  if (mesh) {
    test_device = mesh_device(mesh);
    CHECK_OK(stream_create(test_device, &test_stream));
    if (mesh_device(mesh)->backend->kind == ST_DEVICE_CUDA) {
      printf("collectives on cuda with backend %s\n", st_mesh_backend_name(mesh));
    }
    for (int g = 0; g < ST_GROUP_COUNT; g++) {
      comm *c = mesh_comm(mesh, (st_group)g);
      test_membership(mesh, (st_group)g);
      for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        for (st_dtype d = ST_FP32; d <= ST_FP16; d++) {
          test_all_gather(c, d, counts[i], 0);
          test_all_gather(c, d, counts[i], 1);
          test_reduce_scatter(c, d, counts[i], 0);
          test_reduce_scatter(c, d, counts[i], 1);
          test_all_reduce(c, d, COMM_SUM, counts[i]);
          test_all_reduce(c, d, COMM_MAX, counts[i]);
        }
        test_broadcast(c, counts[i]);
      }
      const comm_snapshot before = snapshot(c);
      CHECK_OK(comm_barrier(c, NULL));
      check_accounting(c, COMM_BARRIER, 0, &before);
      test_async_overlap(c);
      test_dup_stream_order(c);
    }
    if (world == 2 && on_emulated_nccl(mesh)) {
      int me = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &me);
      test_async_error(mesh_comm(mesh, ST_GROUP_DP), me);
    }
    stream_destroy(&test_stream);
  }
  st_mesh_destroy(mesh);
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  test_empty_host_id(&config, world, me);
  mem_stats stats;
  mem_stats_get(&stats);
  CHECK_EQ_INT(stats.live_blocks, 0);
  int rc = test_finish_mpi("collectives_test");
  st_finalize();
  return rc;
}
