/* cmd_selftest.c - `shardtrain selftest`: builds the mesh, runs every collective on every
 * group with inputs whose result is known, checks it on every rank, and prints one table
 * (rank 0) with the time per op and the bus bandwidth under ring accounting. It is the quick
 * answer to "does communication work on this allocation, and how fast", before training.
 *
 * By default the timed ops run back to back, as nccl-tests times them. `--cold-cache-mib N`
 * times each op alone, after every rank has written N MiB of host scratch (evicting the
 * buffers from a last-level cache smaller than that) and met the others at a barrier, from the
 * last rank's start to the last rank's end: what a collective costs inside a training step,
 * whose other work has evicted its buffers. On this project's CPU machine Open MPI's 12 MiB
 * reduce-scatter on 2 ranks takes 2.0-2.3 ms back to back and 2.4-3.3 ms cold
 * (docs/SIMULATOR.md); the simulator's CPU calibration measures it cold. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/check_mpi.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/cli/cli_job.h"
#include "engine/cli/commands.h"
#include "engine/flags/cli_flags.h"
#include "sharding/comm.h"
#include "sharding/mesh.h"

typedef struct selftest_options {
  int dp_replicate, dp_shard, tp;
  const char *device;
  const char *backend;
  int count;
  int iters;
  int cold_cache_mib; /* 0: back to back */
} selftest_options;

typedef struct op_buffers {
  const st_device *dev;
  st_stream stream;
  float *host;          /* n * count fp32 scratch for filling and checking */
  float *send;          /* n * count on the device */
  float *recv;          /* n * count on the device */
  unsigned char *evict; /* cold_bytes of host scratch (cold cache timing), else NULL */
  size_t cold_bytes;
} op_buffers;

/* Fills the inputs of `op` so that every result element is a small, exactly known integer. */
static st_status fill_inputs(op_buffers *b, comm_op op, int me, int n, size_t count) {
  size_t len = op == COMM_ALL_GATHER || op == COMM_BROADCAST || op == COMM_ALL_REDUCE
                   ? count
                   : count * (size_t)n;
  for (size_t j = 0; j < len; j++) {
    b->host[j] = op == COMM_BROADCAST ? (me == 0 ? (float)(j % 13) : -1.0f)
                                      : (float)(me + 1) + (float)(j % 5);
  }
  float *dst = op == COMM_BROADCAST ? b->recv : b->send;
  ST_CHECK(stream_memcpy(&b->stream, dst, b->host, len * sizeof(float)));
  return stream_sync(&b->stream);
}

static int count_wrong(op_buffers *b, comm_op op, int me, int n, size_t count) {
  size_t len = op == COMM_ALL_GATHER ? count * (size_t)n : count;
  if (stream_memcpy(&b->stream, b->host, b->recv, len * sizeof(float)) != ST_OK ||
      stream_sync(&b->stream) != ST_OK) {
    return (int)len;
  }
  int wrong = 0;
  for (size_t i = 0; i < len; i++) {
    size_t j = op == COMM_ALL_GATHER ? i % count : i;
    size_t k = op == COMM_ALL_GATHER ? i / count : 0;
    size_t global_j = op == COMM_REDUCE_SCATTER ? (size_t)me * count + j : j;
    float want;
    switch (op) {
      case COMM_ALL_GATHER: want = (float)(k + 1) + (float)(j % 5); break;
      case COMM_BROADCAST: want = (float)(j % 13); break;
      default: want = (float)(n * (n + 1) / 2) + (float)n * (float)(global_j % 5); break;
    }
    wrong += b->host[i] != want;
  }
  return wrong;
}

static st_status run_op(comm *c, op_buffers *b, comm_op op, size_t count) {
  switch (op) {
    case COMM_ALL_GATHER: return comm_all_gather(c, b->send, b->recv, count, ST_FP32, NULL);
    case COMM_REDUCE_SCATTER:
      return comm_reduce_scatter(c, b->send, b->recv, count, ST_FP32, COMM_SUM, NULL);
    case COMM_ALL_REDUCE:
      return comm_all_reduce(c, b->send, b->recv, count, ST_FP32, COMM_SUM, NULL);
    case COMM_BROADCAST: return comm_broadcast(c, b->recv, count, ST_FP32, 0, NULL);
    default: return comm_barrier(c, NULL);
  }
}

/* Writes every cache line of the eviction scratch (a different value each time, so that no
 * pass can be skipped). */
static void evict_caches(op_buffers *b, int pass) {
  for (size_t k = 0; k < b->cold_bytes; k += 64) b->evict[k] = (unsigned char)(k + pass);
}

/* Back to back: the clock runs from a barrier to the sync after the last op. */
static st_status time_back_to_back(comm *c, op_buffers *b, comm_op op, size_t count, int iters,
                                   double *seconds) {
  ST_CHECK(comm_barrier(c, NULL));
  const double start = MPI_Wtime();
  for (int i = 0; i < iters; i++) ST_CHECK(run_op(c, b, op, count));
  ST_CHECK(stream_sync(&b->stream));
  *seconds = (MPI_Wtime() - start) / iters;
  return ST_OK;
}

