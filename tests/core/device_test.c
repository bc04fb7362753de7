/* device_test.c - proves device selection and the CPU stream/event backend of core/device.h: "cpu"
 * always gives the CPU; "auto" gives the CPU when no GPU is usable (and a GPU otherwise); "cuda"
 * without a usable GPU is ST_ERR_NO_DEVICE with a detail; an unknown request is
 * ST_ERR_INVALID_ARG; selection finds accelerators only through the registry. The CPU reports the
 * host's memory (some available, no more than the total); a backend without a memory query says it
 * cannot. On CPU streams, memcpy and memset between host, pinned and device memory land in order,
 * events report done, waits succeed, and destroy is idempotent; timed events read the host's
 * clock. */
#include "core/device.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "tests/testing.h"

static void test_select(void) {
  int gpus = device_cuda_count();
  CHECK(gpus >= 0);
  CHECK_EQ_INT(device_cuda_count(), gpus); /* the probe is stable */

  st_device cpu = device_cpu();
  CHECK(cpu.backend == &device_backend_cpu);
  char bus[DEVICE_BUS_ID_SIZE] = "x";
  CHECK_OK(device_bus_id(&cpu, bus));
  CHECK(bus[0] == '\0'); /* no bus id: not a GPU */
  CHECK_EQ_INT(cpu.backend->kind, ST_DEVICE_CPU);
  CHECK(strcmp(cpu.backend->name, "cpu") == 0);
  CHECK_EQ_INT(cpu.ordinal, 0);

  for (int local_rank = 0; local_rank < 3; local_rank++) {
    st_device dev = {0};
    CHECK_OK(device_select("cpu", local_rank, &dev));
    CHECK(dev.backend == &device_backend_cpu);
    CHECK_EQ_INT(dev.ordinal, 0);

    dev = (st_device){0};
    CHECK_OK(device_select("auto", local_rank, &dev));
    if (gpus == 0) {
      CHECK(dev.backend == &device_backend_cpu);
    } else {
      CHECK(dev.backend && dev.backend->kind == ST_DEVICE_CUDA);
      CHECK_EQ_INT(dev.ordinal, local_rank % gpus);
    }
  }

  st_device dev = {0};
  st_error_clear();
  if (gpus == 0) {
    CHECK_STATUS(device_select("cuda", 0, &dev), ST_ERR_NO_DEVICE);
    CHECK_MSG(strstr(st_last_error(), "cuda") && strstr(st_last_error(), "GPU"), "detail '%s'",
              st_last_error());
  } else {
    CHECK_OK(device_select("cuda", 0, &dev));
    CHECK(dev.backend && dev.backend->kind == ST_DEVICE_CUDA);
  }

  const char *bogus[] = {"bogus", "", "CPU", "cuda0", "gpu", "auto "};
  for (size_t i = 0; i < sizeof bogus / sizeof bogus[0]; i++) {
    st_error_clear();
    CHECK_STATUS(device_select(bogus[i], 0, &dev), ST_ERR_INVALID_ARG);
    char quoted[32];
    snprintf(quoted, sizeof quoted, "'%s'", bogus[i]);
    CHECK_MSG(strstr(st_last_error(), quoted) != NULL, "request \"%s\": detail '%s'", bogus[i],
              st_last_error());
  }
}

static void test_cpu_streams_and_events(void) {
  enum { N = 4096 };
  const st_device cpu = device_cpu();
  st_stream copy = {0}, compute = {0};
  CHECK_OK(stream_create(&cpu, &copy));
  CHECK_OK(stream_create(&cpu, &compute));
  CHECK(copy.backend == &device_backend_cpu && copy.handle != NULL);

  uint8_t *host = NULL, *pinned = NULL, *device = NULL;
  CHECK_OK(mem_alloc((void **)&host, N, MEM_HOST, MEM_WORKSPACE, NULL));
  CHECK_OK(mem_alloc((void **)&pinned, N, MEM_PINNED, MEM_COMM, &cpu));
  CHECK_OK(mem_alloc((void **)&device, N, MEM_DEVICE, MEM_PARAMS, &cpu));
  if (!host || !pinned || !device) return;
  for (int i = 0; i < N; i++) host[i] = (uint8_t)(i * 7 + 3);

  /* host -> pinned -> device, then a memset over the middle of the device copy, then back. */
  st_event copied = {0};
  CHECK_OK(event_create(&cpu, &copied));
  CHECK_OK(stream_memcpy(&copy, pinned, host, N));
  CHECK_OK(stream_memcpy(&copy, device, pinned, N));
  CHECK_OK(event_record(&copied, &copy));
  int done = 0;
  CHECK_OK(event_query(&copied, &done));
  CHECK(done); /* CPU work completes before the call returns */
  CHECK_OK(stream_wait_event(&compute, &copied));
  CHECK_OK(stream_memset(&compute, device + 1000, 0x5a, 2000));
  memset(host, 0, N);
  CHECK_OK(stream_memcpy(&compute, host, device, N));
  CHECK_OK(stream_sync(&compute));
  CHECK_OK(stream_sync(&copy));

  int wrong = 0;
  for (int i = 0; i < N; i++) {
    uint8_t want = (i >= 1000 && i < 3000) ? 0x5a : (uint8_t)(i * 7 + 3);
    wrong += host[i] != want;
  }
  CHECK_EQ_INT(wrong, 0);

  /* Zero bytes touch nothing, so no valid pointer is needed. */
  CHECK_OK(stream_memcpy(&copy, NULL, NULL, 0));
  CHECK_OK(stream_memset(&copy, NULL, 0, 0));

  event_destroy(&copied);
  CHECK(copied.backend == NULL && copied.handle == NULL);
  event_destroy(&copied);
  event_destroy(NULL);
  stream_destroy(&copy);
  stream_destroy(&compute);
  CHECK(copy.backend == NULL && copy.handle == NULL);
  stream_destroy(&copy);
  stream_destroy(NULL);

  mem_free(device);
  mem_free(pinned);
  mem_free(host);
  mem_stats stats;
  mem_stats_get(&stats);
  CHECK_EQ_INT(stats.live_blocks, 0);
}

