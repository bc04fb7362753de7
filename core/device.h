/* device.h - the compute device and its streams and events, behind one backend interface.
 *
 * CPU backend: work runs synchronously, so a stream is a token, events are always complete and
 * memcpy is immediate. CUDA backend: real streams and events. Callers write one code path
 * (record, wait, sync) and never test which backend they hold. Whether a GPU is usable is
 * decided at run time: a CUDA build on a machine without a driver reports 0 GPUs and runs on
 * the CPU backend.
 */
#ifndef ST_CORE_DEVICE_H
#define ST_CORE_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"
#include "shardtrain.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mem_kind {
  MEM_HOST = 0,   /* pageable host memory */
  MEM_PINNED = 1, /* page-locked host memory (host memory on the CPU backend) */
  MEM_DEVICE = 2  /* memory of the compute device (host memory on the CPU backend) */
} mem_kind;

/* A device's memory in bytes: what new allocations could still take now, and the capacity. */
typedef struct device_memory {
  uint64_t available;
  uint64_t total;
} device_memory;

typedef struct device_backend {
  const char *name;
  st_device_kind kind;
  st_status (*raw_alloc)(mem_kind kind, size_t bytes, void **out);
  void (*raw_free)(mem_kind kind, void *ptr);
  st_status (*stream_create)(void **out);
  void (*stream_destroy)(void *stream);
  st_status (*stream_sync)(void *stream);
  /* Copies between any two of host, pinned and device memory, ordered on the stream. */
  st_status (*memcpy_async)(void *dst, const void *src, size_t bytes, void *stream);
  st_status (*memset_async)(void *dst, int value, size_t bytes, void *stream);
  st_status (*event_create)(void **out);
  void (*event_destroy)(void *event);
  st_status (*event_record)(void *event, void *stream);
  st_status (*stream_wait_event)(void *stream, void *event);
  st_status (*event_query)(void *event, int *done);
  /* Blocks the calling thread until the work recorded before the event has finished. NULL: the
   * backend cannot (event_sync refuses). */
  st_status (*event_sync)(void *event);
  /* An event that also notes when the stream reached it, for event_elapsed_ms. NULL: the
   * backend cannot time (event_create_timed refuses). */
  st_status (*timed_event_create)(void **out);
  /* Milliseconds between two completed timed events (end after start on one stream). */
  st_status (*event_elapsed_ms)(void *start, void *end, double *ms);
  /* Whether GPU `ordinal` (0 on the CPU) can train with parameters held in `dtype`. */
  int (*holds_params_in)(int ordinal, st_dtype dtype);
  /* The memory of GPU `ordinal` (0 on the CPU: the host's). NULL: the backend cannot say. */
  st_status (*memory_info)(int ordinal, device_memory *out);
  /* 1 when device memory is host RAM that host code reads and writes in place (the CPU): host
   * memory then needs no staging to meet device memory, and the two share one budget. */
  int device_memory_is_host;
  /* How many devices of this kind are usable now (0: none, e.g. no driver). NULL: one. */
  int (*probe)(void);
  /* Makes device `ordinal` the calling thread's current one. NULL: nothing to do. */
  st_status (*bind)(int ordinal);
  /* The PCI bus id of device `ordinal` ("0000:01:00.0"), which tells apart the GPUs of a node
   * as NCCL does. NULL: the backend has none (the CPU). */
  st_status (*bus_id)(int ordinal, char *out, size_t size);
  /* The product name of device `ordinal` ("NVIDIA H100 80GB HBM3"). NULL: the backend has
   * none (the CPU). */
  st_status (*product_name)(int ordinal, char *out, size_t size);
} device_backend;

typedef struct st_device {
  const device_backend *backend;
  int ordinal; /* GPU index (0 on the CPU) */
} st_device;

typedef struct st_stream {
  const device_backend *backend;
  void *handle;
} st_stream;

typedef struct st_event {
  const device_backend *backend;
  void *handle;
} st_event;

/* Number of GPUs this process can use (0 in a CPU-only build or without a driver). */
int device_cuda_count(void);

/* Chooses the compute device. `request` is "cpu", "cuda" or "auto" (cuda when a GPU is
 * usable); local_rank picks the GPU (local_rank modulo the GPU count). Asking for "cuda"
 * without a usable GPU is ST_ERR_NO_DEVICE. */
st_status device_select(const char *request, int local_rank, st_device *out);

/* Makes `dev` the calling thread's current device (device_select does it for the thread that
 * selects; another thread that launches work on it calls this first). Nothing on the CPU. */
