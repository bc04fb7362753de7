// nccl_test.cc - the CUDA emulation's NCCL (tools/cuda_emu/src/nccl.cc) across processes: 4
// ranks forked from one unique id, with 1 KiB slots so that every collective takes several
// rounds at odd counts. All-gather, reduce-scatter (sum and max), all-reduce and broadcast in
// fp32, bf16 and fp16, out of place and in place, against values computed here in double;
// 16-bit sums rounded after each rank's addition; splits by colour and key (members, ranks,
// reductions inside the new communicator only, NCCL_SPLIT_NOCOLOR); arguments NCCL refuses;
// NCCL_SOCKET_IFNAME naming no interface of this machine (prefixes, '^', '=', lists).
// Each rank checks its own results and exits non-zero on a failure; the parent checks every
// rank's exit (a rank left waiting by a failed peer is ended by an alarm).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <nccl.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/testing.h"

namespace {

constexpr int kRanks = 4;

// Small integers, so sums over the ranks are exact in every type: in [-8, 8].
double value(int rank, size_t i) { return (double)((rank * 7 + (int)i * 3) % 17) - 8.0; }

// One buffer of `n` elements of `type`, read and written as doubles.
struct buffer {
  ncclDataType_t type;
  std::vector<unsigned char> bytes;
  buffer(ncclDataType_t t, size_t n) : type(t), bytes(n * (t == ncclFloat32 ? 4 : 2)) {}
  void *data() { return bytes.data(); }
  void set(size_t i, double v) {
    if (type == ncclFloat32) reinterpret_cast<float *>(data())[i] = (float)v;
    if (type == ncclFloat16) reinterpret_cast<__half *>(data())[i] = __float2half((float)v);
    if (type == ncclBfloat16) {
      reinterpret_cast<__nv_bfloat16 *>(data())[i] = __float2bfloat16((float)v);
    }
  }
  double get(size_t i) {
    if (type == ncclFloat16) return __half2float(reinterpret_cast<__half *>(data())[i]);
    if (type == ncclBfloat16) {
      return __bfloat162float(reinterpret_cast<__nv_bfloat16 *>(data())[i]);
    }
    return reinterpret_cast<float *>(data())[i];
  }
};

const ncclDataType_t kTypes[] = {ncclFloat32, ncclBfloat16, ncclFloat16};

// The sum (or max) over ranks of value(k, i).
double reduced(size_t i, ncclRedOp_t op) {
  double acc = value(0, i);
  for (int k = 1; k < kRanks; k++)
    acc = op == ncclSum ? acc + value(k, i) : std::max(acc, value(k, i));
  return acc;
}

// Counts the elements of `got` (from `first`, `n` of them) that differ from want(i).
template <class Want>
int mismatches(buffer &got, size_t first, size_t n, Want want) {
  int wrong = 0;
  for (size_t i = 0; i < n; i++) wrong += got.get(first + i) != want(i);
  return wrong;
}

void check_all_gather(ncclComm_t comm, int rank, ncclDataType_t type, bool in_place) {
  const size_t count = 601;  // 4-byte elements: 3 rounds of 256
  buffer recv(type, count * kRanks), own(type, count);
  buffer &send = in_place ? recv : own;
  const size_t at = in_place ? (size_t)rank * count : 0;
  for (size_t i = 0; i < count; i++) send.set(at + i, value(rank, i));
  CHECK_EQ_INT(ncclAllGather((char *)send.data() + at * (type == ncclFloat32 ? 4 : 2), recv.data(),
                             count, type, comm, nullptr),
               ncclSuccess);
  for (int k = 0; k < kRanks; k++) {
    CHECK_MSG(mismatches(recv, k * count, count, [&](size_t i) { return value(k, i); }) == 0,
              "all-gather type %d in place %d: rank %d's piece wrong on rank %d", type, in_place, k,
              rank);
  }
}

void check_reduce_scatter(ncclComm_t comm, int rank, ncclDataType_t type, ncclRedOp_t op,
                          bool in_place) {
  const size_t count = 150;  // per rank; a round holds 1024 / (4 ranks x 4 bytes) = 64
  buffer send(type, count * kRanks), own(type, count);
  for (size_t i = 0; i < count * kRanks; i++) send.set(i, value(rank, i));
  buffer &recv = in_place ? send : own;
  const size_t at = in_place ? (size_t)rank * count : 0;
  const size_t es = type == ncclFloat32 ? 4 : 2;
  CHECK_EQ_INT(
      ncclReduceScatter(send.data(), (char *)recv.data() + at * es, count, type, op, comm, nullptr),
      ncclSuccess);
  CHECK_MSG(
      mismatches(recv, at, count, [&](size_t i) { return reduced(rank * count + i, op); }) == 0,
      "reduce-scatter type %d op %d in place %d wrong on rank %d", type, op, in_place, rank);
}

void check_all_reduce(ncclComm_t comm, int rank, ncclDataType_t type, ncclRedOp_t op,
                      bool in_place) {
  const size_t count = 777;
  buffer send(type, count), own(type, count);
  for (size_t i = 0; i < count; i++) send.set(i, value(rank, i));
  buffer &recv = in_place ? send : own;
  CHECK_EQ_INT(ncclAllReduce(send.data(), recv.data(), count, type, op, comm, nullptr),
               ncclSuccess);
  CHECK_MSG(mismatches(recv, 0, count, [&](size_t i) { return reduced(i, op); }) == 0,
            "all-reduce type %d op %d in place %d wrong on rank %d", type, op, in_place, rank);
}

void check_broadcast(ncclComm_t comm, int rank, ncclDataType_t type) {
  const size_t count = 1000;
  const int root = 2;
  buffer send(type, count), recv(type, count);
  for (size_t i = 0; i < count; i++) send.set(i, value(rank, i));
  CHECK_EQ_INT(ncclBroadcast(send.data(), recv.data(), count, type, root, comm, nullptr),
               ncclSuccess);
  CHECK_MSG(mismatches(recv, 0, count, [&](size_t i) { return value(root, i); }) == 0,
            "broadcast type %d wrong on rank %d", type, rank);
}

// bf16 256 + 1 + 1 + 1: each addition of 1 to 256 is a tie that rounds back to 256 (even), as
// NCCL's ring keeps each partial sum in bf16; rounding once at the end would give 260.
void check_rounding_per_addition(ncclComm_t comm, int rank) {
  buffer data(ncclBfloat16, 1);
  data.set(0, rank == 0 ? 256.0 : 1.0);
  CHECK_EQ_INT(ncclAllReduce(data.data(), data.data(), 1, ncclBfloat16, ncclSum, comm, nullptr),
               ncclSuccess);
  CHECK_NEAR(data.get(0), 256.0, 0.0);
}

// The sum over the members of a split of their world ranks, computed inside the split.
double sum_of_ranks(ncclComm_t comm, int rank) {
  float v = (float)rank;
  CHECK_EQ_INT(ncclAllReduce(&v, &v, 1, ncclFloat32, ncclSum, comm, nullptr), ncclSuccess);
  return v;
}

// Colour rank % 2 with key -rank: {0, 2} as ranks {1, 0} and {1, 3} as {1, 0}; then ranks 0-2
// in one colour and rank 3 without one. The parent keeps working between its children.
void check_split(ncclComm_t world, int rank) {
  ncclComm_t half = nullptr, three = nullptr;
  CHECK_EQ_INT(ncclCommSplit(world, rank % 2, -rank, &half, nullptr), ncclSuccess);
  CHECK(half != nullptr);
  CHECK_EQ_INT(ncclCommSplit(world, rank == 3 ? -1 : 5, rank, &three, nullptr), ncclSuccess);
  CHECK_EQ_INT(three == nullptr, rank == 3);
  if (!half) return;
  check_all_reduce(world, rank, ncclFloat32, ncclSum, false);
  CHECK_NEAR(sum_of_ranks(half, rank), rank % 2 ? 1 + 3 : 0 + 2, 0.0);
  float mine = (float)rank, both[2] = {-1, -1};
  CHECK_EQ_INT(ncclAllGather(&mine, both, 1, ncclFloat32, half, nullptr), ncclSuccess);
  CHECK_MSG(both[0] == (float)(rank % 2 + 2) && both[1] == (float)(rank % 2),
            "split by key -rank: rank %d sees order %g %g", rank, both[0], both[1]);
  if (three) CHECK_NEAR(sum_of_ranks(three, rank), 0 + 1 + 2, 0.0);
  CHECK_EQ_INT(ncclCommDestroy(three), ncclSuccess);
  CHECK_EQ_INT(ncclCommDestroy(half), ncclSuccess);
}

int run_rank(const ncclUniqueId &id, int rank) {
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.maxCTAs = 4;
  CHECK_EQ_INT(ncclCommInitRankConfig(&comm, kRanks, id, rank, &config), ncclSuccess);
  if (!comm) return 1;
  for (ncclDataType_t type : kTypes) {
    for (bool in_place : {false, true}) {
      check_all_gather(comm, rank, type, in_place);
      for (ncclRedOp_t op : {ncclSum, ncclMax}) {
        check_reduce_scatter(comm, rank, type, op, in_place);
        check_all_reduce(comm, rank, type, op, in_place);
      }
    }
    check_broadcast(comm, rank, type);
  }
  check_rounding_per_addition(comm, rank);
  check_split(comm, rank);
  CHECK_EQ_INT(ncclCommDestroy(comm), ncclSuccess);
  char name[32];
  snprintf(name, sizeof name, "nccl_test rank %d", rank);
  return test_finish(name);
}

// What NCCL refuses before any rank has to meet another.
void check_refusals(const ncclUniqueId &id) {
  ncclComm_t comm = nullptr;
  CHECK_EQ_INT(ncclCommInitRankConfig(&comm, 2, id, 2, nullptr), ncclInvalidArgument);
  CHECK_EQ_INT(ncclCommInitRankConfig(nullptr, 1, id, 0, nullptr), ncclInvalidArgument);
  ncclUniqueId blank = {};
  CHECK_EQ_INT(ncclCommInitRankConfig(&comm, 1, blank, 0, nullptr), ncclInvalidArgument);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.minCTAs = 8;
  config.maxCTAs = 2;
  CHECK_EQ_INT(ncclCommInitRankConfig(&comm, 1, id, 0, &config), ncclInvalidArgument);
  float x = 0;
  CHECK_EQ_INT(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, nullptr, nullptr),
               ncclInvalidArgument);
  CHECK_EQ_INT(ncclCommInitRankConfig(&comm, 1, id, 0, nullptr), ncclSuccess);
  CHECK_EQ_INT(ncclBroadcast(&x, &x, 1, ncclFloat32, 1, comm, nullptr), ncclInvalidArgument);
  CHECK_EQ_INT(ncclAllReduce(&x, &x, 1, (ncclDataType_t)3, ncclSum, comm, nullptr),
               ncclInvalidArgument);
  CHECK_EQ_INT(ncclAllReduce(&x, &x, 1, ncclFloat32, (ncclRedOp_t)1, comm, nullptr),
               ncclInvalidArgument);
  CHECK_EQ_INT(ncclAllGather(nullptr, &x, 1, ncclFloat32, comm, nullptr), ncclInvalidArgument);
  CHECK_EQ_INT(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, nullptr), ncclSuccess);
  CHECK_EQ_INT(ncclCommDestroy(comm), ncclSuccess);
}

