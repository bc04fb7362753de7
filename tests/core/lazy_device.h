/* lazy_device.h - a test device that gives the CPU CUDA's stream semantics, so that the GPU
 * path's ordering (events, stream waits, host syncs) runs, and can fail, where no GPU is.
 *
 * It is the CPU device (host memory, kind ST_DEVICE_CPU) with two changes. Its device
 * memory is not host memory (device_memory_is_host = 0), so the engine takes the paths it
 * takes on a GPU: staged copies, the offloaded optimizer's pinned pipeline, host reads through
 * stream copies. And its streams queue copies and fills instead of running them: queued work
 * runs only when CUDA would have to have run it (a stream or event sync, a stream waiting on an
 * event, a copy into pageable memory, a free), in stream order. A
 * missing wait or sync then reads data that is not there yet, or a buffer reused too early
 * feeds the late copy another's data, and the run's numbers differ from the CPU device's.
 *
 * As in CUDA: a copy from pageable host memory (anything not allocated on this device as
 * MEM_PINNED or MEM_DEVICE) reads its source when it is queued; a copy into pageable memory
 * runs its stream first and completes before returning; a free waits for every stream. A fill
 * of pageable memory is refused (cudaMemsetAsync cannot write it). Kernels belong on
 * the streams too: a model on this device takes the table of tests/kernels/deferred_ops.h,
 * which queues the CPU's ops as CUDA queues launches (the CPU table would run them at once,
 * ahead of the work queued before them).
 *
 * Policies: LAZY_LATEST runs queued work only when forced; LAZY_RANDOM also runs random
 * streams' copies and fills partly ahead at random points (seeded), which CUDA may do too.
 * Single-threaded: one thread calls the device at a time (the engine's contract for a device). */
#ifndef ST_TESTS_CORE_LAZY_DEVICE_H
#define ST_TESTS_CORE_LAZY_DEVICE_H

#include <stdint.h>

#include "core/device.h"

typedef enum lazy_policy { LAZY_LATEST = 0, LAZY_RANDOM = 1 } lazy_policy;

/* The device. Calling it again resets the policy, the seed and the counts; streams, events and
 * memory of an earlier call stay valid. */
st_device lazy_device(lazy_policy policy, uint64_t seed);

/* Queues fn(arg) on a stream of the lazy device, called by the host when the stream reaches it
 * (as cudaLaunchHostFunc): the stand-in for a collective. Random runs ahead stop before it and
 * before a stream wait, so such calls run only where the program forces them, at the same
 * points on every rank. */
st_status lazy_stream_host_fn(const st_stream *stream, void (*fn)(void *arg), void *arg);

/* What the device did since lazy_device: copies and fills queued, and how many of them ran at
 * a later call into the device than the one that queued them (work that was really deferred:
 * a test whose run deferred nothing proves nothing). */
typedef struct lazy_counts {
  long queued;
  long ran_late;
} lazy_counts;

lazy_counts lazy_device_counts(void);

#endif /* ST_TESTS_CORE_LAZY_DEVICE_H */
