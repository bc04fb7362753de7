/* nccl.h (CUDA emulation) - the NCCL API shardtrain uses (sharding/comm_nccl.c,
 * core/check_nccl.h): creating a communicator of any number of ranks, each a process on this
 * machine (ncclGetUniqueId, ncclCommInitRankConfig, ncclCommSplit), the four collectives, which
 * run at once on the calling thread (the stream is ignored), error queries, abort and destroy.
 * src/nccl.cc, built into libnccl.so, says how.
 *
 * Not emulated: groups (ncclGroupStart/End), point-to-point, the other collectives,
 * non-blocking set-up (blocking = 0 completes at once), the data types and reduction ops
 * shardtrain does not name. */
#ifndef CUDA_EMU_NCCL_H
#define CUDA_EMU_NCCL_H

#include <cuda_runtime.h>
#include <limits.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

typedef struct ncclComm *ncclComm_t;

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

/* Only the types shardtrain names, with NCCL's values. */
typedef enum { ncclFloat16 = 6, ncclFloat32 = 7, ncclBfloat16 = 9 } ncclDataType_t;

/* Only the ops shardtrain names, with NCCL's values. */
typedef enum { ncclSum = 0, ncclMax = 2 } ncclRedOp_t;

/* A field left at its NCCL_CONFIG_UNDEF_* value takes NCCL's default. */
#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL

typedef struct ncclConfig_v21700 {
  size_t size;          /* sizeof(ncclConfig_t) */
  unsigned int magic;   /* 0xcafebeef */
  unsigned int version; /* NCCL's version code: 21805 here, as NCCL 2.18.5 */
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char *netName;
  int splitShare;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                            \
  {                                                                                        \
    sizeof(ncclConfig_t), 0xcafebeef, 21805, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, (const char *)NCCL_CONFIG_UNDEF_PTR, \
        NCCL_CONFIG_UNDEF_INT                                                              \
  }

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
const char *ncclGetErrorString(ncclResult_t result);

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* CUDA_EMU_NCCL_H */
