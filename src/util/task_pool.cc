#include "util/task_pool.h"

#include <pthread.h>

namespace kvtier {

TaskPool::TaskPool(int threads, std::size_t max_queued, std::string name) : max_queued_(max_queued < 1 ? 1 : max_queued) {
  const int n = threads < 1 ? 1 : threads;
  workers_.reserve(static_cast<std::size_t>(n));
  // Linux takes at most 15 characters and refuses longer names.
  if (name.size() > 15) name.resize(15);
  for (int i = 0; i < n; ++i) {
    workers_.emplace_back([this, name] {
      if (!name.empty()) ::pthread_setname_np(::pthread_self(), name.c_str());
      Work();
    });
  }
}

TaskPool::~TaskPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  not_empty_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void TaskPool::Submit(std::function<void()> task) {
  // A task that submits more work must not wait on a queue only its own pool drains: a
  // worker runs such a task inline instead of blocking (a deadlock otherwise when full).
  std::unique_lock lock(mutex_);
  if (tasks_.size() >= max_queued_) {
    const bool on_worker = [&] {
      for (const std::thread& w : workers_) {
        if (w.get_id() == std::this_thread::get_id()) return true;
      }
      return false;
    }();
    if (on_worker) {
      lock.unlock();
      task();
      return;
    }
    not_full_.wait(lock, [&] { return tasks_.size() < max_queued_; });
  }
  tasks_.push_back(std::move(task));
  lock.unlock();
  not_empty_.notify_one();
}

std::size_t TaskPool::queued() const {
  std::lock_guard lock(mutex_);
  return tasks_.size();
}

void TaskPool::Work() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mutex_);
      not_empty_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, and everything queued has run
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    not_full_.notify_one();
    task();
  }
}

TaskPool& TaskPool::ForTierIo() {
  static TaskPool pool(8, 1024, "kvtier-tier-io");
  return pool;
}

}  // namespace kvtier