/* Cold: each op alone, after the eviction and a barrier, timed from the last rank's start to
 * the last rank's end (over the job: every group of the kind runs the op at once). Ranks leave
 * a barrier at different times (by whole scheduler slices where they outnumber the cores), and
 * that skew is no part of the collective's cost; a training step's collectives start when
 * their last rank arrives. The ranks' clocks must agree, as they do on one node. */
static st_status time_cold(comm *c, op_buffers *b, comm_op op, size_t count, int iters,
                           double *seconds) {
  double total = 0;
  for (int i = 0; i < iters; i++) {
    evict_caches(b, i);
    ST_CHECK(comm_barrier(c, NULL));
    double t[2] = {MPI_Wtime(), 0};
    ST_CHECK(run_op(c, b, op, count));
    ST_CHECK(stream_sync(&b->stream));
    t[1] = MPI_Wtime();
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, t, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    total += t[1] - t[0];
  }
  *seconds = total / iters;
  return ST_OK;
}

/* Runs one op `iters` times on one group, back to back or each alone with cold caches;
 * returns this rank's seconds per op and its number of wrong result elements. */
static st_status measure(comm *c, op_buffers *b, comm_op op, size_t count, int iters,
                         double *seconds, int *wrong) {
  int me = comm_rank(c), n = comm_size(c);
  ST_CHECK(fill_inputs(b, op, me, n, count));
  if (b->evict) {
    ST_CHECK(time_cold(c, b, op, count, iters, seconds));
  } else {
    ST_CHECK(time_back_to_back(c, b, op, count, iters, seconds));
  }
  *wrong = count_wrong(b, op, me, n, count);
  return ST_OK;
}

