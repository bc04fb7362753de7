/* device_cuda_test.c - proves the CUDA backend of core/device.h on a real GPU: device and
 * pinned memory through mem_alloc (accounted like host memory), asynchronous copies
 * host -> device -> device -> host and a memset on non-blocking streams, ordering across two
 * streams by event_record + stream_wait_event, event_query polled until the work is done,
 * and the bytes that come back; the memory query, whose free bytes drop by a block taken; timed
 * events around a copy and the GPU's product name. Prints
 * SKIP and passes where no GPU is usable. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/device.h"
#include "core/error.h"
#include "tests/testing.h"

/* Large enough that the copies are still in flight when the host first queries the event. */
enum { N = 64 << 20, HOLE_BEGIN = 12345, HOLE_BYTES = 1 << 20 };

static uint8_t pattern_byte(size_t i) { return (uint8_t)((i * 2654435761u) >> 11); }

static double seconds_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Polls the event like the scheduler does; returns 1 once it reports done (within 60 s). */
static int poll_until_done(const st_event *event, long *polls) {
  double deadline = seconds_now() + 60.0;
  int done = 0;
  *polls = 0;
  while (!done && seconds_now() < deadline) {
    st_status s = event_query(event, &done);
    if (!CHECK_MSG(s == ST_OK, "event_query: %s", st_last_error())) return 0;
    ++*polls;
  }
  return done;
}

static void test_streams_events_and_copies(const st_device *gpu) {
  mem_stats before;
  mem_stats_get(&before);

  uint8_t *src = NULL, *dst = NULL, *pageable = NULL, *d_a = NULL, *d_b = NULL;
  CHECK_OK(mem_alloc((void **)&src, N, MEM_PINNED, MEM_COMM, gpu));
  CHECK_OK(mem_alloc((void **)&dst, N, MEM_PINNED, MEM_COMM, gpu));
  CHECK_OK(mem_alloc((void **)&pageable, N, MEM_HOST, MEM_WORKSPACE, gpu));
  CHECK_OK(mem_alloc((void **)&d_a, N, MEM_DEVICE, MEM_PARAMS, gpu));
  CHECK_OK(mem_alloc((void **)&d_b, N, MEM_DEVICE, MEM_GATHERED, gpu));
  mem_stats during;
  mem_stats_get(&during);
  CHECK_EQ_INT(during.current[MEM_PARAMS] - before.current[MEM_PARAMS], N);
  CHECK_EQ_INT(during.current[MEM_GATHERED] - before.current[MEM_GATHERED], N);
  CHECK_EQ_INT(during.current[MEM_COMM] - before.current[MEM_COMM], 2 * N);
  CHECK_EQ_INT(during.live_blocks - before.live_blocks, 5);

  /* Device memory is zeroed on a stream, never at allocation. */
  void *zeroed = NULL;
  CHECK_STATUS(mem_alloc_zeroed(&zeroed, 64, MEM_DEVICE, MEM_PARAMS, gpu), ST_ERR_INVALID_ARG);
  CHECK(zeroed == NULL);

  st_stream copy = {0}, compute = {0};
  st_event uploaded = {0}, finished = {0};
  CHECK_OK(stream_create(gpu, &copy));
  CHECK_OK(stream_create(gpu, &compute));
  CHECK_OK(event_create(gpu, &uploaded));
  CHECK_OK(event_create(gpu, &finished));
  if (!src || !dst || !pageable || !d_a || !d_b || !copy.handle || !compute.handle ||
      !uploaded.handle || !finished.handle) {
    CHECK_MSG(0, "setup failed: %s", st_last_error());
    return;
  }
  for (size_t i = 0; i < N; i++) src[i] = pattern_byte(i);
  memset(dst, 0, N);

  /* copy stream: pinned -> device, then the event; compute stream: wait for it, copy
   * device -> device, punch a hole with memset, copy back to pinned memory. Nothing on the
   * compute stream may start before the upload ends, or it would copy stale device bytes. */
  CHECK_OK(stream_memcpy(&copy, d_a, src, N));
  CHECK_OK(event_record(&uploaded, &copy));
  CHECK_OK(stream_wait_event(&compute, &uploaded));
  CHECK_OK(stream_memcpy(&compute, d_b, d_a, N));
  CHECK_OK(stream_memset(&compute, d_b + HOLE_BEGIN, 0xee, HOLE_BYTES));
  CHECK_OK(stream_memcpy(&compute, dst, d_b, N));
  CHECK_OK(event_record(&finished, &compute));

  long polls = 0;
  CHECK_MSG(poll_until_done(&finished, &polls), "the event did not complete in 60 s");
  printf("event done after %ld polls\n", polls);
  int done = 0;
  CHECK_OK(event_query(&uploaded, &done));
  CHECK(done); /* recorded before `finished` was waited on, so it must be done too */

  size_t wrong = 0;
  for (size_t i = 0; i < N; i++) {
    int in_hole = i >= HOLE_BEGIN && i < HOLE_BEGIN + HOLE_BYTES;
    wrong += dst[i] != (in_hole ? 0xee : pattern_byte(i));
  }
  CHECK_MSG(wrong == 0, "%zu of %d bytes wrong after host -> device -> device -> host", wrong, N);

  /* Pageable host memory works too (the copy is staged by the driver). */
  memset(pageable, 0, N);
  CHECK_OK(stream_memcpy(&copy, pageable, d_a, N));
  CHECK_OK(stream_sync(&copy));
  wrong = 0;
  for (size_t i = 0; i < N; i++) wrong += pageable[i] != pattern_byte(i);
  CHECK_MSG(wrong == 0, "%zu of %d bytes wrong after device -> pageable host", wrong, N);

  event_destroy(&finished);
  event_destroy(&uploaded);
  stream_destroy(&compute);
  stream_destroy(&copy);
  mem_free(d_b);
  mem_free(d_a);
  mem_free(pageable);
  mem_free(dst);
  mem_free(src);
  mem_stats after;
  mem_stats_get(&after);
  CHECK_EQ_INT(after.live_blocks, before.live_blocks);
  CHECK_EQ_INT(after.total_current, before.total_current);
}

