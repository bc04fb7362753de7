/* device.c - device selection, the CPU backend, and the dispatch wrappers for streams and
 * events. The CPU backend is synchronous: every enqueued operation completes before the call
 * returns, which is what lets one scheduler serve both backends. */
#include "core/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

st_status host_raw_alloc(size_t bytes, void **out) {
  void *p = NULL;
  /* posix_memalign(0) may return NULL; one byte keeps "success means non-NULL" true. */
  if (posix_memalign(&p, 64, bytes ? bytes : 1) != 0) {
    return st_error(ST_ERR_OOM, "out of host memory allocating %zu bytes", bytes);
  }
  *out = p;
  return ST_OK;
}

static st_status cpu_raw_alloc(mem_kind kind, size_t bytes, void **out) {
  (void)kind;
  return host_raw_alloc(bytes, out);
}

static void cpu_raw_free(mem_kind kind, void *ptr) {
  (void)kind;
  free(ptr);
}

/* A CPU stream or event has no state; a non-NULL token keeps handles uniform. */
static char cpu_token;

static st_status cpu_token_create(void **out) {
  *out = &cpu_token;
  return ST_OK;
}

static void cpu_token_destroy(void *token) { (void)token; }

static st_status cpu_stream_sync(void *stream) {
  (void)stream;
  return ST_OK;
}

static st_status cpu_memcpy(void *dst, const void *src, size_t bytes, void *stream) {
  (void)stream;
  if (bytes) memmove(dst, src, bytes);
  return ST_OK;
}

static st_status cpu_memset(void *dst, int value, size_t bytes, void *stream) {
  (void)stream;
  if (bytes) memset(dst, value, bytes);
  return ST_OK;
}

static st_status cpu_event_record(void *event, void *stream) {
  (void)event;
  (void)stream;
  return ST_OK;
}

static st_status cpu_event_query(void *event, int *done) {
  (void)event;
  *done = 1;
  return ST_OK;
}

/* The CPU kernels compute in fp32; bf16 buffers are upcast for compute. fp16 would need the
 * loss scaler, which shardtrain does not have yet. */
static int cpu_holds_params_in(int ordinal, st_dtype dtype) {
  (void)ordinal;
  return dtype == ST_FP32 || dtype == ST_BF16;
}

/* MemAvailable: the kernel's estimate of what can be allocated without swapping (free memory
 * plus the reclaimable page cache), in kB. A container's own memory limit is not visible here;
 * ST_MEMORY_LIMIT_BYTES covers that case. */
static st_status cpu_mem_available(int ordinal, uint64_t *bytes) {
  (void)ordinal;
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return st_error(ST_ERR_UNSUPPORTED, "cannot open /proc/meminfo");
  char line[256];
  unsigned long long kb = 0;
  int found = 0;
  while (!found && fgets(line, sizeof line, f)) {
    found = sscanf(line, "MemAvailable: %llu kB", &kb) == 1;
  }
  fclose(f);
  if (!found) return st_error(ST_ERR_UNSUPPORTED, "/proc/meminfo has no MemAvailable line");
  *bytes = (uint64_t)kb * 1024u;
  return ST_OK;
}

const device_backend device_backend_cpu = {
    .name = "cpu",
    .kind = ST_DEVICE_CPU,
    .raw_alloc = cpu_raw_alloc,
    .raw_free = cpu_raw_free,
    .stream_create = cpu_token_create,
    .stream_destroy = cpu_token_destroy,
    .stream_sync = cpu_stream_sync,
    .memcpy_async = cpu_memcpy,
    .memset_async = cpu_memset,
    .event_create = cpu_token_create,
    .event_destroy = cpu_token_destroy,
    .event_record = cpu_event_record,
    .stream_wait_event = cpu_event_record,
    .event_query = cpu_event_query,
    .holds_params_in = cpu_holds_params_in,
    .computes_in_fp32_only = 1,
    .mem_available = cpu_mem_available,
    .device_memory_is_host = 1,
};

int device_cuda_count(void) {
#ifdef ST_HAVE_CUDA
  return device_cuda_probe();
#else
  return 0;
#endif
}

