/* device_cpu.c - the CPU device backend, and the aligned host memory every backend's MEM_HOST
 * allocations share. The CPU backend is synchronous: every enqueued operation completes before
 * the call returns, which is what lets one scheduler serve both backends. It is always present
 * and always usable, so device selection falls back to it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/device.h"
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

/* A CPU stream or untimed event has no state; a non-NULL token keeps handles uniform. A timed
 * event is a cpu_timed_event of its own, told apart from the token by its address. */
static char cpu_token;

typedef struct cpu_timed_event {
  double recorded_ms; /* the host's monotonic clock at the last record */
} cpu_timed_event;

static st_status cpu_token_create(void **out) {
  *out = &cpu_token;
  return ST_OK;
}

static void cpu_token_destroy(void *token) { (void)token; }

static st_status cpu_timed_event_create(void **out) {
  cpu_timed_event *e = calloc(1, sizeof *e);
  if (!e) return st_error(ST_ERR_OOM, "out of host memory creating an event");
  *out = e;
  return ST_OK;
}

static void cpu_event_destroy(void *event) {
  if (event != &cpu_token) free(event);
}

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

/* Work before a record has already run (the CPU is synchronous), so the stream reaches the
 * event now. */
static st_status cpu_event_record(void *event, void *stream) {
  (void)stream;
  if (event != &cpu_token) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ((cpu_timed_event *)event)->recorded_ms = 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
  }
  return ST_OK;
}

static st_status cpu_stream_wait_event(void *stream, void *event) {
  (void)stream;
  (void)event;
  return ST_OK;
}

static st_status cpu_event_elapsed_ms(void *start, void *end, double *ms) {
  if (start == &cpu_token || end == &cpu_token) {
    return st_error(ST_ERR_INVALID_ARG, "event_elapsed_ms needs two timed events");
  }
  *ms = ((const cpu_timed_event *)end)->recorded_ms - ((const cpu_timed_event *)start)->recorded_ms;
  return ST_OK;
}

static st_status cpu_event_query(void *event, int *done) {
  (void)event;
  *done = 1;
  return ST_OK;
}

/* The CPU runs its streams' work when it is enqueued: every event has completed. */
static st_status cpu_event_sync(void *event) {
  (void)event;
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
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .stream_wait_event = cpu_stream_wait_event,
    .event_query = cpu_event_query,
    .event_sync = cpu_event_sync,
    .timed_event_create = cpu_timed_event_create,
    .event_elapsed_ms = cpu_event_elapsed_ms,
    .holds_params_in = cpu_holds_params_in,
    .memory_info = cpu_memory_info,
    .device_memory_is_host = 1,
};
