// TaskPool: worker threads running tasks from one bounded FIFO queue. Submit blocks while the
// queue is full, which is the back-pressure that keeps a producer (the store's demotion, a
// benchmark) from queueing unbounded work ahead of slow I/O.
//
// Blocking tasks. A pool sized for the CPU starves when its tasks wait on I/O (a write-through
// to NVMe, an fsync, a round trip to a remote pool): every thread sleeps while tasks that need
// no I/O, or other I/O, queue behind them. Code about to block says so with a BlockingScope.
// An elastic pool (`max_threads` above `threads`) then keeps `threads` of its threads able to
// run: while fewer than `threads` are not blocked and tasks wait, it starts a spare thread, up
// to `max_threads` in all. A spare thread ends after `idle_end` without a task. This is the
// compensation of Java's ForkJoinPool.managedBlock and of Go's scheduler, which hands a
// thread's processor to another thread while the first is in a system call. A BlockingScope on
// a thread that is not one of an elastic pool's costs one thread-local read and does nothing.
//
// Thread-safety: Submit may be called from any thread, including from a task. The destructor
// runs every queued task before it returns (spare threads included).
#pragma once

#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kvtier {

// What makes a TaskPool elastic (see above).
struct SpareThreads {
  int max_threads = 0;  // at most this many threads, spares included; <= threads: none
  std::chrono::milliseconds idle_end{2000};  // a spare ends after this long without a task
};

class TaskPool {
 public:

  // `name` (at most 15 characters) names the threads, for top -H, perf and the tests that
  // tell a pool's threads from others'. Default: the threads keep the process's name.
  TaskPool(int threads, std::size_t max_queued, std::string name = {}, SpareThreads spares = {});
  ~TaskPool();
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  void Submit(std::function<void()> task);

  // Tasks queued and not yet started.
  std::size_t queued() const;

  struct Counts {
    int threads = 0;  // alive now, the fixed ones and the spares
    int blocked = 0;  // of them, inside a BlockingScope
    uint64_t spares_started = 0;  // since the pool was made
  };
  Counts counts() const;

  // The calling task is about to block (see above) until the scope ends. Nested scopes count
  // once. Not copyable or movable: it belongs to its thread.
  class BlockingScope {
   public:
    BlockingScope();
    ~BlockingScope();
    BlockingScope(const BlockingScope&) = delete;
    BlockingScope& operator=(const BlockingScope&) = delete;

   private:
    TaskPool* pool_ = nullptr;  // the elastic pool this thread works for, when outermost
    bool nested_ = false;       // inside another scope of the same thread
  };

  // The pool behind Tier's default asynchronous batches (tier.h): 8 threads, 1024 queued.
  static TaskPool& ForTierIo();

 private:
  void StartThreadLocked(bool spare);
  void MaybeStartSpareLocked();
  void JoinEndedLocked();
  void Work(bool spare);

  const int core_threads_;
  const int max_threads_;
  const std::chrono::milliseconds spare_idle_end_;
  const std::size_t max_queued_;
  const std::string name_;
  mutable std::mutex mutex_;
  std::condition_variable not_empty_;
  std::condition_variable not_full_;
  std::deque<std::function<void()>> tasks_;  // GUARDED_BY(mutex_)
  bool stopping_ = false;                    // GUARDED_BY(mutex_)
  int alive_ = 0;                            // GUARDED_BY(mutex_): threads that have not ended
  int idle_ = 0;                             // GUARDED_BY(mutex_): waiting for a task
  int blocked_ = 0;                          // GUARDED_BY(mutex_): inside a BlockingScope
  uint64_t spares_started_ = 0;              // GUARDED_BY(mutex_)
  // Every thread started and not yet joined. A spare that ended is joined by the next start
  // (it has left Work by then, or is about to) or by the destructor.
  std::list<std::thread> threads_;       // GUARDED_BY(mutex_)
  std::vector<std::thread::id> ended_;  // GUARDED_BY(mutex_)
};

}  // namespace kvtier