/* A GPU older than fp16's sm_70 would answer like this. */
static int holds_all_but_fp16(int ordinal, st_dtype dtype) {
  (void)ordinal;
  return dtype != ST_FP16;
}

/* The CPU holds every dtype (bf16 and fp16 as storage, computing on fp32 copies); a device that
 * cannot hold one is refused with a message naming it, the dtype and what it can hold; a
 * backend that does not say holds fp32 only. */
static void test_param_dtypes(void) {
  const st_device cpu = device_cpu();
  for (int d = 0; d < ST_DTYPE_COUNT; d++) CHECK_OK(device_check_param_dtype(&cpu, (st_dtype)d));
  const device_backend old = {
      .name = "old", .kind = ST_DEVICE_CUDA, .holds_params_in = holds_all_but_fp16};
  const st_device dev = {.backend = &old, .ordinal = 0};
  CHECK_OK(device_check_param_dtype(&dev, ST_BF16));
  CHECK_STATUS(device_check_param_dtype(&dev, ST_FP16), ST_ERR_UNSUPPORTED);
  CHECK_MSG(strstr(st_last_error(),
                   "the old device cannot train with fp16 parameters (it can: "
                   "fp32, bf16)") != NULL,
            "detail '%s'", st_last_error());
  const device_backend silent = {.name = "silent", .kind = ST_DEVICE_CUDA};
  const st_device quiet = {.backend = &silent, .ordinal = 0};
  CHECK_STATUS(device_check_param_dtype(&quiet, ST_FP16), ST_ERR_UNSUPPORTED);
  CHECK_MSG(strstr(st_last_error(), "(it can: fp32)") != NULL, "detail '%s'", st_last_error());
}

static void test_memory_info(void) {
  const st_device cpu = device_cpu();
  device_memory m = {0};
  CHECK_OK(device_memory_info(&cpu, &m));
  CHECK(m.available > 0);
  CHECK(m.total >= m.available);
  CHECK(m.total >= (uint64_t)64 << 20); /* no host runs shardtrain in less */
  CHECK(cpu.backend->device_memory_is_host);

  const device_backend silent = {.name = "silent", .kind = ST_DEVICE_CUDA};
  const st_device dev = {.backend = &silent, .ordinal = 0};
  st_error_clear();
  CHECK_STATUS(device_memory_info(&dev, &m), ST_ERR_UNSUPPORTED);
  CHECK_MSG(strstr(st_last_error(), "silent") != NULL, "detail '%s'", st_last_error());
}

/* The registry holds accelerators only, each with a probe device_select counts it by; the CPU
 * is never listed (it is the fallback), and device_cuda_count is the probe of the one named
 * "cuda" (0 where the build has none). */
static void test_registry(void) {
  int cuda_listed = 0;
  for (const device_backend *const *b = device_accelerators; *b; b++) {
    CHECK((*b)->kind != ST_DEVICE_CPU && (*b) != &device_backend_cpu);
    CHECK((*b)->name && (*b)->probe && (*b)->bind && (*b)->bus_id);
    if (strcmp((*b)->name, "cuda") == 0) {
      cuda_listed = 1;
      CHECK_EQ_INT(device_cuda_count(), (*b)->probe());
    }
  }
  if (!cuda_listed) CHECK_EQ_INT(device_cuda_count(), 0);
}

/* Timed CPU events read the host clock at each record: later minus earlier is >= 0 and the
 * reverse its negation; an untimed event cannot be timed, nor can a backend without timing
 * create a timed one. The CPU has no product name. */
static void test_cpu_timed_events(void) {
  const st_device cpu = device_cpu();
  char name[DEVICE_NAME_SIZE] = "x";
  CHECK_OK(device_product_name(&cpu, name));
  CHECK(name[0] == '\0');
  st_stream s = {0};
  st_event first = {0}, second = {0}, plain = {0};
  CHECK_OK(stream_create(&cpu, &s));
  CHECK_OK(event_create_timed(&cpu, &first));
  CHECK_OK(event_create_timed(&cpu, &second));
  CHECK_OK(event_create(&cpu, &plain));
  CHECK_OK(event_record(&first, &s));
  CHECK_OK(event_record(&plain, &s));
  CHECK_OK(event_record(&second, &s));
  double forward = -1, backward = 1;
  CHECK_OK(event_elapsed_ms(&first, &second, &forward));
  CHECK_OK(event_elapsed_ms(&second, &first, &backward));
  CHECK(forward >= 0);
  CHECK(backward == -forward);
  CHECK_STATUS(event_elapsed_ms(&first, &plain, &forward), ST_ERR_INVALID_ARG);
  event_destroy(&plain);
  event_destroy(&second);
  event_destroy(&first);
  stream_destroy(&s);

  const device_backend silent = {.name = "silent", .kind = ST_DEVICE_CUDA};
  const st_device dev = {.backend = &silent, .ordinal = 0};
  st_event e = {0};
  CHECK_STATUS(event_create_timed(&dev, &e), ST_ERR_UNSUPPORTED);
  CHECK_MSG(strstr(st_last_error(), "silent") != NULL, "detail '%s'", st_last_error());
}

int main(void) {
  test_registry();
  test_select();
  test_param_dtypes();
  test_memory_info();
  test_cpu_streams_and_events();
  test_cpu_timed_events();
  return test_finish("device_test");
}
