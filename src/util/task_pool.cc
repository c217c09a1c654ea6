#include "util/task_pool.h"

#include <pthread.h>

#include <algorithm>
#include <system_error>

namespace kvtier {
namespace {

// The pool whose Work loop runs on this thread, and how deep its BlockingScopes are nested.
thread_local TaskPool* current_pool = nullptr;
thread_local int blocking_depth = 0;

}  // namespace

TaskPool::TaskPool(int threads, std::size_t max_queued, std::string name, SpareThreads spares)
    : core_threads_(std::max(threads, 1)),
      max_threads_(std::max(spares.max_threads, core_threads_)),
      spare_idle_end_(spares.idle_end),
      max_queued_(std::max<std::size_t>(max_queued, 1)),
      // Linux takes at most 15 characters and refuses longer names.
      name_(name.substr(0, 15)) {
  std::lock_guard lock(mutex_);
  for (int i = 0; i < core_threads_; ++i) StartThreadLocked(/*spare=*/false);
}

TaskPool::~TaskPool() {
  std::list<std::thread> threads;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;  // no thread starts from here on
    threads.swap(threads_);
  }
  not_empty_.notify_all();
  for (std::thread& thread : threads) thread.join();
}

void TaskPool::StartThreadLocked(bool spare) {
  JoinEndedLocked();
  auto body = [this, spare] {
    if (!name_.empty()) ::pthread_setname_np(::pthread_self(), name_.c_str());
    current_pool = this;
    Work(spare);
  };
  if (!spare) {
    threads_.emplace_back(std::move(body));  // the pool cannot work without its own threads
  } else {
    // A spare is an optimization: at the process's thread limit the queue waits instead.
    try {
      threads_.emplace_back(std::move(body));
    } catch (const std::system_error&) {
      return;
    }
    ++spares_started_;
  }
  ++alive_;
}

void TaskPool::JoinEndedLocked() {
  for (const std::thread::id id : ended_) {
    const auto it = std::find_if(threads_.begin(), threads_.end(), [id](const std::thread& t) { return t.get_id() == id; });
    if (it == threads_.end()) continue;
    it->join();  // it ended its Work under mutex_ and needs the lock no more
    threads_.erase(it);
  }
  ended_.clear();
}

void TaskPool::MaybeStartSpareLocked() {
  if (stopping_ || alive_ >= max_threads_ || tasks_.empty() || idle_ > 0) return;
  if (alive_ - blocked_ >= core_threads_) return;  // enough threads can run
  StartThreadLocked(/*spare=*/true);
}

void TaskPool::Submit(std::function<void()> task) {
  std::unique_lock lock(mutex_);
  if (tasks_.size() >= max_queued_) {
    // A task that submits more work must not wait on a queue only its own pool drains: a
    // worker runs such a task inline instead of blocking (a deadlock otherwise when full).
    if (current_pool == this) {
      lock.unlock();
      task();
      return;
    }
    not_full_.wait(lock, [&] { return tasks_.size() < max_queued_; });
  }
  tasks_.push_back(std::move(task));
  MaybeStartSpareLocked();
  lock.unlock();
  not_empty_.notify_one();
}

std::size_t TaskPool::queued() const {
  std::lock_guard lock(mutex_);
  return tasks_.size();
}

TaskPool::Counts TaskPool::counts() const {
  std::lock_guard lock(mutex_);
  return {.threads = alive_, .blocked = blocked_, .spares_started = spares_started_};
}

void TaskPool::Work(bool spare) {
  std::unique_lock lock(mutex_);
  for (;;) {
    ++idle_;
    const auto ready = [&] { return stopping_ || !tasks_.empty(); };
    bool has_work = true;
    if (spare) {
      has_work = not_empty_.wait_for(lock, spare_idle_end_, ready);
    } else {
      not_empty_.wait(lock, ready);
    }
    --idle_;
    if (!has_work || tasks_.empty()) {  // a spare idle too long, or stopping with nothing left
      --alive_;
      if (spare && !stopping_) ended_.push_back(std::this_thread::get_id());
      return;
    }
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    not_full_.notify_one();
    task();
    task = nullptr;  // its captures are released outside the lock
    lock.lock();
  }
}

TaskPool::BlockingScope::BlockingScope() {
  TaskPool* const pool = current_pool;
  if (pool == nullptr || pool->max_threads_ <= pool->core_threads_) return;
  if (blocking_depth++ > 0) {
    nested_ = true;
    return;
  }
  pool_ = pool;
  std::lock_guard lock(pool->mutex_);
  ++pool->blocked_;
  pool->MaybeStartSpareLocked();
}

TaskPool::BlockingScope::~BlockingScope() {
  if (nested_) {
    --blocking_depth;
    return;
  }
  if (pool_ == nullptr) return;
  --blocking_depth;
  std::lock_guard lock(pool_->mutex_);
  --pool_->blocked_;
}

TaskPool& TaskPool::ForTierIo() {
  static TaskPool pool(8, 1024, "kvtier-tier-io");
  return pool;
}

}  // namespace kvtier
