// launch.cc (CUDA emulation) - runs a kernel launch on the CPU: the launcher, the built-in
// indices, the barriers and the warp exchange of include/cuda_emu_device.h.
//
// A launch runs its blocks one after another on the calling thread. A block's CUDA threads are
// fibers, each on a stack of its own (CUDA_EMU_STACK_KIB, default 256, with a guard page),
// switched by a few instructions of x86-64 assembly (ucontext's swapcontext makes a system call
// each time, and a block switches hundreds of thousands of times) and only at barriers: a fiber
// runs until it waits at __syncthreads or __syncwarp (a shuffle is two warp barriers around an
// exchange slot) or returns. A warp barrier opens when every lane of the warp that has not returned
// waits at it, the block barrier when every thread that has not returned does, as CUDA's barriers
// count threads that have exited as arrived. Which waiting fiber runs next is drawn from a
// generator seeded by CUDA_EMU_SEED (default 1), so a kernel that reads another thread's write
// without a barrier between them can be caught by running under several seeds, and one seed always
// gives the same result. Barriers that can never open (some threads at __syncthreads, the others of
// a warp at
// __syncwarp) abort with the kernel's name and every thread's state.
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <random>
#include <vector>

#include "cuda_runtime.h"

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

void cuda_emu_set_error(cudaError_t err);  // runtime.cc

namespace {

enum class State { kReady, kAtBlock, kAtWarp, kDone };

struct Fiber {
  void *sp;  // the stack pointer it resumes from
  State state;
};

// A fiber's stack with a PROT_NONE guard page below it: an overflow faults at once.
struct Stack {
  char *base = nullptr;
  size_t bytes = 0;
};

size_t stack_bytes() {
  const char *text = getenv("CUDA_EMU_STACK_KIB");
  const long kib = text && *text ? atol(text) : 256;
  return (size_t)(kib > 16 ? kib : 16) * 1024;
}

Stack map_stack() {
  const size_t page = 4096, bytes = stack_bytes();
  void *p = mmap(nullptr, bytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    fprintf(stderr, "cuda_emu: cannot map a %zu-byte fiber stack\n", bytes);
    abort();
  }
  mprotect(p, page, PROT_NONE);
  return Stack{static_cast<char *>(p) + page, bytes};
}

std::vector<Stack> stacks;  // reused by every launch (launches run one at a time)

struct Launch {
  const char *name;
  dim3 grid, block;
  unsigned threads;
  const std::function<void()> *body;
  std::vector<Fiber> fibers;
  std::vector<uint64_t> slots;     // the warp exchange: one per thread
  int any[2];                      // __syncthreads_or, alternating between calls
  std::vector<unsigned> calls_or;  // each thread's count of its __syncthreads_or calls
  unsigned running;
  void *scheduler;  // the launching thread's stack pointer while a fiber runs
  std::mt19937 order;
};

thread_local Launch *current = nullptr;

}  // namespace

// cuda_emu_switch(save, to): saves the callee-saved registers on this stack and the stack
// pointer in *save, then resumes the stack `to` left by an earlier switch (or prepared by
// fiber_stack_start).
extern "C" void cuda_emu_switch(void **save, void *to);
#if defined(__x86_64__)
asm(R"(
  .text
  .globl cuda_emu_switch
  .type cuda_emu_switch, @function
cuda_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size cuda_emu_switch, .-cuda_emu_switch
)");
#else
#error "the CUDA emulation switches fibers with x86-64 assembly only"
#endif

