// launch.cc (CUDA emulation) - runs a kernel launch on the CPU: the launcher, the built-in
// indices, the barriers and the warp exchange of include/cuda_emu_device.h.
//
// A launch runs its blocks one after another on its stream (at once on the calling thread, or
// later on the stream's worker under CUDA_EMU_ASYNC=1: streams.h), one launch at a time. A
// block's CUDA threads are fibers, each on a stack of its own (CUDA_EMU_STACK_KIB, default 256,
// with a guard page), switched by a few instructions of x86-64 assembly (ucontext's swapcontext
// makes a system call each time; a block switches hundreds of thousands of times) and only at
// barriers: a fiber runs until it waits at __syncthreads or __syncwarp (a shuffle is a warp barrier
// between writing and reading an exchange slot, two slots a thread used in turn) or returns, then
// switches straight to the next fiber (the launching thread's stack gets control back when none is
// ready). A warp barrier opens when every lane of the warp that has not returned waits at it, the
// block barrier when every thread that has not returned does, as CUDA's barriers count exited
// threads as arrived. Which ready fiber runs next is drawn from a generator seeded by CUDA_EMU_SEED
// (default 1): a kernel that reads another thread's write without a barrier between them shows
// under some seeds, and one seed always gives the same result. Barriers that can never open (thread
// 0 at
// __syncthreads, the rest of its warp at __syncwarp) abort with the kernel's name and every
// thread's state. CUDA_EMU_PROFILE=1 prints each kernel's launches, blocks and seconds at exit.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>
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
  dim3 block;
  unsigned threads;
  const std::function<void()> *body;
  std::vector<Fiber> fibers;
  std::vector<uint64_t> slots;      // the warp exchange: two per thread, used in turn
  std::vector<unsigned> exchanges;  // each thread's count of its exchanges
  int any[2];                       // __syncthreads_or, alternating between calls
  std::vector<unsigned> calls_or;   // each thread's count of its __syncthreads_or calls
  unsigned running;
  void *scheduler;  // the launching thread's stack pointer while fibers run
  // The scheduler's books: the fibers free to run, and how many of each warp (and of the block)
  // wait at its barrier or have returned.
  std::vector<unsigned> ready;
  std::vector<unsigned> warp_waiting, warp_done;
  unsigned block_waiting, done;
  uint64_t order;  // splitmix64 state: which ready fiber runs next
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

void arrive(Launch *l, unsigned rank, State state);
void switch_from(Launch *l, unsigned rank);

[[noreturn]] void fiber_entry() {
  Launch *l = current;
  (*l->body)();
  const unsigned rank = l->running;
  arrive(l, rank, State::kDone);
  switch_from(l, rank);
  abort();  // a returned fiber is never resumed
}

// A fresh stack whose first switch "returns" into fiber_entry as if it had been called: the
// entry address under six zero registers, a zero return address above, 16-byte aligned. The top
// moves down by a few cache lines per fiber (`color`): stacks that all began at the same offset
// in a page would compete for the same cache sets at every switch.
void *fiber_stack_start(const Stack &s, unsigned color) {
  uintptr_t top = reinterpret_cast<uintptr_t>(s.base) + s.bytes - (color % 61) * 192;
  top &= ~(uintptr_t)15;
  void **sp = reinterpret_cast<void **>(top);
  *--sp = nullptr;
  *--sp = reinterpret_cast<void *>(&fiber_entry);
  for (int r = 0; r < 6; r++) *--sp = nullptr;
  return sp;
}