// Whether a one-rank communicator sets up under NCCL_SOCKET_IFNAME=spec: ncclSuccess or the
// bootstrap's ncclInvalidUsage, the same from ncclGetUniqueId and ncclCommInitRankConfig.
void check_interface_spec(const std::string &spec, bool admitted) {
  const ncclResult_t want = admitted ? ncclSuccess : ncclInvalidUsage;
  unsetenv("NCCL_SOCKET_IFNAME");
  ncclUniqueId id;
  CHECK_EQ_INT(ncclGetUniqueId(&id), ncclSuccess);
  setenv("NCCL_SOCKET_IFNAME", spec.c_str(), 1);
  ncclUniqueId other;
  CHECK_EQ_INT(ncclGetUniqueId(&other), want);
  ncclComm_t comm = nullptr;
  CHECK_MSG(ncclCommInitRankConfig(&comm, 1, id, 0, nullptr) == want, "NCCL_SOCKET_IFNAME=%s",
            spec.c_str());
  CHECK(admitted == (comm != nullptr));
  if (comm) CHECK_EQ_INT(ncclCommDestroy(comm), ncclSuccess);
  unsetenv("NCCL_SOCKET_IFNAME");
}

// NCCL_SOCKET_IFNAME against this machine's first interface (every network namespace has one).
void check_socket_interfaces() {
  struct if_nameindex *interfaces = if_nameindex();
  CHECK(interfaces && interfaces[0].if_index != 0);
  if (!interfaces || interfaces[0].if_index == 0) return;
  const std::string name = interfaces[0].if_name;
  if_freenameindex(interfaces);
  const std::string absent = "st_no_such_if";
  check_interface_spec(absent, false);
  check_interface_spec("^" + absent, true);
  check_interface_spec(name, true);
  check_interface_spec("=" + name, true);
  check_interface_spec(absent + "," + name, true);
  check_interface_spec("=" + name + "x", false);
  check_interface_spec("^=" + name + "x", true);
  check_interface_spec(name.substr(0, 1), true);  // a prefix
  check_interface_spec("", true);                 // set but empty: any
}

}  // namespace

int main() {
  setenv("CUDA_EMU_NCCL_SLOT_BYTES", "1024", 1);
  ncclUniqueId id, lone;
  CHECK_EQ_INT(ncclGetUniqueId(&id), ncclSuccess);
  CHECK_EQ_INT(ncclGetUniqueId(&lone), ncclSuccess);
  CHECK(memcmp(id.internal, lone.internal, sizeof id.internal) != 0);
  check_refusals(lone);
  check_socket_interfaces();
  fflush(stdout);
  pid_t children[kRanks];
  for (int rank = 0; rank < kRanks; rank++) {
    children[rank] = fork();
    if (children[rank] == 0) {
      alarm(60);  // a rank whose peer failed early would wait for it for ever
      const int failed = run_rank(id, rank);
      fflush(stdout);
      _exit(failed);
    }
  }
  for (int rank = 0; rank < kRanks; rank++) {
    int status = 0;
    CHECK(waitpid(children[rank], &status, 0) == children[rank]);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank %d ended with status %d", rank,
              status);
  }
  return test_finish("nccl_test");
}