static void test_memory_info(const st_device *gpu) {
  const uint64_t block = (uint64_t)256 << 20;
  device_memory before = {0}, during = {0};
  CHECK_OK(device_memory_info(gpu, &before));
  CHECK(before.available > block && before.total >= before.available);
  CHECK(!gpu->backend->device_memory_is_host);
  void *p = NULL;
  CHECK_OK(mem_alloc(&p, block, MEM_DEVICE, MEM_WORKSPACE, gpu));
  CHECK_OK(device_memory_info(gpu, &during));
  CHECK_MSG(before.available - during.available >= block - (block >> 3),
            "free %llu -> %llu bytes after taking %llu", (unsigned long long)before.available,
            (unsigned long long)during.available, (unsigned long long)block);
  CHECK_EQ_INT(during.total, before.total);
  mem_free(p);
}

/* A timed pair around a 64 MiB device copy: the time between them is positive and, at any
 * copy speed a GPU has (over 10 GB/s), below a second; the product name is the driver's. */
static void test_timed_events(const st_device *gpu) {
  char name[DEVICE_NAME_SIZE] = "";
  CHECK_OK(device_product_name(gpu, name));
  CHECK_MSG(name[0] != '\0', "the GPU has no product name");
  printf("GPU %d: %s\n", gpu->ordinal, name);
  void *a = NULL, *b = NULL;
  st_stream s = {0};
  st_event start = {0}, end = {0};
  CHECK_OK(mem_alloc(&a, N, MEM_DEVICE, MEM_WORKSPACE, gpu));
  CHECK_OK(mem_alloc(&b, N, MEM_DEVICE, MEM_WORKSPACE, gpu));
  CHECK_OK(stream_create(gpu, &s));
  CHECK_OK(event_create_timed(gpu, &start));
  CHECK_OK(event_create_timed(gpu, &end));
  if (a && b && s.handle && start.handle && end.handle) {
    CHECK_OK(event_record(&start, &s));
    CHECK_OK(stream_memcpy(&s, b, a, N));
    CHECK_OK(event_record(&end, &s));
    CHECK_OK(stream_sync(&s));
    double ms = -1;
    CHECK_OK(event_elapsed_ms(&start, &end, &ms));
    CHECK_MSG(ms > 0 && ms < 1000, "a 64 MiB device copy took %g ms", ms);
  }
  event_destroy(&end);
  event_destroy(&start);
  stream_destroy(&s);
  mem_free(b);
  mem_free(a);
}

int main(void) {
  int gpus = device_cuda_count();
  if (gpus == 0) return test_skip("device_cuda_test", "no usable GPU (device_cuda_count() == 0)");
  st_device gpu;
  CHECK_OK(device_select("cuda", 0, &gpu));
  if (CHECK(gpu.backend && gpu.backend->kind == ST_DEVICE_CUDA)) {
    printf("%d GPU(s); testing ordinal %d\n", gpus, gpu.ordinal);
    test_streams_events_and_copies(&gpu);
    test_memory_info(&gpu);
    test_timed_events(&gpu);
  }
  return test_finish("device_cuda_test");
}
