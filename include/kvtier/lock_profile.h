// LockProfile: what a lock cost the threads that used it, since it was made. A store reports its
// metadata lock's (StoreStats::metadata_lock); `kvtier bench serve` turns the exclusive hold
// time per operation into how far the daemon would scale on more cores (docs/serve.md).
#pragma once

#include <cstdint>

namespace kvtier {

struct LockProfile {
  uint64_t exclusive_acquisitions = 0;
  uint64_t exclusive_waits = 0;  // acquisitions that found the lock taken
  double exclusive_wait_seconds = 0;
  // The time writers held it: work no other thread could do meanwhile, the serial part.
  double exclusive_hold_seconds = 0;
  uint64_t shared_waits = 0;  // shared acquisitions that found a writer holding or waiting
  double shared_wait_seconds = 0;

  // Adds another lock's: what a set of locks (the shards of one structure) cost in all.
  LockProfile& operator+=(const LockProfile& other) {
    exclusive_acquisitions += other.exclusive_acquisitions;
    exclusive_waits += other.exclusive_waits;
    exclusive_wait_seconds += other.exclusive_wait_seconds;
    exclusive_hold_seconds += other.exclusive_hold_seconds;
    shared_waits += other.shared_waits;
    shared_wait_seconds += other.shared_wait_seconds;
    return *this;
  }
};

}  // namespace kvtier