uint64_t next_random(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A ready fiber drawn at random and taken off the ready list; -1 when none is ready.
int take_ready(Launch *l) {
  if (l->ready.empty()) return -1;
  const uint64_t draw = next_random(&l->order);
  const size_t pick = (size_t)(((unsigned __int128)draw * l->ready.size()) >> 64);
  const unsigned t = l->ready[pick];
  l->ready[pick] = l->ready.back();
  l->ready.pop_back();
  return (int)t;
}

void make_running(Launch *l, unsigned rank) {
  l->running = rank;
  threadIdx =
      uint3{rank % l->block.x, rank / l->block.x % l->block.y, rank / (l->block.x * l->block.y)};
}

// The running fiber `rank` (parked or returned) hands over to the next ready fiber, or to the
// launching thread when none is ready; if it is itself the one drawn, it runs on.
void switch_from(Launch *l, unsigned rank) {
  const int next = take_ready(l);
  if (next == (int)rank) return;
  void *to = l->scheduler;
  if (next >= 0) {
    make_running(l, (unsigned)next);
    to = l->fibers[next].sp;
  }
  cuda_emu_switch(&l->fibers[rank].sp, to);
}

// Parks the running fiber at a barrier until the barrier opens.
void park(State state) {
  Launch *l = current;
  const unsigned rank = l->running;
  arrive(l, rank, state);
  switch_from(l, rank);
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

void wake(Launch *l, unsigned begin, unsigned end, State waiting) {
  for (unsigned t = begin; t < end; t++) {
    if (l->fibers[t].state == waiting) {
      l->fibers[t].state = State::kReady;
      l->ready.push_back(t);
    }
  }
}

// Thread `rank` reaches a barrier (or returns): a warp barrier opens when every lane of the
// warp that has not returned waits at it, the block barrier when every such thread does.
void arrive(Launch *l, unsigned rank, State state) {
  l->fibers[rank].state = state;
  const unsigned w = rank / 32, first = w * 32, last = std::min(l->threads, first + 32);
  if (state == State::kAtWarp) l->warp_waiting[w]++;
  if (state == State::kAtBlock) l->block_waiting++;
  if (state == State::kDone) {
    l->warp_done[w]++;
    l->done++;
  }
  if (l->warp_waiting[w] > 0 && l->warp_waiting[w] + l->warp_done[w] == last - first) {
    l->warp_waiting[w] = 0;
    wake(l, first, last, State::kAtWarp);
  }
  if (l->block_waiting > 0 && l->block_waiting + l->done == l->threads) {
    l->block_waiting = 0;
    wake(l, 0, l->threads, State::kAtBlock);
  }
}

void run_block(Launch *l) {
  l->ready.clear();
  for (unsigned t = 0; t < l->threads; t++) {
    l->fibers[t].sp = fiber_stack_start(stacks[t], t);
    l->fibers[t].state = State::kReady;
    l->ready.push_back(t);
  }
  std::fill(l->warp_waiting.begin(), l->warp_waiting.end(), 0u);
  std::fill(l->warp_done.begin(), l->warp_done.end(), 0u);
  l->block_waiting = l->done = 0;
  l->any[0] = l->any[1] = 0;
  std::fill(l->calls_or.begin(), l->calls_or.end(), 0u);
  std::fill(l->exchanges.begin(), l->exchanges.end(), 0u);
  // Every fiber starts ready; control comes back here when none is.
  const unsigned first = (unsigned)take_ready(l);
  make_running(l, first);
  cuda_emu_switch(&l->scheduler, l->fibers[first].sp);
  if (l->done != l->threads) deadlock(l);
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

// CUDA_EMU_PROFILE=1: each kernel's launches, blocks and seconds, printed at exit.
struct KernelTotals {
  uint64_t launches = 0, blocks = 0;
  double seconds = 0;
};
std::map<std::string, KernelTotals> *profile = nullptr;

void print_profile() {
  fprintf(stderr, "cuda_emu profile: seconds, launches, blocks, kernel\n");
  for (const auto &[name, k] : *profile) {
    fprintf(stderr, "%10.3f %8llu %10llu %s\n", k.seconds, (unsigned long long)k.launches,
            (unsigned long long)k.blocks, name.c_str());
  }
}

void account(const char *name, uint64_t blocks, double seconds) {
  if (!profile) {
    const char *flag = getenv("CUDA_EMU_PROFILE");
    if (!flag || strcmp(flag, "1") != 0) return;
    profile = new std::map<std::string, KernelTotals>();
    atexit(print_profile);
  }
  KernelTotals &k = (*profile)[name];
  k.launches++;
  k.blocks += blocks;
  k.seconds += seconds;
}

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
  // Slot `parity` of a thread is written again two exchanges later, after the warp barrier of the
  // next one, which every lane reaches only once it has read this one.
  const size_t parity = l->exchanges[rank]++ % 2;
  l->slots[2 * rank + parity] = value;
  park(State::kAtWarp);
  return from < l->threads ? l->slots[2 * from + parity] : value;
}

namespace {

// Runs a launch's blocks one after another, to completion (inside the device's bracket).
void run_launch(const char *name, dim3 grid, dim3 block, const std::function<void()> &body) {
  std::lock_guard<std::mutex> serial(launch_lock);
  Launch l;
  l.name = name;
  l.block = block;
  l.threads = block.x * block.y * block.z;
  l.body = &body;
  l.fibers.resize(l.threads);
  l.slots.resize(2 * (size_t)l.threads);
  l.exchanges.resize(l.threads);
  l.calls_or.resize(l.threads);
  l.warp_waiting.resize((l.threads + 31) / 32);
  l.warp_done.resize((l.threads + 31) / 32);
  l.order = seed();
  while (stacks.size() < l.threads) stacks.push_back(map_stack());
  current = &l;
  blockDim = block;
  gridDim = grid;
  const uint64_t blocks = (uint64_t)grid.x * grid.y * grid.z;
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t b = 0; b < blocks; b++) {
    blockIdx = uint3{(unsigned)(b % grid.x), (unsigned)(b / grid.x % grid.y),
                     (unsigned)(b / ((uint64_t)grid.x * grid.y))};
    run_block(&l);
  }
  current = nullptr;
  account(name, blocks,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace

void cuda_emu_launch(const char *name, dim3 grid, dim3 block, size_t shared_bytes,
                     cudaStream_t stream, const std::function<void()> &body) {
  if (!valid_configuration(grid, block) || shared_bytes > 48 * 1024) {
    cuda_emu_set_error(cudaErrorInvalidConfiguration);
    return;
  }
  // `body` owns its arguments (nvcc evaluates them into it at the launch), so it may run later.
  cuda_emu_on_stream(
      stream, "the launch of ", [name, grid, block, body] { run_launch(name, grid, block, body); },
      name);
}
