// runtime.cc (CUDA emulation) - the host side of the runtime API of include/cuda_runtime.h,
// on the CPU (kernel launches: launch.cc).
//
// One device (CUDA_EMU_DEVICES=0 hides it) with CUDA_EMU_MEMORY_GIB of memory (default 16),
// which is host memory the host cannot touch: the device's blocks lie in one reserved range
// (the arena, page-aligned blocks never reused) kept PROT_NONE except while the emulated device
// works on it (cuda_emu_device_begin/end: launches, copies, fills, cuBLASLt, NCCL, cub), so host
// code that dereferences a device pointer faults as on a GPU, and a handler names the address.
// A new block is filled with 0xFF bytes (NaN in every floating type), as a GPU's holds old data.
// Under AddressSanitizer (run_tests.sh with CUDA_EMU_ASAN=1) blocks are instead heap blocks,
// 256-byte aligned as cudaMalloc's and exactly as long as asked, so a kernel faults on the
// first byte past a buffer. Streams and events are synchronous, or asynchronous under
// CUDA_EMU_ASYNC=1 (streams.h): there a copy from pageable memory reads its source before the
// call returns and one into pageable memory is complete when it returns, as CUDA's are, and
// cudaFree, cudaFreeHost and cudaDeviceSynchronize wait for every stream. A stream or event used
// after it was destroyed (or never created) stops the process with a line naming the call, where
// CUDA's behaviour is undefined.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "cuda_runtime.h"
#include "streams.h"

using cuda_emu::async_mode;

namespace {

thread_local cudaError_t last_error = cudaSuccess;

cudaError_t fail(cudaError_t err) {
  last_error = err;
  return err;
}

double env_number(const char *name, double fallback) {
  const char *text = getenv(name);
  return text && *text ? atof(text) : fallback;
}

int device_count() { return (int)env_number("CUDA_EMU_DEVICES", 1); }

bool valid_device(int device) { return device >= 0 && device < device_count(); }

// ---- memory --------------------------------------------------------------------------------

std::mutex memory_lock;
std::map<const char *, size_t> device_blocks, pinned_blocks;  // by start address
size_t device_bytes = 0;

// Whether `p` lies in one of `blocks` (under memory_lock).
bool inside(const std::map<const char *, size_t> &blocks, const void *p) {
  const char *at = static_cast<const char *>(p);
  auto it = blocks.upper_bound(at);
  if (it == blocks.begin()) return false;
  --it;
  return at < it->first + (it->second ? it->second : 1);
}

size_t memory_total() { return (size_t)(env_number("CUDA_EMU_MEMORY_GIB", 16) * (1ull << 30)); }

void *aligned_block(size_t size) {
  void *p = nullptr;
  return posix_memalign(&p, 256, size ? size : 1) == 0 ? p : nullptr;
}

extern "C" void __asan_init(void) __attribute__((weak));  // defined when ASan is linked in

bool under_asan() { return &__asan_init != nullptr; }

// The range device blocks are cut from, in pages, each block's address used once: 64 times
// the device's memory of addresses (none of it committed until written). `open` counts the
// device work under way; the range is readable and writable only while it is above 0.
struct Arena {
  char *base = nullptr;
  size_t bytes = 0, used = 0;
  int open = 0;
  struct sigaction previous_handler;
};
Arena arena;
std::mutex arena_lock;  // `open` and the range's protection

constexpr size_t kPage = 4096;

// SIGSEGV: a fault inside the arena is the host touching device memory, reported and ended;
// any other goes to the handler that was there before, when the instruction faults again.
void on_fault(int signal_number, siginfo_t *info, void *context) {
  (void)signal_number;
  (void)context;
  const char *at = static_cast<const char *>(info->si_addr);
  if (arena.base && at >= arena.base && at < arena.base + arena.bytes) {
    char line[256];
    const int n = snprintf(line, sizeof line,
                           "cuda_emu: host code touched device memory at %p (byte %zu of the "
                           "device's range) outside any device call; a GPU faults there too\n",
                           info->si_addr, (size_t)(at - arena.base));
    const ssize_t written = write(STDERR_FILENO, line, (size_t)n);
    (void)written;  // nothing more to do if stderr is gone
    signal(SIGABRT, SIG_DFL);
    abort();
  }
  sigaction(SIGSEGV, &arena.previous_handler, nullptr);
}

// Reserves the arena and installs the fault handler; false when the range cannot be had.
bool arena_reserve() {
  const size_t bytes = (memory_total() + kPage - 1) / kPage * kPage * 64;
  void *p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  std::lock_guard<std::mutex> l(arena_lock);
  arena.base = static_cast<char *>(p);
  arena.bytes = bytes;
  if (arena.open > 0) mprotect(p, bytes, PROT_READ | PROT_WRITE);
  struct sigaction action = {};
  action.sa_sigaction = on_fault;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, &arena.previous_handler);
  return true;
}

