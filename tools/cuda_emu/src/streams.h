// streams.h (CUDA emulation) - streams and events, in two modes.
//
// Synchronous (the default): a call's device work runs before the call returns, on the calling
// thread, so a stream only has to exist and an event records when it was recorded.
//
// Asynchronous (CUDA_EMU_ASYNC=1): each stream created by cudaStreamCreateWithFlags has a worker
// thread that runs the stream's work in order, as a GPU runs it: later, and concurrently with the
// host and with other streams, ordered against them only by events (cudaStreamWaitEvent) and
// host waits (stream, event and device synchronisation). Before each piece of work a worker may
// sleep (up to CUDA_EMU_ASYNC_DELAY_US, default 300 microseconds, drawn from CUDA_EMU_SEED), so
// that a missing wait shows as stale data under some seeds. The legacy default stream (NULL)
// stays synchronous: the project's streams are all non-blocking, which never wait for it.
// Kernels still run one at a time (launch.cc), and while any stream works the device's memory is
// open to the host too (runtime.cc): the asynchronous mode checks order, not host access.
#ifndef CUDA_EMU_STREAMS_H
#define CUDA_EMU_STREAMS_H

#include <stdint.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

#include "cuda_runtime.h"

namespace cuda_emu {

bool async_mode();

// A stream's queue of work and its worker (asynchronous mode only).
struct Queue {
  std::mutex lock;
  std::condition_variable changed;
  std::deque<std::function<void()>> pending;
  uint64_t queued = 0, done = 0;  // pieces of work given and finished, over the stream's life
  bool closing = false;           // destroyed: the worker ends once `pending` is empty
  uint64_t random = 0;            // the worker's generator of delays
};

// Where a stream stood when an event was recorded there: reached once its queue has finished
// `position` pieces of work (at once without a queue), at time `at`.
struct Record {
  std::shared_ptr<Queue> queue;
  uint64_t position = 0;
  std::chrono::steady_clock::time_point at;
};

// Gives `work` to `queue` (it then runs inside the device's bracket on the worker) and returns
// its position: the queue has run it once `done` reaches that.
uint64_t enqueue(const std::shared_ptr<Queue> &queue, std::function<void()> work);

// A new queue with its worker started; closing it lets the worker finish what it was given and
// end (wait_all_queues waits for that work too, as cudaDeviceSynchronize waits for the work of a
// destroyed stream).
std::shared_ptr<Queue> open_queue();
void close_queue(const std::shared_ptr<Queue> &queue);

// Blocks until `queue` has finished `position` pieces of work; drain: all it was given so far.
void wait_for(Queue &queue, uint64_t position);
void drain(Queue &queue);
bool reached(Queue &queue, uint64_t position);

// Blocks until every queue whose worker runs has finished what it was given.
void wait_all_queues();

}  // namespace cuda_emu

struct CUstream_st {
  unsigned flags;
  std::shared_ptr<cuda_emu::Queue> queue;  // asynchronous mode
};

struct CUevent_st {
  unsigned flags;
  std::shared_ptr<cuda_emu::Record> last;  // the latest record; NULL: never recorded
};

#endif  // CUDA_EMU_STREAMS_H
