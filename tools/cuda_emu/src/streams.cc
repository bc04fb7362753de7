// streams.cc (CUDA emulation) - the queues and workers of the asynchronous mode (streams.h).
#include "streams.h"

#include <stdlib.h>

#include <atomic>
#include <set>
#include <thread>

namespace cuda_emu {
namespace {

double env_number(const char *name, double fallback) {
  const char *text = getenv(name);
  return text && *text ? atof(text) : fallback;
}

// The queues whose workers run, for wait_all_queues. Never destroyed: a worker may still be
// leaving its queue while the process exits and destroys its statics.
std::mutex &open_lock = *new std::mutex;
std::set<std::shared_ptr<Queue>> &open_queues = *new std::set<std::shared_ptr<Queue>>;

// A delay before a piece of work: none three times in four, else up to the longest.
void maybe_sleep(Queue &queue) {
  static const double longest_us = env_number("CUDA_EMU_ASYNC_DELAY_US", 300);
  uint64_t x = queue.random;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  queue.random = x;
  if (longest_us <= 0 || (x & 3) != 0) return;
  const double us = (double)(x >> 11) / (double)(1ull << 53) * longest_us;
  std::this_thread::sleep_for(std::chrono::microseconds((long)us));
}

void run_worker(std::shared_ptr<Queue> queue) {
  for (;;) {
    std::function<void()> work;
    {
      std::unique_lock<std::mutex> l(queue->lock);
      queue->changed.wait(l, [&] { return !queue->pending.empty() || queue->closing; });
      if (queue->pending.empty()) break;
      work = std::move(queue->pending.front());
      queue->pending.pop_front();
    }
    maybe_sleep(*queue);
    {
      cuda_emu_device_scope device;
      work();
    }
    {
      std::lock_guard<std::mutex> l(queue->lock);
      queue->done++;
    }
    queue->changed.notify_all();
  }
  std::lock_guard<std::mutex> l(open_lock);
  open_queues.erase(queue);
}

}  // namespace

bool async_mode() {
  static const bool on = env_number("CUDA_EMU_ASYNC", 0) != 0;
  return on;
}

std::shared_ptr<Queue> open_queue() {
  static std::atomic<uint64_t> opened{0};
  auto queue = std::make_shared<Queue>();
  queue->random = ((uint64_t)env_number("CUDA_EMU_SEED", 1) + 1) * 0x9E3779B97F4A7C15ull ^
                  (++opened * 0xBF58476D1CE4E5B9ull);
  if (queue->random == 0) queue->random = 1;
  {
    std::lock_guard<std::mutex> l(open_lock);
    open_queues.insert(queue);
  }
  // Detached: a process that ends without destroying a stream does not wait for its worker.
  std::thread(run_worker, queue).detach();
  return queue;
}

void close_queue(const std::shared_ptr<Queue> &queue) {
  {
    std::lock_guard<std::mutex> l(queue->lock);
    queue->closing = true;
  }
  queue->changed.notify_all();
}

uint64_t enqueue(const std::shared_ptr<Queue> &queue, std::function<void()> work) {
  uint64_t position;
  {
    std::lock_guard<std::mutex> l(queue->lock);
    queue->pending.push_back(std::move(work));
    position = ++queue->queued;
  }
  queue->changed.notify_all();
  return position;
}

void wait_for(Queue &queue, uint64_t position) {
  std::unique_lock<std::mutex> l(queue.lock);
  queue.changed.wait(l, [&] { return queue.done >= position; });
}

void drain(Queue &queue) {
  uint64_t given;
  {
    std::lock_guard<std::mutex> l(queue.lock);
    given = queue.queued;
  }
  wait_for(queue, given);
}

bool reached(Queue &queue, uint64_t position) {
  std::lock_guard<std::mutex> l(queue.lock);
  return queue.done >= position;
}

void wait_all_queues() {
  std::set<std::shared_ptr<Queue>> queues;
  {
    std::lock_guard<std::mutex> l(open_lock);
    queues = open_queues;
  }
  for (const auto &queue : queues) drain(*queue);
}

}  // namespace cuda_emu
