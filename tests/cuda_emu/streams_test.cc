// streams_test.cc - the CUDA emulation's asynchronous streams (CUDA_EMU_ASYNC=1,
// tools/cuda_emu/src/streams.h): work on a stream runs later than its call and concurrently with
// other streams, ordered against them only by events and host waits, as on a GPU. A kernel that
// sleeps 500 ms holds a stream back, so each order below is the only one possible, or the one
// a missing wait gives (with half a second of room for a loaded machine): a copy on another stream
// that does not wait for it reads the old value, and one that waits reads the new; the host reads a
// pinned buffer's old value until it synchronises; copies into pageable memory are complete, and
// copies from it have read their source, when they return; event queries (whose "not ready" is the
// thread's last error too, as CUDA's), timings and synchronisations, device synchronisation (a
// destroyed stream's work included), cudaFree's wait, a chain of events across two streams; the
// NULL stream runs at once.
#include <stdio.h>
#include <stdlib.h>

#include <chrono>
#include <functional>
#include <thread>

#include "cuda_runtime.h"
#include "tests/testing.h"

namespace {

constexpr auto kHold = std::chrono::milliseconds(500);

// A kernel on `stream` that sleeps kHold, then stores `value` at device address `at`.
void slow_store(cudaStream_t stream, int *at, int value) {
  cuda_emu_launch("slow_store", dim3(1), dim3(1), 0, stream, [at, value] {
    std::this_thread::sleep_for(kHold);
    *at = value;
  });
}

// A kernel on `stream` that stores *from + 1 at `to`.
void increment(cudaStream_t stream, const int *from, int *to) {
  cuda_emu_launch("increment", dim3(1), dim3(1), 0, stream, [from, to] { *to = *from + 1; });
}

int read_device(const int *at) {
  int value = -1;
  cudaMemcpy(&value, at, sizeof value, cudaMemcpyDeviceToHost);
  return value;
}

int *device_zeros(int count) {
  void *p = nullptr;
  CHECK_EQ_INT(cudaMalloc(&p, sizeof(int) * (size_t)count), cudaSuccess);
  cudaMemset(p, 0, sizeof(int) * (size_t)count);
  return static_cast<int *>(p);
}

void check_copy_waits_only_for_events(cudaStream_t a, cudaStream_t b) {
  int *x = device_zeros(2), *y = x + 1;
  slow_store(a, x, 7);
  cudaMemcpyAsync(y, x, sizeof(int), cudaMemcpyDeviceToDevice, b);  // no wait: reads x early
  cudaStreamSynchronize(b);
  CHECK_EQ_INT(read_device(y), 0);
  cudaStreamSynchronize(a);
  CHECK_EQ_INT(read_device(x), 7);

  cudaEvent_t stored;
  cudaEventCreateWithFlags(&stored, cudaEventDisableTiming);
  slow_store(a, x, 8);
  cudaEventRecord(stored, a);
  cudaStreamWaitEvent(b, stored, 0);
  cudaMemcpyAsync(y, x, sizeof(int), cudaMemcpyDeviceToDevice, b);
  cudaStreamSynchronize(b);
  CHECK_EQ_INT(read_device(y), 8);
  cudaEventDestroy(stored);
  cudaFree(x);
}

void check_host_copies(cudaStream_t a) {
  int *x = device_zeros(1);
  int *pinned = nullptr;
  CHECK_EQ_INT(cudaMallocHost((void **)&pinned, sizeof(int)), cudaSuccess);
  *pinned = -5;
  slow_store(a, x, 3);
  cudaMemcpyAsync(pinned, x, sizeof(int), cudaMemcpyDeviceToHost, a);
  CHECK_EQ_INT(*(volatile int *)pinned, -5);  // not yet: the host must wait for the stream
  cudaStreamSynchronize(a);
  CHECK_EQ_INT(*pinned, 3);

  int pageable = -5;
  slow_store(a, x, 4);
  cudaMemcpyAsync(&pageable, x, sizeof(int), cudaMemcpyDeviceToHost, a);
  CHECK_EQ_INT(pageable, 4);  // into pageable memory: complete on return

  int source = 5;
  slow_store(a, x, 0);
  cudaMemcpyAsync(x, &source, sizeof(int), cudaMemcpyHostToDevice, a);
  source = 6;  // from pageable memory: read at the call
  cudaStreamSynchronize(a);
  CHECK_EQ_INT(read_device(x), 5);
  cudaFreeHost(pinned);
  cudaFree(x);
}

void check_events(cudaStream_t a) {
  int *x = device_zeros(1);
  cudaEvent_t start, end;
  cudaEventCreate(&start);
  cudaEventCreate(&end);
  float ms = -1;
  cudaEventRecord(start, a);
  slow_store(a, x, 1);
  cudaEventRecord(end, a);
  CHECK_EQ_INT(cudaEventQuery(end), cudaErrorNotReady);
  CHECK_EQ_INT(cudaGetLastError(), cudaErrorNotReady);  // kept, as CUDA keeps it
  CHECK_EQ_INT(cudaGetLastError(), cudaSuccess);
  CHECK_EQ_INT(cudaEventElapsedTime(&ms, start, end), cudaErrorNotReady);
  CHECK_EQ_INT(cudaEventSynchronize(end), cudaSuccess);
  CHECK_EQ_INT(cudaEventQuery(end), cudaSuccess);
  CHECK_EQ_INT(read_device(x), 1);
  CHECK_EQ_INT(cudaEventElapsedTime(&ms, start, end), cudaSuccess);
  CHECK_MSG(ms >= 450.0f, "elapsed %.1f ms around a 500 ms kernel", ms);
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  cudaFree(x);
}

void check_device_waits(cudaStream_t a, cudaStream_t b) {
  int *x = device_zeros(4);
  cudaStream_t doomed;
  cudaStreamCreateWithFlags(&doomed, cudaStreamNonBlocking);
  slow_store(a, x, 1);
  slow_store(b, x + 1, 2);
  slow_store(doomed, x + 2, 3);
  cudaStreamDestroy(doomed);  // its work still runs
  CHECK_EQ_INT(cudaDeviceSynchronize(), cudaSuccess);
  CHECK_EQ_INT(read_device(x) * 100 + read_device(x + 1) * 10 + read_device(x + 2), 123);

  slow_store(a, x + 3, 4);
  cudaFree(device_zeros(1));  // waits for the device
  CHECK_EQ_INT(read_device(x + 3), 4);
  cudaFree(x);
}

// x = 1 on a (slowly), y = x + 1 on b after it, z = y + 1 on a after that: z = 3.
void check_event_chain(cudaStream_t a, cudaStream_t b) {
  int *x = device_zeros(3), *y = x + 1, *z = x + 2;
  cudaEvent_t e1, e2;
  cudaEventCreateWithFlags(&e1, cudaEventDisableTiming);
  cudaEventCreateWithFlags(&e2, cudaEventDisableTiming);
  slow_store(a, x, 1);
  cudaEventRecord(e1, a);
  cudaStreamWaitEvent(b, e1, 0);
  increment(b, x, y);
  cudaEventRecord(e2, b);
  cudaStreamWaitEvent(a, e2, 0);
  increment(a, y, z);
  cudaStreamSynchronize(a);
  CHECK_EQ_INT(read_device(z), 3);
  cudaEventDestroy(e1);
  cudaEventDestroy(e2);
  cudaFree(x);
}

void check_null_stream_runs_at_once() {
  int *x = device_zeros(1);
  slow_store(nullptr, x, 9);
  CHECK_EQ_INT(read_device(x), 9);
  cudaFree(x);
}

}  // namespace

int main() {
  setenv("CUDA_EMU_ASYNC", "1", 1);
  cudaStream_t a, b;
  cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
  check_copy_waits_only_for_events(a, b);
  check_host_copies(a);
  check_events(a);
  check_device_waits(a, b);
  check_event_chain(a, b);
  check_null_stream_runs_at_once();
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
  return test_finish("streams_test");
}
