// launch_test.cc - the CUDA emulation's launcher and runtime (tools/cuda_emu/src): the built-in
// indices over 3-D grids and blocks; __syncthreads ordering shared memory; threads that return
// early not holding a barrier up; warp shuffles (a butterfly sum, a broadcast); __syncthreads_or;
// a missing barrier visible under some seed of the scheduler's order while the same kernel with
// the barrier is right under every seed; barriers that cannot open aborting; refused launch
// configurations as cudaGetLastError reports them; streams and events used after their destroy
// stopping the process; device memory accounting, host code faulting on device memory, and
// event timing rules. Kernels are plain functions launched through cuda_emu_launch, as the fake
// nvcc rewrites
// `<<<...>>>` (that rewriting: nvcc_rewrite_test.sh).
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <vector>

#include "cuda_runtime.h"
#include "tests/testing.h"

extern "C" void __asan_init(void) __attribute__((weak));  // defined when ASan is linked in

namespace {

void set_seed(unsigned seed) {
  char text[16];
  snprintf(text, sizeof text, "%u", seed);
  setenv("CUDA_EMU_SEED", text, 1);
}

// Every thread of a 3 x 2 x 2 grid of 5 x 3 x 2 blocks writes its own linear id once.
void check_indices() {
  const dim3 grid(3, 2, 2), block(5, 3, 2);
  const unsigned n = 3 * 2 * 2 * 5 * 3 * 2;
  std::vector<int> seen(n, 0);
  cuda_emu_launch("indices", grid, block, [&] {
    const unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    seen[b * blockDim.x * blockDim.y * blockDim.z + t]++;
  });
  CHECK_EQ_INT(cudaGetLastError(), cudaSuccess);
  int once = 0;
  for (int s : seen) once += s == 1;
  CHECK_EQ_INT(once, (long long)n);
}

// out = the block's values reversed through shared memory; with `barrier` false the read may
// come before the neighbour's write. Returns the number of wrong elements.
int reverse_through_shared(bool barrier, unsigned seed) {
  set_seed(seed);
  const int threads = 64, blocks = 3;
  std::vector<int> out((size_t)threads * blocks, -1);
  cuda_emu_launch("reverse", dim3(blocks), dim3(threads), [&] {
    __shared__ int tile[64];
    tile[threadIdx.x] = (int)(blockIdx.x * 1000 + threadIdx.x);
    if (barrier) __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = tile[blockDim.x - 1 - threadIdx.x];
  });
  int wrong = 0;
  for (int b = 0; b < blocks; b++) {
    for (int t = 0; t < threads; t++) wrong += out[b * threads + t] != b * 1000 + threads - 1 - t;
  }
  return wrong;
}

void check_barrier_orders_shared_memory() {
  int missing_caught = 0;
  for (unsigned seed = 1; seed <= 8; seed++) {
    CHECK_MSG(reverse_through_shared(true, seed) == 0, "with __syncthreads, seed %u", seed);
    missing_caught += reverse_through_shared(false, seed) > 0;
  }
  CHECK_MSG(missing_caught > 0, "no seed of 8 exposes a missing __syncthreads");
  set_seed(1);
}

// Half the block returns at once; the rest pass two barriers: the launch must finish.
void check_exited_threads_release_barriers() {
  std::vector<int> passed(96, 0);
  cuda_emu_launch("early exit", dim3(2), dim3(96), [&] {
    if (threadIdx.x % 2) return;
    __syncthreads();
    __syncwarp();
    __syncthreads();
    passed[threadIdx.x] += 1;
  });
  int evens = 0;
  for (int t = 0; t < 96; t++) evens += passed[t] == (t % 2 ? 0 : 2);
  CHECK_EQ_INT(evens, 96);
}

// Lane l holds l: a butterfly of xor shuffles gives every lane 0 + ... + 31; a broadcast of lane
// 7 gives every lane 7. Two full warps and a partial one of 16 lanes (its shuffles at width 16).
void check_shuffles() {
  std::vector<double> sums(80, 0.0);
  std::vector<int> broadcast(80, -1);
  cuda_emu_launch("shuffles", dim3(1), dim3(80), [&] {
    const int lane = (int)(threadIdx.x % 32), width = threadIdx.x < 64 ? 32 : 16;
    double v = lane;
    for (int off = width / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off, width);
    sums[threadIdx.x] = v;
    broadcast[threadIdx.x] = __shfl_sync(0xffffffffu, lane, 7, width);
  });
  int right = 0;
  for (int t = 0; t < 80; t++) {
    right += sums[t] == (t < 64 ? 496.0 : 120.0) && broadcast[t] == 7;
  }
  CHECK_EQ_INT(right, 80);
}

// One thread's predicate makes every thread's answer 1; then none does, and all answer 0.
void check_syncthreads_or() {
  std::vector<int> first(128, -1), second(128, -1);
  cuda_emu_launch("syncthreads_or", dim3(2), dim3(128), [&] {
    const int a = __syncthreads_or(threadIdx.x == 77);
    const int b = __syncthreads_or(0);
    if (blockIdx.x == 1) {
      first[threadIdx.x] = a;
      second[threadIdx.x] = b;
    }
  });
  int right = 0;
  for (int t = 0; t < 128; t++) right += first[t] == 1 && second[t] == 0;
  CHECK_EQ_INT(right, 128);
}

// Whether `body`, run in a child process (stderr silenced), ends it by SIGABRT within 20 s.
bool ends_by_abort(const std::function<void()> &body) {
  const pid_t child = fork();
  if (child == 0) {
    if (!freopen("/dev/null", "w", stderr)) _exit(3);
    alarm(20);
    body();
    _exit(0);
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child) return false;
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

// A kernel whose thread 0 waits at __syncthreads while its warp waits at __syncwarp: the
// process must end by SIGABRT, not hang.
void check_deadlock_aborts() {
  CHECK(ends_by_abort([] {
    cuda_emu_launch("deadlock", dim3(1), dim3(32), [] {
      if (threadIdx.x == 0) {
        __syncthreads();
      } else {
        __syncwarp();
      }
    });
  }));
}

// A stream or event used after its destroy stops the process; NULL, the legacy default stream,
// is a stream.
void check_dead_handles_abort() {
  cudaStream_t stream = nullptr;
  cudaEvent_t event = nullptr;
  CHECK_EQ_INT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  CHECK_EQ_INT(cudaEventCreate(&event), cudaSuccess);
  int ran = 0;
  cuda_emu_launch("on a live stream", dim3(1), dim3(1), 0, stream, [&] { ran++; });
  cuda_emu_launch("on the default stream", dim3(1), dim3(1), 0, nullptr, [&] { ran++; });
  CHECK_EQ_INT(ran, 2);
  CHECK_EQ_INT(cudaEventRecord(event, stream), cudaSuccess);
  CHECK_EQ_INT(cudaStreamWaitEvent(nullptr, event, 0), cudaSuccess);
  CHECK_EQ_INT(cudaStreamDestroy(stream), cudaSuccess);
  CHECK_EQ_INT(cudaEventDestroy(event), cudaSuccess);
  CHECK(ends_by_abort(
      [&] { cuda_emu_launch("on a destroyed stream", dim3(1), dim3(1), 0, stream, [] {}); }));
  CHECK(ends_by_abort([&] { cudaMemsetAsync(&ran, 0, sizeof ran, stream); }));
  CHECK(ends_by_abort([&] { cudaStreamDestroy(stream); }));
  CHECK(ends_by_abort([&] { cudaEventRecord(event, nullptr); }));
  CHECK(ends_by_abort([&] { cudaEventQuery(event); }));
  CHECK(ends_by_abort([&] { cudaStreamWaitEvent(nullptr, event, 0); }));
}

void check_configurations() {
  int ran = 0;
  cuda_emu_launch("too many threads", dim3(1), dim3(2048), [&] { ran++; });
  CHECK_EQ_INT(cudaGetLastError(), cudaErrorInvalidConfiguration);
  CHECK_EQ_INT(cudaGetLastError(), cudaSuccess);
  cuda_emu_launch("empty grid", dim3(0), dim3(32), [&] { ran++; });
  CHECK_EQ_INT(cudaGetLastError(), cudaErrorInvalidConfiguration);
  cuda_emu_launch("too much shared memory", dim3(1), dim3(32), 64 * 1024, [&] { ran++; });
  CHECK_EQ_INT(cudaGetLastError(), cudaErrorInvalidConfiguration);
  CHECK_EQ_INT(ran, 0);
}

void check_memory_and_events() {
  size_t free_before = 0, total = 0, free_after = 0;
  CHECK_EQ_INT(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  void *p = nullptr;
  CHECK_EQ_INT(cudaMalloc(&p, 1 << 20), cudaSuccess);
  CHECK_EQ_INT(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  CHECK_EQ_INT((long long)(free_before - free_after), 1 << 20);
  int local = 0;
  CHECK_EQ_INT(cudaFree(&local), cudaErrorInvalidValue);
  CHECK_EQ_INT(cudaFree(p), cudaSuccess);
  (void)cudaGetLastError();
  cudaEvent_t timed, untimed;
  CHECK_EQ_INT(cudaEventCreate(&timed), cudaSuccess);
  CHECK_EQ_INT(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming), cudaSuccess);
  float ms = -1;
  CHECK_EQ_INT(cudaEventElapsedTime(&ms, timed, timed), cudaErrorInvalidResourceHandle);
  CHECK_EQ_INT(cudaEventRecord(timed, nullptr), cudaSuccess);
  CHECK_EQ_INT(cudaEventRecord(untimed, nullptr), cudaSuccess);
  CHECK_EQ_INT(cudaEventElapsedTime(&ms, timed, untimed), cudaErrorInvalidResourceHandle);
  CHECK_EQ_INT(cudaEventElapsedTime(&ms, timed, timed), cudaSuccess);
  CHECK(ms == 0.0f);
  cudaEventDestroy(timed);
  cudaEventDestroy(untimed);
  (void)cudaGetLastError();
}

// Device memory is the device's: a kernel, a copy and a fill reach it, host code that
// dereferences it ends the process (under ASan device blocks are heap blocks, guarded by ASan
// instead, and that is not checked).
void check_host_cannot_touch_device_memory() {
  int *d = nullptr;
  CHECK_EQ_INT(cudaMalloc((void **)&d, 64 * sizeof(int)), cudaSuccess);
  if (!d) return;
  cuda_emu_launch("fill", dim3(2), dim3(32), [&] {
    const unsigned i = blockIdx.x * 32 + threadIdx.x;
    d[i] = (int)i;
  });
  int back[64] = {};
  CHECK_EQ_INT(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost), cudaSuccess);
  CHECK_EQ_INT(back[0] + back[5] + back[63], 68);
  CHECK_EQ_INT(cudaMemset(d, 0, sizeof back), cudaSuccess);
  CHECK_EQ_INT(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost), cudaSuccess);
  CHECK_EQ_INT(back[0] + back[5] + back[63], 0);
  if (!&__asan_init) {
    CHECK(ends_by_abort([&] {
      volatile int read = d[5];
      (void)read;
    }));
    CHECK(ends_by_abort([&] { d[0] = 1; }));
  }
  CHECK_EQ_INT(cudaFree(d), cudaSuccess);
}

}  // namespace

int main() {
  check_indices();
  check_barrier_orders_shared_memory();
  check_exited_threads_release_barriers();
  check_shuffles();
  check_syncthreads_or();
  check_deadlock_aborts();
  check_dead_handles_abort();
  check_configurations();
  check_memory_and_events();
  check_host_cannot_touch_device_memory();
  return test_finish("launch_test");
}