static st_status run_selftest(st_mesh *mesh, const selftest_options *o, int *failures) {
  st_mesh_coords coords;
  ST_CHECK(st_mesh_get_coords(mesh, &coords));
  int world = coords.world_size;
  size_t count = (size_t)o->count;
  op_buffers b = {.dev = mesh_device(mesh)};
  st_status status = ST_OK;
  size_t bytes = count * (size_t)world * sizeof(float);
  ST_CHECK_GOTO(stream_create(b.dev, &b.stream), status, done);
  ST_CHECK_GOTO(mem_alloc((void **)&b.host, bytes, MEM_HOST, MEM_WORKSPACE, NULL), status, done);
  ST_CHECK_GOTO(mem_alloc((void **)&b.send, bytes, MEM_DEVICE, MEM_COMM, b.dev), status, done);
  ST_CHECK_GOTO(mem_alloc((void **)&b.recv, bytes, MEM_DEVICE, MEM_COMM, b.dev), status, done);
  b.cold_bytes = (size_t)o->cold_cache_mib << 20;
  if (b.cold_bytes) {
    ST_CHECK_GOTO(mem_alloc((void **)&b.evict, b.cold_bytes, MEM_HOST, MEM_WORKSPACE, NULL), status,
                  done);
  }

  if (coords.world_rank == 0) {
    printf(
        "shardtrain selftest: %d rank%s, mesh %d x %d x %d (dp_replicate x dp_shard x tp), "
        "backend %s, device %s, %d fp32 element%s per rank, %d iteration%s%s\n",
        world, world == 1 ? "" : "s", coords.R, coords.S, coords.T, st_mesh_backend_name(mesh),
        st_mesh_device_name(mesh), o->count, o->count == 1 ? "" : "s", o->iters,
        o->iters == 1 ? "" : "s", b.evict ? ", each alone with cold caches" : "");
    printf("%-10s %5s  %-15s %14s %12s %12s  %s\n", "group", "ranks", "op", "bytes", "time/op",
           "bus GB/s", "check");
  }
  const comm_op ops[] = {COMM_ALL_GATHER, COMM_REDUCE_SCATTER, COMM_ALL_REDUCE, COMM_BROADCAST};
  for (int g = 0; g < ST_GROUP_COUNT; g++) {
    comm *c = mesh_comm(mesh, (st_group)g);
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
      double seconds = 0;
      int wrong = 0;
      ST_CHECK_GOTO(measure(c, &b, ops[i], count, o->iters, &seconds, &wrong), status, done);
      /* Every rank's verdict and the slowest rank's time go into the one printed row. */
      double worst[2] = {seconds, (double)wrong};
      MPI_Allreduce(MPI_IN_PLACE, worst, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      int total_wrong = wrong;
      MPI_Allreduce(MPI_IN_PLACE, &total_wrong, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
      *failures += total_wrong > 0;
      if (coords.world_rank == 0) {
        size_t payload = ops[i] == COMM_ALL_REDUCE || ops[i] == COMM_BROADCAST
                             ? count * sizeof(float)
                             : count * (size_t)comm_size(c) * sizeof(float);
        double bus = (double)comm_ring_bytes(ops[i], comm_size(c), payload) / worst[0] / 1e9;
        char verdict[32] = "ok";
        if (total_wrong) snprintf(verdict, sizeof verdict, "FAILED (%d wrong)", total_wrong);
        printf("%-10s %5d  %-15s %14zu %9.3f ms %12.3f  %s\n", mesh_group_name((st_group)g),
               comm_size(c), comm_op_name(ops[i]), payload, worst[0] * 1e3, bus, verdict);
      }
    }
  }
done:
  mem_free(b.evict);
  mem_free(b.recv);
  mem_free(b.send);
  mem_free(b.host);
  stream_destroy(&b.stream);
  return status;
}

static st_status parse_backend(const char *name, st_comm_backend *out) {
  const char *const names[] = {"auto", "mpi", "nccl"};
  for (int i = 0; i < 3; i++) {
    if (strcmp(name, names[i]) == 0) {
      *out = (st_comm_backend)i;
      return ST_OK;
    }
  }
  return st_error(ST_ERR_INVALID_ARG, "--backend: '%s' is not one of auto, mpi, nccl", name);
}

/* Refused here, before any rank allocates (an allocation the kernel cannot back ends the job by
 * the OOM killer, without a word): a --count above 2^28 fp32 elements (1 GiB a buffer), or one
 * whose buffers on one rank exceed the host's available memory. run_selftest allocates on each
 * rank host scratch, send and recv of world x count fp32 each (world >= 1, so at least
 * 3 x 4 x count bytes) and the cold-cache scratch; ranks on one node share that memory, so the
 * check is a lower bound, the cap the documented limit (docs/CLI.md). */
static st_status check_options(const selftest_options *o) {
  const int max_count = 1 << 28;
  if (o->count < 1 || o->count > max_count) {
    return st_error(ST_ERR_INVALID_ARG, "--count %d is out of range (1 to %d fp32 elements)",
                    o->count, max_count);
  }
  if (o->iters < 1) return st_error(ST_ERR_INVALID_ARG, "--iters must be >= 1, got %d", o->iters);
  if (o->cold_cache_mib < 0 || o->cold_cache_mib > 1 << 16) {
    return st_error(ST_ERR_INVALID_ARG, "--cold-cache-mib must be 0 to 65536, got %d",
                    o->cold_cache_mib);
  }
  const uint64_t need =
      3 * sizeof(float) * (uint64_t)o->count + ((uint64_t)o->cold_cache_mib << 20);
  const st_device cpu = device_cpu();
  device_memory host;
  if (device_memory_info(&cpu, &host) == ST_OK && need > host.available) {
    return st_error(ST_ERR_INVALID_ARG,
                    "--count %d needs at least %.1f GiB of buffers per rank, more than the %.1f "
                    "GiB of memory available",
                    o->count, (double)need / 1073741824.0, (double)host.available / 1073741824.0);
  }
  st_error_clear();
  return ST_OK;
}

int cmd_selftest(int argc, char **argv) {
  selftest_options o = {1, 0, 1, NULL, "auto", 1 << 18, 5, 0};
  const cli_flag flags[] = {
      {"dp-replicate", FLAG_INT, &o.dp_replicate, "replicate groups R (outer data parallel)"},
      {"dp-shard", FLAG_INT, &o.dp_shard, "shard group size S (0: world / (R x T))"},
      {"tp", FLAG_INT, &o.tp, "tensor-parallel group size T"},
      {"device", FLAG_STRING, &o.device, "cpu, cuda or auto (default: $ST_DEVICE, else auto)"},
      {"backend", FLAG_STRING, &o.backend, "collective backend: auto, mpi or nccl"},
      {"count", FLAG_INT, &o.count, "fp32 elements per rank in each collective"},
      {"iters", FLAG_INT, &o.iters, "timed repetitions of each collective"},
      {"cold-cache-mib", FLAG_INT, &o.cold_cache_mib,
       "time each op alone after writing this many MiB of scratch (0: back to back)"},
  };
  int nflags = (int)(sizeof flags / sizeof flags[0]);
  int help = 0;
  st_mesh_config cfg = ST_MESH_CONFIG_INIT;
  st_status status = cli_parse(argc, argv, 2, flags, nflags, &help);
  if (status == ST_OK && !help) status = check_options(&o);
  if (status == ST_OK && !help) status = parse_backend(o.backend, &cfg.backend);
  if (help) {
    cli_print_help(stdout, "shardtrain selftest [flags]",
                   "Runs every collective on every group of the mesh, checks the results on "
                   "every rank,\nand prints time and bus bandwidth per op. Launch with mpirun "
                   "or srun.",
                   flags, nflags);
    return 0;
  }
  const int start = cli_job_start("selftest", status, &argc, &argv);
  if (start != CLI_JOB_RUN) return start;
  cfg.dp_replicate = o.dp_replicate;
  cfg.dp_shard = o.dp_shard;
  cfg.tp = o.tp;
  cfg.device = o.device;
  st_mesh *mesh = NULL;
  int failures = 0;
  status = st_mesh_create(&mesh, &cfg);
  if (status == ST_OK) status = run_selftest(mesh, &o, &failures);
  if (status != ST_OK) st_log(ST_LOG_ERROR, "shardtrain selftest: %s", st_last_error());
  const int code = cli_job_end(status != ST_OK ? exit_code_for(status) : failures ? 1 : 0);
  st_mesh_destroy(mesh);
  st_finalize();
  return code;
}