/* A backend that does not say (a test's stand-in) holds fp32 only. */
static int holds_params_in(const device_backend *b, int ordinal, st_dtype dtype) {
  return b->holds_params_in ? b->holds_params_in(ordinal, dtype) : dtype == ST_FP32;
}

st_status device_check_param_dtype(const st_device *dev, st_dtype dtype) {
  const device_backend *b = dev->backend;
  if ((unsigned)dtype < ST_DTYPE_COUNT && holds_params_in(b, dev->ordinal, dtype)) return ST_OK;
  char can[64] = "";
  for (int d = 0; d < ST_DTYPE_COUNT; d++) {
    if (!holds_params_in(b, dev->ordinal, (st_dtype)d)) continue;
    size_t used = strlen(can);
    snprintf(can + used, sizeof can - used, "%s%s", used ? ", " : "", dtype_name((st_dtype)d));
  }
  return st_error(ST_ERR_UNSUPPORTED, "the %s device cannot train with %s parameters (it can: %s)",
                  b->name, dtype_name(dtype), can);
}

st_status device_memory_available(const st_device *dev, uint64_t *bytes) {
  if (!dev->backend->mem_available) {
    return st_error(ST_ERR_UNSUPPORTED, "the %s device cannot tell its free memory",
                    dev->backend->name);
  }
  return dev->backend->mem_available(dev->ordinal, bytes);
}

st_device device_cpu(void) { return (st_device){.backend = &device_backend_cpu, .ordinal = 0}; }

st_status device_select(const char *request, int local_rank, st_device *out) {
  int want_cuda;
  if (strcmp(request, "cpu") == 0) {
    want_cuda = 0;
  } else if (strcmp(request, "cuda") == 0 || strcmp(request, "auto") == 0) {
    want_cuda = 1;
  } else {
    return st_error(ST_ERR_INVALID_ARG, "device '%s' is not one of cpu, cuda, auto", request);
  }
  int gpus = want_cuda ? device_cuda_count() : 0;
  if (gpus == 0) {
    if (strcmp(request, "cuda") == 0) {
      return st_error(ST_ERR_NO_DEVICE, "device cuda requested but no usable GPU was found%s",
#ifdef ST_HAVE_CUDA
                      ""
#else
                      " (this build has no CUDA)"
#endif
      );
    }
    *out = device_cpu();
    return ST_OK;
  }
#ifdef ST_HAVE_CUDA
  int ordinal = local_rank % gpus;
  ST_CHECK(device_cuda_bind(ordinal));
  *out = (st_device){.backend = &device_backend_cuda, .ordinal = ordinal};
  return ST_OK;
#else
  (void)local_rank;
  return st_error(ST_ERR_INTERNAL, "GPU count is non-zero in a build without CUDA");
#endif
}

st_status stream_create(const st_device *dev, st_stream *out) {
  out->backend = dev->backend;
  return dev->backend->stream_create(&out->handle);
}

void stream_destroy(st_stream *stream) {
  if (!stream || !stream->backend) return;
  stream->backend->stream_destroy(stream->handle);
  stream->backend = NULL;
  stream->handle = NULL;
}

st_status stream_sync(const st_stream *stream) {
  return stream->backend->stream_sync(stream->handle);
}

st_status stream_memcpy(const st_stream *stream, void *dst, const void *src, size_t bytes) {
  return stream->backend->memcpy_async(dst, src, bytes, stream->handle);
}

st_status stream_memset(const st_stream *stream, void *dst, int value, size_t bytes) {
  return stream->backend->memset_async(dst, value, bytes, stream->handle);
}

st_status event_create(const st_device *dev, st_event *out) {
  out->backend = dev->backend;
  return dev->backend->event_create(&out->handle);
}

void event_destroy(st_event *event) {
  if (!event || !event->backend) return;
  event->backend->event_destroy(event->handle);
  event->backend = NULL;
  event->handle = NULL;
}

st_status event_record(const st_event *event, const st_stream *stream) {
  return event->backend->event_record(event->handle, stream->handle);
}

st_status stream_wait_event(const st_stream *stream, const st_event *event) {
  return stream->backend->stream_wait_event(stream->handle, event->handle);
}

st_status event_query(const st_event *event, int *done) {
  return event->backend->event_query(event->handle, done);
}
