// ProfiledRwMutex: an RwMutex (rw_mutex.h) that measures what it costs the threads using it:
// how long writers held it, and how long writers and readers waited for it. A store's metadata
// lock is one; `kvtier bench serve` reads its profile to say how far the daemon would scale on
// more cores (docs/serve.md): the exclusive hold time per operation is the serial part.
//
// Cost: an uncontended reader pays only a failed-or-not try_lock_shared (no clock read, no
// shared counter touched, so readers on many cores do not bounce a counter's cache line); a
// reader that must wait, and every writer, read the steady clock twice and add to counters that
// only they touch then (a writer holds the lock; a waiting reader is contended already).
//
// Spinning, when asked for (the constructor's `spin`): a thread that finds the lock taken tries
// again for that long before it sleeps in the kernel. For locks whose sections last well under
// a microsecond (an index shard's insert), where a sleep and its wake-up cost several
// (measured with `kvtier bench index --threads 2`: docs/index.md, "Shards").
//
// Meets Lockable and SharedLockable as RwMutex does (std::lock_guard, std::unique_lock,
// std::shared_lock, std::condition_variable_any: a wait releases the lock, so the time a writer
// sleeps in a condition variable is not counted as held). Not recursive.
//
// Thread-safety: that is its job; Profile() may be called from any thread at any time (each
// counter is read atomically; the set of them is not one snapshot).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "kvtier/lock_profile.h"
#include "util/rw_mutex.h"

namespace kvtier {

class ProfiledRwMutex {
 public:
  explicit ProfiledRwMutex(std::chrono::nanoseconds spin = {}) : spin_ns_(spin.count()) {}

  void lock() {
    if (!mu_.try_lock()) {
      const int64_t start = NowNs();
      if (!Spin(start, [this] { return mu_.try_lock(); })) mu_.lock();
      Add(exclusive_waits_, 1);
      Add(exclusive_wait_ns_, NowNs() - start);
    }
    Held();
  }
  bool try_lock() {
    if (!mu_.try_lock()) return false;
    Held();
    return true;
  }
  void unlock() {
    Add(exclusive_hold_ns_, NowNs() - held_since_ns_);
    mu_.unlock();
  }
  void lock_shared() {
    if (mu_.try_lock_shared()) return;
    const int64_t start = NowNs();
    if (!Spin(start, [this] { return mu_.try_lock_shared(); })) mu_.lock_shared();
    shared_waits_.fetch_add(1, std::memory_order_relaxed);
    shared_wait_ns_.fetch_add(NowNs() - start, std::memory_order_relaxed);
  }
  bool try_lock_shared() { return mu_.try_lock_shared(); }
  void unlock_shared() { mu_.unlock_shared(); }

  LockProfile Profile() const {
    const auto seconds = [](const std::atomic<int64_t>& ns) { return static_cast<double>(ns.load(std::memory_order_relaxed)) * 1e-9; };
    return {.exclusive_acquisitions = static_cast<uint64_t>(exclusive_acquisitions_.load(std::memory_order_relaxed)),
            .exclusive_waits = static_cast<uint64_t>(exclusive_waits_.load(std::memory_order_relaxed)),
            .exclusive_wait_seconds = seconds(exclusive_wait_ns_),
            .exclusive_hold_seconds = seconds(exclusive_hold_ns_),
            .shared_waits = static_cast<uint64_t>(shared_waits_.load(std::memory_order_relaxed)),
            .shared_wait_seconds = seconds(shared_wait_ns_)};
  }

 private:
  // Tries `try_lock` again until it succeeds (true) or `spin_ns_` passed since `start`
  // (false), a few pauses between tries.
  template <typename TryLock>
  bool Spin(int64_t start, TryLock try_lock) const {
    if (spin_ns_ <= 0) return false;
    do {
      for (int p = 0; p < 8; ++p) Pause();
      if (try_lock()) return true;
    } while (NowNs() - start < spin_ns_);
    return false;
  }
  static void Pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }
  static int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // Only the writer holding the lock changes the exclusive counters: a load and a store, no
  // locked read-modify-write; atomics so that Profile() may read them meanwhile.
  static void Add(std::atomic<int64_t>& counter, int64_t amount) {
    counter.store(counter.load(std::memory_order_relaxed) + amount, std::memory_order_relaxed);
  }
  void Held() {
    held_since_ns_ = NowNs();
    Add(exclusive_acquisitions_, 1);
  }

  RwMutex mu_;
  const int64_t spin_ns_;
  int64_t held_since_ns_ = 0;  // written and read only by the writer holding mu_
  std::atomic<int64_t> exclusive_acquisitions_{0}, exclusive_waits_{0}, exclusive_wait_ns_{0}, exclusive_hold_ns_{0};
  std::atomic<int64_t> shared_waits_{0}, shared_wait_ns_{0};
};

}  // namespace kvtier
