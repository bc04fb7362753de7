/* cuda_runtime.h (CUDA emulation) - the runtime API names shardtrain calls, run on the CPU by
 * src/runtime.cc: one emulated device whose memory is host memory that host code cannot touch
 * (as on a GPU), every call synchronous (streams and events only keep their handles and record
 * times), kernels launched through the fake nvcc's rewrite of `<<<...>>>` (cuda_emu_device.h).
 * Only what the project uses is declared; the values of the enumerations are the toolkit's, and
 * the cuda_emu_ names are the emulation's own. C and C++. */
#ifndef CUDA_EMU_CUDA_RUNTIME_H
#define CUDA_EMU_CUDA_RUNTIME_H

#include <stddef.h>

#include "library_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorLaunchFailure = 719
} cudaError_t;

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;

typedef enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
} cudaMemcpyKind;

enum cudaDeviceAttr {
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76
};

#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int major, minor;
  int multiProcessorCount;
};

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device);
cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceGetPCIBusId(char *bus_id, int len, int device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);

cudaError_t cudaMalloc(void **ptr, size_t size);
cudaError_t cudaFree(void *ptr);
cudaError_t cudaMallocHost(void **ptr, size_t size);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemset(void *dst, int value, size_t count);
cudaError_t cudaMemsetAsync(void *dst, int value, size_t count, cudaStream_t stream);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);

cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);

cudaError_t cudaGetLastError(void);

const char *cudaGetErrorString(cudaError_t error);

/* The emulated device's own work on device memory (a launch, a copy or fill, a cuBLASLt matmul,
 * an NCCL collective, a cub sort) runs between these: device memory is open to the host only
 * there, so host code that reads or writes it elsewhere faults, as it would on a GPU. They nest;
 * cuda_emu_device_scope brackets a C++ block. */
void cuda_emu_device_begin(void);
void cuda_emu_device_end(void);

#ifdef __cplusplus
}

struct cuda_emu_device_scope {
  cuda_emu_device_scope() { cuda_emu_device_begin(); }
  ~cuda_emu_device_scope() { cuda_emu_device_end(); }
  cuda_emu_device_scope(const cuda_emu_device_scope &) = delete;
  cuda_emu_device_scope &operator=(const cuda_emu_device_scope &) = delete;
};

#include <functional>

/* The emulated device's work of one call on `stream` (a live stream or NULL; `call` and
 * `subject` name the call where it is not): run at once inside the device's bracket, or, under
 * CUDA_EMU_ASYNC=1 on a created stream, queued there to run later on the stream's worker. `work`
 * must own what it reads of the host's: it may run after the call has returned. */
void cuda_emu_on_stream(cudaStream_t stream, const char *call, std::function<void()> work,
                        const char *subject = "");
#endif

#if defined(__cplusplus) && defined(CUDA_EMU_DEVICE)
#include "cuda_emu_device.h"
#endif

#endif /* CUDA_EMU_CUDA_RUNTIME_H */
