// nccl.cc (CUDA emulation) - libnccl.so (include/nccl.h) for communicators of any number of
// ranks, each rank a process on this machine. A communicator is a POSIX shared-memory segment
// named by its unique id: a header holding a process-shared barrier and the split table, then
// one staging slot per rank. A collective runs on its stream (at once on the calling thread, or
// on the stream's worker under CUDA_EMU_ASYNC=1, where a communicator's collectives must be on
// one stream, or ranks could run them in different orders) in rounds: every rank copies
// its part of the round into its slot, all wait, every rank builds its part of the result from
// the slots, all wait. Reductions combine the ranks in rank order and round to the data type
// after each combination (as NCCL's ring keeps partial sums in the data type), so every rank
// gets the same bits.
//
// The collectives of a communicator must be called in the same order on every rank (NCCL's rule
// too); one whose peer never calls waits for ever (shardtrain's deadlines end such a wait).
// CUDA_EMU_NCCL_SLOT_BYTES (default 1 MiB, at least 1 KiB, the same on every rank) sizes a rank's
// slot, so small values make many rounds (tests/cuda_emu/nccl_test.cc).
//
// Asynchronous errors only as a test sets them: ncclCommGetAsyncError reports ncclRemoteError
// on every communicator of a process whose CUDA_EMU_NCCL_ASYNC_ERROR is 1 (read at each call:
// a test sets it on one rank, as if a peer had died), else ncclSuccess.
//
// Not emulated: groups, point-to-point, NCCL_DEBUG output, transports and their settings
// (NCCL_HOSTID), but for the one failure a user's setting causes before any rank meets another:
// NCCL_SOCKET_IFNAME naming no interface this machine has makes ncclGetUniqueId and
// ncclCommInitRankConfig return ncclInvalidUsage, as NCCL's bootstrap does ("no socket interface
// found"), so a rank that cannot join leaves the others waiting as on a GPU. Arguments NCCL refuses
// are refused with its status: ncclInvalidArgument for a NULL communicator or out pointer, a bad
// rank, root, type, op or configuration.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <nccl.h>
#include <net/if.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <new>
#include <string>

namespace {

constexpr int kMaxRanks = 256;
constexpr size_t kHeaderBytes = 8192;
constexpr size_t kDefaultSlotBytes = size_t{1} << 20;
constexpr size_t kMinSlotBytes = 4 * kMaxRanks;  // a round of reduce-scatter moves >= 1 element
constexpr unsigned kConfigMagic = 0xcafebeef;

// The start of a communicator's segment, zero when created; the ranks' slots follow at
// kHeaderBytes. `arrived` counts the ranks at the barrier of `generation`; `nranks` and
// `slot_bytes` are set by the first rank to map the segment and checked by the others.
struct segment_header {
  std::atomic<uint32_t> arrived, generation;
  std::atomic<int> nranks;
  std::atomic<size_t> slot_bytes;
  int split_color[kMaxRanks], split_key[kMaxRanks];
};
static_assert(sizeof(segment_header) <= kHeaderBytes, "the header must fit before the slots");
static_assert(std::atomic<uint32_t>::is_always_lock_free &&
                  std::atomic<size_t>::is_always_lock_free,
              "process-shared atomics must be lock-free");

}  // namespace

struct ncclComm {
  int nranks, rank;
  ncclConfig_t config;
  std::string name;  // of the shared segment: the unique id
  segment_header *header;
  char *slots;
  size_t slot_bytes, segment_bytes;
  int splits;  // ncclCommSplit calls made on it so far: they name the children's segments
};

