/* device_cuda.c - the CUDA device backend: cudaMalloc / cudaMallocHost, streams created
 * non-blocking (no implicit sync with the legacy default stream), events without timing
 * except those created to be timed.
 * Built only when the toolkit is present; at run time a missing driver shows as 0 GPUs. */
#include "core/device_cuda.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/check_cuda.h"

static int cuda_probe(void) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError(); /* clear the sticky "no driver" error */
    return 0;
  }
  return count;
}

static st_status cuda_bind(int ordinal) {
  CUDA_CHECK(cudaSetDevice(ordinal));
  return ST_OK;
}

static st_status cuda_bus_id(int ordinal, char *out, size_t size) {
  CUDA_CHECK(cudaDeviceGetPCIBusId(out, (int)size, ordinal));
  return ST_OK;
}

static st_status cuda_product_name(int ordinal, char *out, size_t size) {
  struct cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
  snprintf(out, size, "%s", prop.name);
  return ST_OK;
}

static st_status cuda_raw_alloc(mem_kind kind, size_t bytes, void **out) {
  cudaError_t err = cudaSuccess;
  switch (kind) {
    case MEM_HOST: return host_raw_alloc(bytes, out);
    case MEM_PINNED: err = cudaMallocHost(out, bytes ? bytes : 1); break;
    case MEM_DEVICE: err = cudaMalloc(out, bytes ? bytes : 1); break;
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return st_error(ST_ERR_OOM, "out of %s memory allocating %zu bytes: %s",
                    kind == MEM_DEVICE ? "device" : "pinned host", bytes, cudaGetErrorString(err));
  }
  return ST_OK;
}

static void cuda_raw_free(mem_kind kind, void *ptr) {
  switch (kind) {
    case MEM_HOST: free(ptr); break;
    case MEM_PINNED: cudaFreeHost(ptr); break;
    case MEM_DEVICE: cudaFree(ptr); break;
  }
}

static st_status cuda_stream_create(void **out) {
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  *out = s;
  return ST_OK;
}

static void cuda_stream_destroy(void *stream) { cudaStreamDestroy((cudaStream_t)stream); }

static st_status cuda_stream_sync(void *stream) {
  CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)stream));
  return ST_OK;
}

static st_status cuda_memcpy(void *dst, const void *src, size_t bytes, void *stream) {
  if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream));
  return ST_OK;
}

static st_status cuda_memset(void *dst, int value, size_t bytes, void *stream) {
  if (bytes) CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, (cudaStream_t)stream));
  return ST_OK;
}

/* Events order work without timing (cheaper to record and wait on); timed events measure. */
static st_status event_create_with(unsigned flags, void **out) {
  cudaEvent_t e;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, flags));
  *out = e;
  return ST_OK;
}

static st_status cuda_event_create(void **out) {
  return event_create_with(cudaEventDisableTiming, out);
}

static st_status cuda_timed_event_create(void **out) {
  return event_create_with(cudaEventDefault, out);
}

static st_status cuda_event_elapsed_ms(void *start, void *end, double *ms) {
  float elapsed = 0;
  CUDA_CHECK(cudaEventElapsedTime(&elapsed, (cudaEvent_t)start, (cudaEvent_t)end));
  *ms = elapsed;
  return ST_OK;
}

static void cuda_event_destroy(void *event) { cudaEventDestroy((cudaEvent_t)event); }

static st_status cuda_event_record(void *event, void *stream) {
  CUDA_CHECK(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream));
  return ST_OK;
}

static st_status cuda_stream_wait_event(void *stream, void *event) {
  CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0));
  return ST_OK;
}

static st_status cuda_event_sync(void *event) {
  CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)event));
  return ST_OK;
}

static st_status cuda_event_query(void *event, int *done) {
  cudaError_t err = cudaEventQuery((cudaEvent_t)event);
  if (err == cudaErrorNotReady) {
    /* The runtime keeps "not ready" as the thread's last error, where the next launch's
     * cudaGetLastError would report it as that launch's failure. */
    (void)cudaGetLastError();
    *done = 0;
    return ST_OK;
  }
  CUDA_CHECK(err);
  *done = 1;
  return ST_OK;
}

/* bf16 needs compute capability 8.0 (Ampere) or newer; fp16 (trained with the loss scaler,
 * optim/loss_scaler.h) 7.0 (Volta), the first with fp16 tensor cores. */
static int cuda_holds_params_in(int ordinal, st_dtype dtype) {
  if (dtype == ST_FP32) return 1;
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return (dtype == ST_BF16 && major >= 8) || (dtype == ST_FP16 && major >= 7);
}

/* cudaMemGetInfo answers for the current device: switch to `ordinal` for the query (a rank is
 * bound to its own GPU, so this is normally a no-op) and back. */
static st_status cuda_memory_info(int ordinal, device_memory *out) {
  int current = 0;
  CUDA_CHECK(cudaGetDevice(&current));
  if (current != ordinal) CUDA_CHECK(cudaSetDevice(ordinal));
  size_t free_bytes = 0, total_bytes = 0;
  cudaError_t err = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (current != ordinal) CUDA_CHECK(cudaSetDevice(current));
  CUDA_CHECK(err);
  *out = (device_memory){.available = free_bytes, .total = total_bytes};
  return ST_OK;
}

const device_backend device_backend_cuda = {
    .name = "cuda",
    .kind = ST_DEVICE_CUDA,
    .raw_alloc = cuda_raw_alloc,
    .raw_free = cuda_raw_free,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_sync = cuda_stream_sync,
    .memcpy_async = cuda_memcpy,
    .memset_async = cuda_memset,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .stream_wait_event = cuda_stream_wait_event,
    .event_query = cuda_event_query,
    .event_sync = cuda_event_sync,
    .timed_event_create = cuda_timed_event_create,
    .event_elapsed_ms = cuda_event_elapsed_ms,
    .holds_params_in = cuda_holds_params_in,
    .memory_info = cuda_memory_info,
    .device_memory_is_host = 0,
    .probe = cuda_probe,
    .bind = cuda_bind,
    .bus_id = cuda_bus_id,
    .product_name = cuda_product_name,
};
