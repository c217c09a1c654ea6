// TaskPool: a fixed set of worker threads running tasks from one bounded FIFO queue. Submit
// blocks while the queue is full, which is the back-pressure that keeps a producer (the
// store's demotion, a benchmark) from queueing unbounded work ahead of slow I/O.
//
// Thread-safety: Submit may be called from any thread, including from a task. The destructor
// runs every queued task before it returns.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kvtier {

class TaskPool {
 public:
  // `name` (at most 15 characters) names the threads, for top -H, perf and the tests that
  // tell a pool's threads from others'. Default: the threads keep the process's name.
  TaskPool(int threads, std::size_t max_queued, std::string name = {});
  ~TaskPool();
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  void Submit(std::function<void()> task);

  // Tasks queued and not yet started.
  std::size_t queued() const;

  // The pool behind Tier's default asynchronous batches (tier.h): 8 threads, 1024 queued.
  static TaskPool& ForTierIo();

 private:
  void Work();

  const std::size_t max_queued_;
  mutable std::mutex mutex_;
  std::condition_variable not_empty_;
  std::condition_variable not_full_;
  std::deque<std::function<void()>> tasks_;  // GUARDED_BY(mutex_)
  bool stopping_ = false;                    // GUARDED_BY(mutex_)
  std::vector<std::thread> workers_;
};

}  // namespace kvtier
