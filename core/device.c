/* device.c - device selection, the CPU backend, and the dispatch wrappers for streams and
 * events. The CPU backend is synchronous: every enqueued operation completes before the call
 * returns, which is what lets one scheduler serve both backends. */
#include "core/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* The CPU kernels compute in fp32; bf16 and fp16 buffers are upcast for compute (fp16 trains
 * with the loss scaler, optim/loss_scaler.h). */
static int cpu_holds_params_in(int ordinal, st_dtype dtype) {
  (void)ordinal;
  return dtype == ST_FP32 || dtype == ST_BF16 || dtype == ST_FP16;
}

/* The host's memory: MemAvailable (what the kernel can hand out without swapping, page cache
 * included) and MemTotal from /proc/meminfo; where that is missing (kernels before 3.14, other
 * systems), free and physical pages from sysconf. */
static st_status cpu_memory_info(int ordinal, device_memory *out) {
  (void)ordinal;
  uint64_t available = 0, total = 0;
  FILE *meminfo = fopen("/proc/meminfo", "r");
  if (meminfo) {
    char line[256];
    unsigned long long kib;
    while (fgets(line, sizeof line, meminfo)) {
      if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) available = (uint64_t)kib * 1024;
      if (sscanf(line, "MemTotal: %llu kB", &kib) == 1) total = (uint64_t)kib * 1024;
    }
    fclose(meminfo);
  }
  const long page = sysconf(_SC_PAGESIZE), free_pages = sysconf(_SC_AVPHYS_PAGES),
             pages = sysconf(_SC_PHYS_PAGES);
  if (!available && page > 0 && free_pages > 0) available = (uint64_t)free_pages * (uint64_t)page;
  if (!total && page > 0 && pages > 0) total = (uint64_t)pages * (uint64_t)page;
  if (!available || !total) {
    return st_error(ST_ERR_UNSUPPORTED,
                    "the host's memory cannot be read (/proc/meminfo, sysconf)");
  }
  *out = (device_memory){.available = available, .total = total};
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
    .memory_info = cpu_memory_info,
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

st_status device_memory_info(const st_device *dev, device_memory *out) {
  const device_backend *b = dev->backend;
  if (!b->memory_info) {
    return st_error(ST_ERR_UNSUPPORTED, "the %s device cannot report its memory", b->name);
  }
  return b->memory_info(dev->ordinal, out);
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
