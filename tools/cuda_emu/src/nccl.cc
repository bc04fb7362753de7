// nccl.cc (CUDA emulation) - libnccl.so for communicators of one rank (include/nccl.h). With a
// single rank every collective shardtrain uses is a copy of send into recv (a sum, max, or
// gather over one rank is its own input), done at once on the calling thread since device
// memory is host memory; the stream is ignored.
//
// Not emulated: more than one rank (refused with ncclInvalidUsage), groups, point-to-point,
// asynchronous errors (ncclCommGetAsyncError always reports ncclSuccess), NCCL_DEBUG output.
// Arguments NCCL refuses are refused with its status: ncclInvalidArgument for a NULL
// communicator or out pointer, a bad rank, root, type, op or configuration.
#include <nccl.h>
#include <string.h>

#include <new>

struct ncclComm {
  int nranks, rank;
  ncclConfig_t config;
};

namespace {

constexpr unsigned kConfigMagic = 0xcafebeef;

size_t type_bytes(ncclDataType_t type) {
  switch (type) {
    case ncclFloat16: return 2;
    case ncclFloat32: return 4;
    case ncclBfloat16: return 2;
  }
  return 0;  // not a type this emulation knows
}

bool op_valid(ncclRedOp_t op) {
  // NCCL's built-in ops are ncclSum 0, ncclProd 1, ncclMax 2, ncclMin 3, ncclAvg 4.
  return (int)op >= 0 && (int)op <= 4;
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

ncclResult_t new_comm(ncclComm_t *out, const ncclConfig_t *config) {
  ncclComm *comm = new (std::nothrow) ncclComm;
  if (!comm) return ncclSystemError;
  comm->nranks = 1;
  comm->rank = 0;
  if (config) {
    comm->config = *config;
  } else {
    const ncclConfig_t defaults = NCCL_CONFIG_INITIALIZER;
    comm->config = defaults;
  }
  *out = comm;
  return ncclSuccess;
}

// The one-rank collective: count elements of `type` from send to recv (in place when they are
// the same buffer).
ncclResult_t copy(const void *send, void *recv, size_t count, ncclDataType_t type,
                  ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  const size_t bytes = type_bytes(type);
  if (bytes == 0) return ncclInvalidArgument;
  if (count == 0) return ncclSuccess;
  if (!send || !recv) return ncclInvalidArgument;
  if (send != recv) memmove(recv, send, count * bytes);
  return ncclSuccess;
}

// A reduction over one rank: its input, once the op is one NCCL has.
ncclResult_t reduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                    ncclComm_t comm) {
  if (!op_valid(op)) return ncclInvalidArgument;
  return copy(send, recv, count, type, comm);
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
    // The only invalid usage this emulation reports.
    case ncclInvalidUsage:
      return "invalid usage: the CUDA emulation (tools/cuda_emu) has no multi-rank NCCL";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId) {
  if (!uniqueId) return ncclInvalidArgument;
  memset(uniqueId->internal, 0, sizeof uniqueId->internal);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config) {
  (void)commId;
  if (!comm) return ncclInvalidArgument;
  *comm = NULL;
  if (nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  const ncclResult_t checked = check_config(config);
  if (checked != ncclSuccess) return checked;
  if (nranks > 1) return ncclInvalidUsage;
  return new_comm(comm, config);
}

// Color NCCL_SPLIT_NOCOLOR (-1) takes no part: *newcomm becomes NULL. Any other colour of a
// one-rank communicator gives a one-rank communicator; config NULL inherits the parent's.
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config) {
  (void)key;
  if (!comm || !newcomm) return ncclInvalidArgument;
  *newcomm = NULL;
  if (color < -1) return ncclInvalidArgument;
  const ncclResult_t checked = check_config(config);
  if (checked != ncclSuccess) return checked;
  if (color == -1) return ncclSuccess;
  return new_comm(newcomm, config ? config : &comm->config);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;  // NULL is accepted, as NCCL accepts it
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
  if (!comm || !asyncError) return ncclInvalidArgument;
  *asyncError = ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  (void)stream;
  return copy(sendbuff, recvbuff, sendcount, datatype, comm);
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  (void)stream;
  return reduce(sendbuff, recvbuff, recvcount, datatype, op, comm);
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  (void)stream;
  return reduce(sendbuff, recvbuff, count, datatype, op, comm);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  (void)stream;
  if (comm && (root < 0 || root >= comm->nranks)) return ncclInvalidArgument;
  return copy(sendbuff, recvbuff, count, datatype, comm);
}

}  // extern "C"