// A block of `size` bytes: from the arena, or from the heap under ASan. Called under
// memory_lock.
void *device_block(size_t size) {
  if (under_asan()) return aligned_block(size);
  if (!arena.base && !arena_reserve()) return nullptr;
  const size_t pages = (size ? size + kPage - 1 : kPage) / kPage * kPage;
  if (pages > arena.bytes - arena.used) return nullptr;
  void *p = arena.base + arena.used;
  arena.used += pages;
  return p;
}

// Returns a block's pages to the system (its addresses are not given out again).
void release_device_block(void *p, size_t size) {
  if (under_asan()) {
    free(p);
    return;
  }
  madvise(p, (size + kPage - 1) / kPage * kPage, MADV_DONTNEED);
}

// ---- stream and event handles ---------------------------------------------------------------

std::mutex handle_lock;
std::unordered_set<const void *> live_handles;

void hold(const void *handle) {
  std::lock_guard<std::mutex> l(handle_lock);
  live_handles.insert(handle);
}

[[noreturn]] void dead_handle(const char *kind, const char *call, const char *subject) {
  fprintf(stderr, "cuda_emu: %s%s on a %s that was destroyed or never created\n", call, subject,
          kind);
  abort();
}

// Stops the process unless `handle` (a `kind`) is live; `call` and `subject` name what used it.
void require_live(const void *handle, const char *kind, const char *call,
                  const char *subject = "") {
  std::lock_guard<std::mutex> l(handle_lock);
  if (!live_handles.count(handle)) dead_handle(kind, call, subject);
}

void forget(const void *handle, const char *kind, const char *call) {
  std::lock_guard<std::mutex> l(handle_lock);
  if (!live_handles.erase(handle)) dead_handle(kind, call, "");
}

// A stream argument: NULL (the legacy default stream) or live.
void require_stream(cudaStream_t stream, const char *call, const char *subject = "") {
  if (stream) require_live(stream, "stream", call, subject);
}

// Host memory that is not pinned (cudaMallocHost): where CUDA's asynchronous copies are not.
bool pageable(const void *p) {
  std::lock_guard<std::mutex> l(memory_lock);
  if (inside(pinned_blocks, p)) return false;
  if (arena.base) {
    const char *at = static_cast<const char *>(p);
    if (at >= arena.base && at < arena.base + arena.bytes) return false;
  }
  return !inside(device_blocks, p);
}

// The stream's queue in the asynchronous mode; NULL where its work runs at once.
const std::shared_ptr<cuda_emu::Queue> *queue_of(cudaStream_t stream) {
  return stream && stream->queue ? &stream->queue : nullptr;
}

// cudaFree and cudaFreeHost wait for the device, as CUDA's do.
void wait_for_device() {
  if (async_mode()) cuda_emu::wait_all_queues();
}

}  // namespace

void cuda_emu_on_stream(cudaStream_t stream, const char *call, std::function<void()> work,
                        const char *subject) {
  require_stream(stream, call, subject);
  if (const auto *queue = queue_of(stream)) {
    cuda_emu::enqueue(*queue, std::move(work));
    return;
  }
  cuda_emu_device_scope device;
  work();
}