namespace {

[[noreturn]] void fiber_entry() {
  Launch *l = current;
  (*l->body)();
  Fiber &f = l->fibers[l->running];
  f.state = State::kDone;
  cuda_emu_switch(&f.sp, l->scheduler);
  abort();  // a returned fiber is never resumed
}

// A fresh stack whose first switch "returns" into fiber_entry as if it had been called: the
// entry address under six zero registers, a zero return address above, 16-byte aligned.
void *fiber_stack_start(const Stack &s) {
  uintptr_t top = (reinterpret_cast<uintptr_t>(s.base) + s.bytes) & ~(uintptr_t)15;
  void **sp = reinterpret_cast<void **>(top);
  *--sp = nullptr;
  *--sp = reinterpret_cast<void *>(&fiber_entry);
  for (int r = 0; r < 6; r++) *--sp = nullptr;
  return sp;
}

// Parks the running fiber in `state` until the scheduler releases it.
void park(State state) {
  Launch *l = current;
  Fiber &f = l->fibers[l->running];
  f.state = state;
  cuda_emu_switch(&f.sp, l->scheduler);
}

void enter(Launch *l, unsigned rank) {
  l->running = rank;
  threadIdx =
      uint3{rank % l->block.x, rank / l->block.x % l->block.y, rank / (l->block.x * l->block.y)};
  Fiber &f = l->fibers[rank];
  f.state = State::kReady;
  cuda_emu_switch(&l->scheduler, f.sp);
}

const char *state_name(State s) {
  switch (s) {
    case State::kReady: return "running";
    case State::kAtBlock: return "__syncthreads";
    case State::kAtWarp: return "__syncwarp";
    case State::kDone: return "returned";
  }
  return "?";
}

[[noreturn]] void deadlock(const Launch *l) {
  fprintf(stderr, "cuda_emu: %s, block (%u, %u, %u): barriers that cannot open:\n", l->name,
          blockIdx.x, blockIdx.y, blockIdx.z);
  for (unsigned t = 0; t < l->threads; t++) {
    fprintf(stderr, "  thread %u: %s\n", t, state_name(l->fibers[t].state));
  }
  abort();
}

// Opens the warp barriers every live lane has reached, else the block barrier when every live
// thread has reached it; false when all have returned.
bool release(Launch *l) {
  bool any_waiting = false, opened = false;
  for (unsigned w = 0; w * 32 < l->threads; w++) {
    const unsigned end = std::min(l->threads, w * 32 + 32);
    bool all = true, some = false;
    for (unsigned t = w * 32; t < end; t++) {
      const State s = l->fibers[t].state;
      some |= s == State::kAtWarp;
      all &= s == State::kAtWarp || s == State::kDone;
    }
    if (some && all) {
      for (unsigned t = w * 32; t < end; t++) {
        if (l->fibers[t].state == State::kAtWarp) l->fibers[t].state = State::kReady;
      }
      opened = true;
    }
    any_waiting |= some;
  }
  if (opened) return true;
  bool at_block = true, some_block = false;
  for (const Fiber &f : l->fibers) {
    some_block |= f.state == State::kAtBlock;
    at_block &= f.state == State::kAtBlock || f.state == State::kDone;
  }
  if (some_block && at_block) {
    for (Fiber &f : l->fibers) {
      if (f.state == State::kAtBlock) f.state = State::kReady;
    }
    return true;
  }
  if (some_block || any_waiting) deadlock(l);
  return false;
}

void run_block(Launch *l) {
  for (unsigned t = 0; t < l->threads; t++) {
    l->fibers[t].sp = fiber_stack_start(stacks[t]);
    l->fibers[t].state = State::kReady;
  }
  l->any[0] = l->any[1] = 0;
  std::fill(l->calls_or.begin(), l->calls_or.end(), 0u);
  std::vector<unsigned> ready;
  do {
    for (;;) {
      ready.clear();
      for (unsigned t = 0; t < l->threads; t++) {
        if (l->fibers[t].state == State::kReady) ready.push_back(t);
      }
      if (ready.empty()) break;
      std::shuffle(ready.begin(), ready.end(), l->order);
      for (unsigned t : ready) enter(l, t);
    }
  } while (release(l));
}

bool valid_configuration(dim3 grid, dim3 block) {
  const uint64_t threads = (uint64_t)block.x * block.y * block.z;
  return threads >= 1 && threads <= 1024 && block.z <= 64 && grid.x >= 1 && grid.y >= 1 &&
         grid.z >= 1 && grid.x <= 2147483647u && grid.y <= 65535 && grid.z <= 65535;
}

unsigned seed() {
  const char *text = getenv("CUDA_EMU_SEED");
  return text && *text ? (unsigned)atol(text) : 1u;
}

std::mutex launch_lock;  // one launch at a time: __shared__ variables are statics

}  // namespace

void __syncthreads() { park(State::kAtBlock); }

int __syncthreads_or(int predicate) {
  Launch *l = current;
  const unsigned rank = cuda_emu_thread_rank(), parity = l->calls_or[rank]++ % 2;
  if (rank == 0) l->any[1 - parity] = 0;  // the previous call is over for everyone
  if (predicate) l->any[parity] = 1;
  park(State::kAtBlock);
  const int result = l->any[parity];
  park(State::kAtBlock);
  return result;
}

void __syncwarp(unsigned mask) {
  (void)mask;
  park(State::kAtWarp);
}

uint64_t cuda_emu_exchange(uint64_t value, unsigned lane) {
  Launch *l = current;
  const unsigned rank = cuda_emu_thread_rank(), from = rank / 32 * 32 + lane;
  l->slots[rank] = value;
  park(State::kAtWarp);
  const uint64_t out = from < l->threads ? l->slots[from] : value;
  park(State::kAtWarp);
  return out;
}

void cuda_emu_launch(const char *name, dim3 grid, dim3 block, size_t shared_bytes,
                     cudaStream_t stream, const std::function<void()> &body) {
  (void)stream;
  if (!valid_configuration(grid, block) || shared_bytes > 48 * 1024) {
    cuda_emu_set_error(cudaErrorInvalidConfiguration);
    return;
  }
  std::lock_guard<std::mutex> serial(launch_lock);
  Launch l;
  l.name = name;
  l.grid = grid;
  l.block = block;
  l.threads = block.x * block.y * block.z;
  l.body = &body;
  l.fibers.resize(l.threads);
  l.slots.resize(l.threads);
  l.calls_or.resize(l.threads);
  l.order.seed(seed());
  while (stacks.size() < l.threads) stacks.push_back(map_stack());
  Launch *outer = current;
  current = &l;
  blockDim = block;
  gridDim = grid;
  const uint64_t blocks = (uint64_t)grid.x * grid.y * grid.z;
  for (uint64_t b = 0; b < blocks; b++) {
    blockIdx = uint3{(unsigned)(b % grid.x), (unsigned)(b / grid.x % grid.y),
                     (unsigned)(b / ((uint64_t)grid.x * grid.y))};
    run_block(&l);
  }
  current = outer;
}
