/* device.c - device selection over the accelerators this build registers (device_registry.c)
 * with the CPU as the fallback, and the dispatch wrappers for streams and events. It calls no
 * accelerator's functions by name: it reaches them only through the registry and their
 * device_backend tables, so a backend depends on this interface and never the reverse. */
#include "core/device.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/deadline.h"
#include "core/error.h"

/* The accelerator registered under `name`, or NULL when this build has none. */
static const device_backend *accelerator(const char *name) {
  for (const device_backend *const *b = device_accelerators; *b; b++) {
    if (strcmp((*b)->name, name) == 0) return *b;
  }
  return NULL;
}

/* Devices of backend b usable now; a backend without a probe has exactly one. */
static int usable(const device_backend *b) { return b->probe ? b->probe() : 1; }

int device_cuda_count(void) {
  const device_backend *b = accelerator("cuda");
  return b ? usable(b) : 0;
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

st_status device_bus_id(const st_device *dev, char out[DEVICE_BUS_ID_SIZE]) {
  out[0] = '\0';
  const device_backend *b = dev->backend;
  return b->bus_id ? b->bus_id(dev->ordinal, out, DEVICE_BUS_ID_SIZE) : ST_OK;
}

st_status device_product_name(const st_device *dev, char out[DEVICE_NAME_SIZE]) {
  out[0] = '\0';
  const device_backend *b = dev->backend;
  return b->product_name ? b->product_name(dev->ordinal, out, DEVICE_NAME_SIZE) : ST_OK;
}

st_device device_cpu(void) { return (st_device){.backend = &device_backend_cpu, .ordinal = 0}; }

st_status device_bind(const st_device *dev) {
  return dev->backend->bind ? dev->backend->bind(dev->ordinal) : ST_OK;
}

/* Device local_rank modulo `count` (> 0) of backend b, made the thread's current one. */
static st_status take(const device_backend *b, int count, int local_rank, st_device *out) {
  const st_device dev = {.backend = b, .ordinal = local_rank % count};
  ST_CHECK(device_bind(&dev));
  *out = dev;
  return ST_OK;
}

st_status device_select(const char *request, int local_rank, st_device *out) {
  if (strcmp(request, "cpu") == 0) {
    *out = device_cpu();
    return ST_OK;
  }
  if (strcmp(request, "auto") == 0) {
    for (const device_backend *const *b = device_accelerators; *b; b++) {
      const int count = usable(*b);
      if (count > 0) return take(*b, count, local_rank, out);
    }
    *out = device_cpu();
    return ST_OK;
  }
  /* "cuda" is a request every build understands, so a CPU-only build can say why it fails. */
  if (strcmp(request, "cuda") != 0) {
    return st_error(ST_ERR_INVALID_ARG, "device '%s' is not one of cpu, cuda, auto", request);
  }
  const device_backend *b = accelerator(request);
  const int count = b ? usable(b) : 0;
  if (count == 0) {
    return st_error(ST_ERR_NO_DEVICE, "device %s requested but no usable GPU was found%s", request,
                    b ? "" : " (this build has no CUDA)");
  }
  return take(b, count, local_rank, out);
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

/* device_bound_waits's bound in seconds; 0: none. */
static _Atomic double wait_bound_s;

void device_bound_waits(double seconds) {
  double now = wait_bound_s;
  while (seconds > now && !atomic_compare_exchange_weak(&wait_bound_s, &now, seconds)) {
  }
}

void device_unbound_waits(void) { wait_bound_s = 0; }

/* wait(handle), a host wait named `call` for `backend`'s queued work, under the bound. */
static st_status bounded_wait(const device_backend *backend, st_status (*wait)(void *),
                              void *handle, const char *call) {
  const double bound = wait_bound_s;
  if (backend->kind == ST_DEVICE_CPU || bound <= 0) return wait(handle);
  char what[160];
  snprintf(what, sizeof what,
           "a host wait for the %s device's queued work (%s), which waits for the collectives "
           "queued before it,",
           backend->name, call);
  deadline d;
  const int armed = deadline_arm(&d, DEADLINE_COLLECTIVE, bound, what) == ST_OK;
  const st_status status = wait(handle);
  if (armed) deadline_disarm(&d);
  return status;
}

st_status stream_sync(const st_stream *stream) {
  return bounded_wait(stream->backend, stream->backend->stream_sync, stream->handle, "stream_sync");
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

st_status event_sync(const st_event *event) {
  if (!event->backend->event_sync) {
    return st_error(ST_ERR_UNSUPPORTED, "the %s device cannot wait for an event",
                    event->backend->name);
  }
  return bounded_wait(event->backend, event->backend->event_sync, event->handle, "event_sync");
}

st_status event_create_timed(const st_device *dev, st_event *out) {
  const device_backend *b = dev->backend;
  if (!b->timed_event_create || !b->event_elapsed_ms) {
    return st_error(ST_ERR_UNSUPPORTED, "the %s device cannot time events", b->name);
  }
  out->backend = b;
  return b->timed_event_create(&out->handle);
}

st_status event_elapsed_ms(const st_event *start, const st_event *end, double *ms) {
  return start->backend->event_elapsed_ms(start->handle, end->handle, ms);
}