// A launch's configuration error (launch.cc), returned by the next cudaGetLastError.
void cuda_emu_set_error(cudaError_t err) { fail(err); }

extern "C" {

void cuda_emu_device_begin(void) {
  std::lock_guard<std::mutex> l(arena_lock);
  if (arena.open++ == 0 && arena.base) mprotect(arena.base, arena.bytes, PROT_READ | PROT_WRITE);
}

void cuda_emu_device_end(void) {
  std::lock_guard<std::mutex> l(arena_lock);
  if (--arena.open == 0 && arena.base) mprotect(arena.base, arena.bytes, PROT_NONE);
}

cudaError_t cudaGetDeviceCount(int *count) {
  *count = device_count();
  return *count > 0 ? cudaSuccess : fail(cudaErrorInvalidDevice);
}

static thread_local int current_device = 0;

cudaError_t cudaSetDevice(int device) {
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  memset(prop, 0, sizeof *prop);
  snprintf(prop->name, sizeof prop->name, "cuda_emu (CPU emulation of an sm_90 device)");
  prop->totalGlobalMem = memory_total();
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 4;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return cudaErrorInvalidDevice;
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = prop.multiProcessorCount; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = prop.major; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = prop.minor; return cudaSuccess;
  }
  return fail(cudaErrorInvalidValue);
}

cudaError_t cudaDeviceGetPCIBusId(char *bus_id, int len, int device) {
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  if (len < 13) return fail(cudaErrorInvalidValue);
  snprintf(bus_id, (size_t)len, "0000:%02x:00.0", device + 1);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  wait_for_device();
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
  std::lock_guard<std::mutex> l(memory_lock);
  *total_bytes = memory_total();
  *free_bytes = device_bytes < *total_bytes ? *total_bytes - device_bytes : 0;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void **ptr, size_t size) {
  std::lock_guard<std::mutex> l(memory_lock);
  *ptr = nullptr;
  if (device_bytes + size > memory_total()) return fail(cudaErrorMemoryAllocation);
  void *p = device_block(size);
  if (!p) return fail(cudaErrorMemoryAllocation);
  {
    // A GPU's new block holds whatever was there before, where the arena's fresh pages would
    // read as zeros and hide a read before the first write: all-ones bytes are NaN in every
    // floating type (and -1 in every integer), so such a read shows in the results.
    cuda_emu_device_scope device;
    memset(p, 0xFF, size);
  }
  device_blocks[static_cast<const char *>(p)] = size;
  device_bytes += size;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void *ptr) {
  if (!ptr) return cudaSuccess;
  wait_for_device();
  std::lock_guard<std::mutex> l(memory_lock);
  auto it = device_blocks.find(static_cast<const char *>(ptr));
  if (it == device_blocks.end()) return fail(cudaErrorInvalidValue);
  device_bytes -= it->second;
  release_device_block(ptr, it->second);
  device_blocks.erase(it);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void **ptr, size_t size) {
  *ptr = aligned_block(size);
  if (!*ptr) return fail(cudaErrorMemoryAllocation);
  std::lock_guard<std::mutex> l(memory_lock);
  pinned_blocks[static_cast<const char *>(*ptr)] = size;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void *ptr) {
  if (!ptr) return cudaSuccess;
  wait_for_device();
  {
    std::lock_guard<std::mutex> l(memory_lock);
    pinned_blocks.erase(static_cast<const char *>(ptr));
  }
  free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, cudaMemcpyKind kind) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return fail(cudaErrorInvalidValue);
  cuda_emu_device_scope device;
  if (count) memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  require_stream(stream, "cudaMemcpyAsync");
  const auto *queue = queue_of(stream);
  if (!queue) return cudaMemcpy(dst, src, count, kind);
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return fail(cudaErrorInvalidValue);
  if (!count) return cudaSuccess;
  if (pageable(dst)) {  // CUDA returns once a copy into pageable memory is complete
    cuda_emu::enqueue(*queue, [=] { memmove(dst, src, count); });
    cuda_emu::drain(**queue);
  } else if (pageable(src)) {  // ... and once it has read a pageable source
    auto copy = std::make_shared<std::vector<char>>(static_cast<const char *>(src),
                                                    static_cast<const char *>(src) + count);
    cuda_emu::enqueue(*queue, [=] { memcpy(dst, copy->data(), count); });
  } else {
    cuda_emu::enqueue(*queue, [=] { memmove(dst, src, count); });
  }
  return cudaSuccess;
}

