// cuda_emu_device.h (CUDA emulation) - what a .cu file sees of the device when the fake nvcc
// compiles it as C++20 for the CPU: the qualifiers as nothing, __shared__ as static (one block
// of a launch runs at a time), the built-in indices as thread-local variables, the vector types,
// the barriers and warp shuffles as real barriers among the OS threads that play one block's
// CUDA threads (src/runtime.cc), and the launcher the rewritten `<<<...>>>` calls.
//
// Not emulated: registers and occupancy limits, dynamic shared memory, asynchronous execution,
// atomics, cooperative groups. A barrier that not every live thread of the block (or warp)
// reaches aborts after CUDA_EMU_BARRIER_SECONDS (default 60) naming the kernel.
#ifndef CUDA_EMU_DEVICE_H
#define CUDA_EMU_DEVICE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <tuple>
#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __grid_constant__

struct uint3 {
  unsigned x, y, z;
};

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

struct alignas(16) int4 {
  int x, y, z, w;
};

inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }

extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;

inline unsigned __float_as_uint(float f) {
  unsigned u;
  memcpy(&u, &f, sizeof u);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
inline float __expf(float x) { return expf(x); }
// Round-to-nearest products and sums that a compiler may not fuse into a multiply-add: volatile
// keeps each result rounded to a float (the emulation is built without -ffast-math, and x86-64
// does float arithmetic in SSE registers, so this is what CUDA's intrinsics promise).
inline float __fmul_rn(float a, float b) {
  volatile float r = a * b;
  return r;
}
inline float __fadd_rn(float a, float b) {
  volatile float r = a + b;
  return r;
}

// This CUDA thread's place in its block and warp (x fastest, as CUDA numbers them).
inline unsigned cuda_emu_thread_rank() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
inline unsigned cuda_emu_lane() { return cuda_emu_thread_rank() % 32u; }

// Barriers of src/launch.cc over the live threads of this thread's block or warp.
void __syncthreads();
int __syncthreads_or(int predicate);
void __syncwarp(unsigned mask = 0xffffffffu);
// Lane `lane` of this warp's `value` (every lane of the warp calls it).
uint64_t cuda_emu_exchange(uint64_t value, unsigned lane);

// The `value` of lane `from` of this warp, for any type of at most 8 bytes.
template <typename T>
inline T cuda_emu_shuffle(T value, unsigned from) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "a warp shuffle of a value over 8 bytes");
  uint64_t bits = 0;
  memcpy(&bits, &value, sizeof value);
  bits = cuda_emu_exchange(bits, from);
  T out;
  memcpy(&out, &bits, sizeof out);
  return out;
}

template <typename T>
inline T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
  (void)mask;
  const unsigned lane = cuda_emu_lane();
  unsigned from = lane ^ (unsigned)lane_mask;
  if (from > (lane | (unsigned)(width - 1))) from = lane;  // a later group: its own value
  return cuda_emu_shuffle(value, from);
}

template <typename T>
inline T __shfl_sync(unsigned mask, T value, int src_lane, int width = 32) {
  (void)mask;
  const unsigned lane = cuda_emu_lane();
  return cuda_emu_shuffle(value,
                          (lane & ~(unsigned)(width - 1)) + ((unsigned)src_lane % (unsigned)width));
}

// A launch's arguments as the kernel's parameters: converted at the launch, as a call converts
// them (NULL to a pointer, an int to a float), and kept in a tuple the launch's body owns:
// cuda_emu_arguments_of(&kernel)(args...).
template <typename... P>
struct cuda_emu_arguments {
  std::tuple<std::decay_t<P>...> operator()(std::decay_t<P>... args) const { return {args...}; }
};
template <typename... P>
cuda_emu_arguments<P...> cuda_emu_arguments_of(void (*)(P...)) {
  return {};
}

// Runs `body` as a grid of `grid` blocks of `block` threads on `stream` (cuda_emu_on_stream: at
// once, or later under CUDA_EMU_ASYNC=1, so `body` owns its arguments); a configuration CUDA
// would refuse sets the error cudaGetLastError returns. `name` is the launch's text.
void cuda_emu_launch(const char *name, dim3 grid, dim3 block, size_t shared_bytes,
                     cudaStream_t stream, const std::function<void()> &body);
inline void cuda_emu_launch(const char *name, dim3 grid, dim3 block, size_t shared_bytes,
                            const std::function<void()> &body) {
  cuda_emu_launch(name, grid, block, shared_bytes, nullptr, body);
}
inline void cuda_emu_launch(const char *name, dim3 grid, dim3 block,
                            const std::function<void()> &body) {
  cuda_emu_launch(name, grid, block, 0, nullptr, body);
}

#endif  // CUDA_EMU_DEVICE_H