namespace {

size_t type_bytes(ncclDataType_t type) {
  switch (type) {
    case ncclFloat16: return 2;
    case ncclFloat32: return 4;
    case ncclBfloat16: return 2;
  }
  return 0;  // not a type this emulation knows
}

bool op_valid(ncclRedOp_t op) {
  // NCCL's built-in ops are ncclSum 0, ncclProd 1, ncclMax 2, ncclMin 3, ncclAvg 4; this
  // emulation computes the two shardtrain names.
  return op == ncclSum || op == ncclMax;
}

// NCCL's checks of a configuration (none given: the defaults): the magic it was initialised
// with, CTA counts positive and ordered where set, blocking 0 or 1 where set.
ncclResult_t check_config(const ncclConfig_t *c) {
  if (!c) return ncclSuccess;
  if (c->magic != kConfigMagic) return ncclInvalidArgument;
  const int undef = NCCL_CONFIG_UNDEF_INT;
  if (c->blocking != undef && c->blocking != 0 && c->blocking != 1) return ncclInvalidArgument;
  if (c->minCTAs != undef && c->minCTAs <= 0) return ncclInvalidArgument;
  if (c->maxCTAs != undef && c->maxCTAs <= 0) return ncclInvalidArgument;
  if (c->minCTAs != undef && c->maxCTAs != undef && c->minCTAs > c->maxCTAs) {
    return ncclInvalidArgument;
  }
  if (c->cgaClusterSize != undef && c->cgaClusterSize < 0) return ncclInvalidArgument;
  return ncclSuccess;
}

// CUDA_EMU_NCCL_SLOT_BYTES, rounded up to 64 bytes and to at least kMinSlotBytes; the default
// when unset or not a positive number.
size_t slot_bytes_from_env() {
  const char *text = getenv("CUDA_EMU_NCCL_SLOT_BYTES");
  const long long asked = text ? atoll(text) : 0;
  const size_t bytes = asked > 0 ? (size_t)asked : kDefaultSlotBytes;
  return std::max(kMinSlotBytes, (bytes + 63) / 64 * 64);
}

// The barrier of every rank of `c`: the last to arrive opens the next generation and wakes the
// others, who sleep on the generation word (a futex in shared memory).
void wait_all(ncclComm *c) {
  segment_header *h = c->header;
  const uint32_t gen = h->generation.load(std::memory_order_acquire);
  if (h->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == (uint32_t)c->nranks) {
    h->arrived.store(0, std::memory_order_relaxed);
    h->generation.fetch_add(1, std::memory_order_acq_rel);
    syscall(SYS_futex, &h->generation, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
    return;
  }
  while (h->generation.load(std::memory_order_acquire) == gen) {
    syscall(SYS_futex, &h->generation, FUTEX_WAIT, gen, nullptr, nullptr, 0);
  }
}

// Sets `field` to `mine` if no rank has yet; false when another rank set it otherwise.
template <class T>
bool agree(std::atomic<T> &field, T mine) {
  T expected = 0;
  return field.compare_exchange_strong(expected, mine) || expected == mine;
}

void detach(ncclComm *c) {
  if (c->header) munmap(c->header, c->segment_bytes);
  delete c;
}

// Maps segment `name` for rank `rank` of `nranks` and waits for every rank to map it; then rank
// 0 unlinks the name (the segment lives on while mapped, and goes with the last mapping).
ncclResult_t attach(const std::string &name, int nranks, int rank, const ncclConfig_t *config,
                    ncclComm_t *out) {
  ncclComm *c = new (std::nothrow) ncclComm{};
  if (!c) return ncclSystemError;
  c->nranks = nranks;
  c->rank = rank;
  if (config) {
    c->config = *config;
  } else {
    const ncclConfig_t defaults = NCCL_CONFIG_INITIALIZER;
    c->config = defaults;
  }
  c->name = name;
  c->slot_bytes = slot_bytes_from_env();
  c->segment_bytes = kHeaderBytes + (size_t)nranks * c->slot_bytes;
  const int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0) {
    delete c;
    return ncclSystemError;
  }
  void *map = MAP_FAILED;
  if (ftruncate(fd, (off_t)c->segment_bytes) == 0) {
    map = mmap(nullptr, c->segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  close(fd);
  if (map == MAP_FAILED) {
    delete c;
    return ncclSystemError;
  }
  c->header = static_cast<segment_header *>(map);
  c->slots = static_cast<char *>(map) + kHeaderBytes;
  if (!agree(c->header->nranks, nranks) || !agree(c->header->slot_bytes, c->slot_bytes)) {
    detach(c);
    return ncclInvalidUsage;
  }
  wait_all(c);
  if (rank == 0) shm_unlink(name.c_str());
  *out = c;
  return ncclSuccess;
}

char *slot_of(ncclComm *c, int rank) { return c->slots + (size_t)rank * c->slot_bytes; }

float load(const void *p, size_t i, ncclDataType_t type) {
  switch (type) {
    case ncclFloat16: return __half2float(static_cast<const __half *>(p)[i]);
    case ncclBfloat16: return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
    default: return static_cast<const float *>(p)[i];
  }
}

void store(void *p, size_t i, ncclDataType_t type, float v) {
  switch (type) {
    case ncclFloat16: static_cast<__half *>(p)[i] = __float2half(v); break;
    case ncclBfloat16: static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16(v); break;
    default: static_cast<float *>(p)[i] = v;
  }
}

// `a` op `b`, rounded to `type`.
float combine(float a, float b, ncclRedOp_t op, ncclDataType_t type) {
  float v = op == ncclSum ? a + b : std::fmax(a, b);
  float rounded;
  store(&rounded, 0, type, v);
  return load(&rounded, 0, type);
}

// Element `i` of every rank's slot (at byte `offset` in it) reduced in rank order into element
// `i` of `out`.
void reduce_slots(ncclComm *c, size_t offset, size_t n, ncclDataType_t type, ncclRedOp_t op,
                  void *out) {
  for (size_t i = 0; i < n; i++) {
    float acc = load(slot_of(c, 0) + offset, i, type);
    for (int k = 1; k < c->nranks; k++)
      acc = combine(acc, load(slot_of(c, k) + offset, i, type), op, type);
    store(out, i, type, acc);
  }
}

// The checks every collective makes: NCCL's own, plus none of the buffers missing.
ncclResult_t check_call(const void *send, const void *recv, size_t count, ncclDataType_t type,
                        ncclComm_t comm) {
  if (!comm || type_bytes(type) == 0) return ncclInvalidArgument;
  if (count > 0 && (!send || !recv)) return ncclInvalidArgument;
  return ncclSuccess;
}

// The collective `call` on `stream` (cuda_emu_on_stream: at once, or later on the stream's
// worker, so stage and take own what they use), in rounds of at most `per_round` elements of
// `count`: stage(off, n) fills this rank's slot, every rank waits, take(off, n) builds this
// rank's part of the result from the slots, every rank waits (so the next round may fill the
// slots again).
template <class Stage, class Take>
void in_rounds(const char *call, cudaStream_t stream, ncclComm *c, size_t count, size_t per_round,
               Stage stage, Take take) {
  cuda_emu_on_stream(stream, call, [=] {
    for (size_t off = 0; off < count; off += per_round) {
      const size_t n = std::min(per_round, count - off);
      stage(off, n);
      wait_all(c);
      take(off, n);
      wait_all(c);
    }
  });
}

// FNV-1a of `text`, naming a split's segment from its parent's name and the split.
uint64_t fnv1a(const std::string &text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : text) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// Whether `name` is on NCCL_SOCKET_IFNAME's list `list` (comma-separated; prefixes, or whole
// names when `exact`).
bool listed(const char *name, const std::string &list, bool exact) {
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(start, end - start);
    if (!item.empty() && (exact ? item == name : strncmp(name, item.c_str(), item.size()) == 0)) {
      return true;
    }
    start = end + 1;
  }
  return false;
}

// Whether NCCL_SOCKET_IFNAME (unset: any) admits an interface of this machine: NCCL's syntax,
// a list of name prefixes, '^' first to exclude them instead, then '=' for whole names.
bool socket_interface_found() {
  const char *spec = getenv("NCCL_SOCKET_IFNAME");
  if (!spec || !*spec) return true;
  const bool exclude = *spec == '^';
  if (exclude) spec++;
  const bool exact = *spec == '=';
  if (exact) spec++;
  struct if_nameindex *interfaces = if_nameindex();
  if (!interfaces) return true;  // cannot tell: NCCL would find out on the network
  bool found = false;
  for (const struct if_nameindex *i = interfaces; i->if_index != 0 && !found; i++) {
    found = listed(i->if_name, spec, exact) != exclude;
  }
  if_freenameindex(interfaces);
  return found;
}

}  // namespace

extern "C" {

const char *ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    // The invalid usages this emulation reports.
    case ncclInvalidUsage:
      return "invalid usage: NCCL_SOCKET_IFNAME names no interface of this machine, or the "
             "ranks of a communicator disagree on its size or on CUDA_EMU_NCCL_SLOT_BYTES (CUDA "
             "emulation)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

// A name no other communicator on this machine has: the process, a counter and the clock.
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId) {
  if (!uniqueId) return ncclInvalidArgument;
  if (!socket_interface_found()) return ncclInvalidUsage;
  static std::atomic<unsigned> made{0};
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  memset(uniqueId->internal, 0, sizeof uniqueId->internal);
  snprintf(uniqueId->internal, sizeof uniqueId->internal, "/cuda_emu_nccl.%d.%u.%lld.%ld",
           (int)getpid(), made++, (long long)now.tv_sec, now.tv_nsec);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config) {
  if (!comm) return ncclInvalidArgument;
  *comm = NULL;
  if (nranks < 1 || nranks > kMaxRanks || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  const ncclResult_t checked = check_config(config);
  if (checked != ncclSuccess) return checked;
  if (commId.internal[0] != '/' || !memchr(commId.internal, 0, sizeof commId.internal)) {
    return ncclInvalidArgument;  // not made by ncclGetUniqueId
  }
  if (!socket_interface_found()) return ncclInvalidUsage;
  return attach(commId.internal, nranks, rank, config, comm);
}

// Collective over `comm`: the ranks of one colour form a communicator, ranked by key (ties by
// their rank in `comm`); colour NCCL_SPLIT_NOCOLOR (-1) takes no part (*newcomm NULL). A NULL
// config inherits the parent's.
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config) {
  if (!comm || !newcomm) return ncclInvalidArgument;
  *newcomm = NULL;
  if (color < -1) return ncclInvalidArgument;
  const ncclResult_t checked = check_config(config);
  if (checked != ncclSuccess) return checked;
  segment_header *h = comm->header;
  h->split_color[comm->rank] = color;
  h->split_key[comm->rank] = key;
  wait_all(comm);
  int members = 0, new_rank = 0;
  for (int r = 0; r < comm->nranks; r++) {
    if (h->split_color[r] != color) continue;
    members++;
    const bool before = h->split_key[r] < key || (h->split_key[r] == key && r < comm->rank);
    new_rank += before;
  }
  wait_all(comm);  // the table is read: the next split may write it
  const int split = comm->splits++;
  if (color == -1) return ncclSuccess;
  char name[64];
  snprintf(name, sizeof name, "/cuda_emu_nccl.%016llx",
           (unsigned long long)fnv1a(comm->name + "/" + std::to_string(split) + "/" +
                                     std::to_string(color)));
  return attach(name, members, new_rank, config ? config : &comm->config, newcomm);
}

// Destroying waits for the collectives queued on streams (CUDA_EMU_ASYNC=1): they use the
// communicator; aborting does not.
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;  // NULL is accepted, as NCCL accepts it
  cudaDeviceSynchronize();
  detach(comm);
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm) detach(comm);
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
  if (!comm || !asyncError) return ncclInvalidArgument;
  const char *injected = getenv("CUDA_EMU_NCCL_ASYNC_ERROR");
  *asyncError = injected && strcmp(injected, "1") == 0 ? ncclRemoteError : ncclSuccess;
  return ncclSuccess;
}