st_status device_bind(const st_device *dev);

/* The CPU device (always available). */
st_device device_cpu(void);

/* ST_OK when `dev` can train with parameters held in `dtype`; else ST_ERR_UNSUPPORTED with a
 * message naming the device, the dtype and what the device can do. */
st_status device_check_param_dtype(const st_device *dev, st_dtype dtype);

/* The memory `dev` has now, for comparing with the planner's prediction before a run: on the
 * CPU the host's MemAvailable and MemTotal (/proc/meminfo, else sysconf; cgroup limits are not
 * read), which every rank on the node shares; on a GPU the card's free and total memory.
 * ST_ERR_UNSUPPORTED when the backend cannot say. */
st_status device_memory_info(const st_device *dev, device_memory *out);

/* Room for a PCI bus id and its terminator ("0000:01:00.0", with room for longer domains). */
#define DEVICE_BUS_ID_SIZE 32

/* dev's PCI bus id into out (DEVICE_BUS_ID_SIZE bytes); "" when its backend has none (the
 * CPU), so a non-empty id means a GPU. */
st_status device_bus_id(const st_device *dev, char out[DEVICE_BUS_ID_SIZE]);

/* Room for a device's product name and its terminator. */
#define DEVICE_NAME_SIZE 256

/* dev's product name into out (DEVICE_NAME_SIZE bytes), as its vendor's driver reports it
 * ("NVIDIA H100 80GB HBM3"); "" when its backend has none (the CPU). */
st_status device_product_name(const st_device *dev, char out[DEVICE_NAME_SIZE]);

/* Bounds every host wait for a device's queued work (stream_sync, event_sync on a device other
 * than the CPU) at `seconds`, the largest bound asked for so far (0 before any): past it the
 * watchdog of core/deadline.h ends the process with the collectives' timeout line. A GPU's
 * streams wait for the collectives queued on them, and a collective whose peer is gone never
 * finishes, where no other call would notice; so the mesh bounds the waits by its collectives'
 * timeout. The CPU's waits are no-ops and stay unbounded. */
void device_bound_waits(double seconds);
/* Lifts the bound (st_finalize: the watchdog stops, and a handle destroyed after it must not
 * start another). */
void device_unbound_waits(void);

st_status stream_create(const st_device *dev, st_stream *out);
void stream_destroy(st_stream *stream);
st_status stream_sync(const st_stream *stream);
st_status stream_memcpy(const st_stream *stream, void *dst, const void *src, size_t bytes);
st_status stream_memset(const st_stream *stream, void *dst, int value, size_t bytes);

st_status event_create(const st_device *dev, st_event *out);
void event_destroy(st_event *event);
st_status event_record(const st_event *event, const st_stream *stream);
st_status stream_wait_event(const st_stream *stream, const st_event *event);
/* *done = 1 when all work recorded before the event has finished. */
st_status event_query(const st_event *event, int *done);
/* Blocks the calling thread until all work recorded before the event has finished (an event
 * never recorded has). ST_ERR_UNSUPPORTED on a backend that cannot wait. */
st_status event_sync(const st_event *event);

/* An event that can be timed: recorded like any other, and event_elapsed_ms reads the time
 * between two of them. Separate from event_create because timing costs a little on every use
 * (CUDA: events without cudaEventDisableTiming), which synchronisation events need not pay.
 * ST_ERR_UNSUPPORTED on a backend that cannot time. */
st_status event_create_timed(const st_device *dev, st_event *out);
/* Milliseconds from `start` to `end`, two timed events recorded in that order on one stream
 * and both complete (the host has synchronised the stream): the time the stream took from
 * reaching the first to reaching the second. CUDA: cudaEventElapsedTime (about 0.5 us
 * resolution); CPU: the host clock read at each record, since the CPU runs synchronously. */
st_status event_elapsed_ms(const st_event *start, const st_event *end, double *ms);

/* The CPU backend (device_cpu.c): always present, always usable. */
extern const device_backend device_backend_cpu;

/* The accelerator backends this build has (device_registry.c), in the order "auto" tries them,
 * ending with NULL. device.c reaches them only through this list and their tables. */
extern const device_backend *const device_accelerators[];

/* Aligned pageable host memory shared by every backend (alignment 64 bytes; device_cpu.c). */
st_status host_raw_alloc(size_t bytes, void **out);

#ifdef __cplusplus
}
#endif

#endif /* ST_CORE_DEVICE_H */