cudaError_t cudaMemset(void *dst, int value, size_t count) {
  cuda_emu_device_scope device;
  if (count) memset(dst, value, count);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t count, cudaStream_t stream) {
  if (count) cuda_emu_on_stream(stream, "cudaMemsetAsync", [=] { memset(dst, value, count); });
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
  *stream = new CUstream_st{flags, async_mode() ? cuda_emu::open_queue() : nullptr};
  hold(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (!stream) return fail(cudaErrorInvalidResourceHandle);
  forget(stream, "stream", "cudaStreamDestroy");
  if (stream->queue) cuda_emu::close_queue(stream->queue);  // its work still runs, as CUDA's
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  require_stream(stream, "cudaStreamSynchronize");
  if (const auto *queue = queue_of(stream)) cuda_emu::drain(**queue);
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  (void)flags;
  require_stream(stream, "cudaStreamWaitEvent");
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  require_live(event, "event", "cudaStreamWaitEvent");
  const std::shared_ptr<cuda_emu::Record> record = event->last;  // as recorded now
  if (!record || !record->queue) return cudaSuccess;             // nothing to wait for
  if (const auto *queue = queue_of(stream)) {
    if (*queue != record->queue) {
      cuda_emu::enqueue(*queue, [record] { cuda_emu::wait_for(*record->queue, record->position); });
    }
  } else {
    cuda_emu::wait_for(*record->queue, record->position);  // the NULL stream runs at once
  }
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
  *event = new CUevent_st{flags, nullptr};
  hold(*event);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  forget(event, "event", "cudaEventDestroy");
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  require_stream(stream, "cudaEventRecord");
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  require_live(event, "event", "cudaEventRecord");
  auto record = std::make_shared<cuda_emu::Record>();
  if (const auto *queue = queue_of(stream)) {
    record->queue = *queue;
    record->position =
        cuda_emu::enqueue(*queue, [record] { record->at = std::chrono::steady_clock::now(); });
  } else {
    record->at = std::chrono::steady_clock::now();
  }
  event->last = record;
  return cudaSuccess;
}

namespace {

// Whether the work before the event's latest record has run (an event never recorded has).
bool event_reached(cudaEvent_t event) {
  const auto &r = event->last;
  return !r || !r->queue || cuda_emu::reached(*r->queue, r->position);
}

}  // namespace

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  require_live(event, "event", "cudaEventSynchronize");
  const auto &r = event->last;
  if (r && r->queue) cuda_emu::wait_for(*r->queue, r->position);
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  require_live(event, "event", "cudaEventQuery");
  // As CUDA's, "not ready" becomes the thread's last error too (a caller must clear it).
  return event_reached(event) ? cudaSuccess : fail(cudaErrorNotReady);
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  if (!start || !end) return fail(cudaErrorInvalidResourceHandle);
  require_live(start, "event", "cudaEventElapsedTime");
  require_live(end, "event", "cudaEventElapsedTime");
  // As CUDA: both recorded, neither created without timing.
  if ((start->flags | end->flags) & cudaEventDisableTiming)
    return fail(cudaErrorInvalidResourceHandle);
  if (!start->last || !end->last) return fail(cudaErrorInvalidResourceHandle);
  if (!event_reached(start) || !event_reached(end)) return fail(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(end->last->at - start->last->at).count();
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  const cudaError_t err = last_error;
  last_error = cudaSuccess;
  return err;
}

const char *cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
  }
  return "unrecognized error code";
}

}  // extern "C"