// recv[k * sendcount + i] = rank k's send[i].
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  const ncclResult_t checked = check_call(sendbuff, recvbuff, sendcount, datatype, comm);
  if (checked != ncclSuccess) return checked;
  const size_t es = type_bytes(datatype);
  const char *send = static_cast<const char *>(sendbuff);
  char *recv = static_cast<char *>(recvbuff);
  in_rounds(
      "ncclAllGather", stream, comm, sendcount, comm->slot_bytes / es,
      [=](size_t off, size_t n) { memcpy(slot_of(comm, comm->rank), send + off * es, n * es); },
      [=](size_t off, size_t n) {
        for (int k = 0; k < comm->nranks; k++) {
          memcpy(recv + ((size_t)k * sendcount + off) * es, slot_of(comm, k), n * es);
        }
      });
  return ncclSuccess;
}

// recv[i] = the reduction over ranks k of rank k's send[rank * recvcount + i]; each round
// stages, for every destination rank, its next elements.
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  const ncclResult_t checked = check_call(sendbuff, recvbuff, recvcount, datatype, comm);
  if (checked != ncclSuccess) return checked;
  if (!op_valid(op)) return ncclInvalidArgument;
  const size_t es = type_bytes(datatype);
  const char *send = static_cast<const char *>(sendbuff);
  char *recv = static_cast<char *>(recvbuff);
  in_rounds(
      "ncclReduceScatter", stream, comm, recvcount, comm->slot_bytes / (es * (size_t)comm->nranks),
      [=](size_t off, size_t n) {
        char *mine = slot_of(comm, comm->rank);
        for (int j = 0; j < comm->nranks; j++) {
          memcpy(mine + (size_t)j * n * es, send + ((size_t)j * recvcount + off) * es, n * es);
        }
      },
      [=](size_t off, size_t n) {
        reduce_slots(comm, (size_t)comm->rank * n * es, n, datatype, op, recv + off * es);
      });
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  const ncclResult_t checked = check_call(sendbuff, recvbuff, count, datatype, comm);
  if (checked != ncclSuccess) return checked;
  if (!op_valid(op)) return ncclInvalidArgument;
  const size_t es = type_bytes(datatype);
  const char *send = static_cast<const char *>(sendbuff);
  char *recv = static_cast<char *>(recvbuff);
  in_rounds(
      "ncclAllReduce", stream, comm, count, comm->slot_bytes / es,
      [=](size_t off, size_t n) { memcpy(slot_of(comm, comm->rank), send + off * es, n * es); },
      [=](size_t off, size_t n) { reduce_slots(comm, 0, n, datatype, op, recv + off * es); });
  return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  if (comm && (root < 0 || root >= comm->nranks)) return ncclInvalidArgument;
  const bool sends = comm && comm->rank == root;
  const ncclResult_t checked =
      check_call(sends ? sendbuff : recvbuff, recvbuff, count, datatype, comm);
  if (checked != ncclSuccess) return checked;
  const size_t es = type_bytes(datatype);
  in_rounds(
      "ncclBroadcast", stream, comm, count, comm->slot_bytes / es,
      [=](size_t off, size_t n) {
        if (!sends) return;
        memcpy(slot_of(comm, root), static_cast<const char *>(sendbuff) + off * es, n * es);
      },
      [=](size_t off, size_t n) {
        memcpy(static_cast<char *>(recvbuff) + off * es, slot_of(comm, root), n * es);
      });
  return ncclSuccess;
}

}  // extern "C"
