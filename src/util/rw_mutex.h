// RwMutex: a reader-writer lock whose waiting writers go before new readers. std::shared_mutex
// is glibc's default rwlock, which prefers readers: a steady stream of overlapping readers (the
// daemon's lookups) can keep a writer (a put, a mover) waiting forever. This one holds new
// readers back while a writer waits, so a writer waits at most for the readers already in.
//
// It meets the standard Lockable and SharedLockable requirements: use it with std::lock_guard,
// std::unique_lock, std::shared_lock and std::condition_variable_any.
//
// Not recursive, in either mode: a thread that holds a shared lock and asks for another while
// a writer waits deadlocks. Take it once per critical section.
//
// Thread-safety: that is its job.
#pragma once

#include <pthread.h>

#include <cerrno>
#include <cstdlib>

namespace kvtier {

class RwMutex {
 public:
  RwMutex() {
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&lock_, &attr);
    pthread_rwlockattr_destroy(&attr);
  }
  ~RwMutex() { pthread_rwlock_destroy(&lock_); }
  RwMutex(const RwMutex&) = delete;
  RwMutex& operator=(const RwMutex&) = delete;

  // The only failures pthread documents here are misuse (a deadlock it detected, a lock not
  // held, too many readers): bugs, not conditions a caller could handle.
  void lock() { Check(pthread_rwlock_wrlock(&lock_)); }
  bool try_lock() { return pthread_rwlock_trywrlock(&lock_) == 0; }
  void unlock() { Check(pthread_rwlock_unlock(&lock_)); }
  void lock_shared() { Check(pthread_rwlock_rdlock(&lock_)); }
  bool try_lock_shared() { return pthread_rwlock_tryrdlock(&lock_) == 0; }
  void unlock_shared() { Check(pthread_rwlock_unlock(&lock_)); }

 private:
  static void Check(int rc) {
    if (rc != 0) std::abort();
  }

  pthread_rwlock_t lock_;
};

}  // namespace kvtier
