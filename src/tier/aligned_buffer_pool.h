// AlignedBufferPool: 4 KiB-aligned I/O buffers, kept for reuse after they are released.
//
// Why: a fresh buffer of a block's size comes from mmap (glibc maps anything over 128 KiB
// anew each time), so every I/O would first fault in a block's worth of zeroed pages; that
// cost half of the NVMe tier's throughput in `kvtier bench tiers`. Buffers are kept per size
// (rounded up to 64 KiB above 64 KiB, to 4 KiB below), up to `max_cached_bytes` in total;
// beyond it, smaller kept buffers are freed to keep a larger released one, and a released
// buffer no larger than any kept one is freed. A request takes the smallest kept buffer that
// holds it, if that is at most twice its size.
//
// Thread-safety: Acquire and release (the Buffer's destructor) may run on any thread; one
// mutex guards the free lists. The pool must outlive its buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace kvtier {

class AlignedBufferPool {
 public:
  static constexpr std::size_t kAlignment = 4096;

  explicit AlignedBufferPool(std::size_t max_cached_bytes) : max_cached_bytes_(max_cached_bytes) {}
  ~AlignedBufferPool();
  AlignedBufferPool(const AlignedBufferPool&) = delete;
  AlignedBufferPool& operator=(const AlignedBufferPool&) = delete;

  class Release {
   public:
    Release() = default;
    Release(AlignedBufferPool* pool, std::size_t capacity) : pool_(pool), capacity_(capacity) {}
    void operator()(std::byte* p) const;

   private:
    AlignedBufferPool* pool_ = nullptr;
    std::size_t capacity_ = 0;
  };
  using Buffer = std::unique_ptr<std::byte, Release>;

  // A buffer of at least `bytes`, or nullptr when memory runs out. Its contents are whatever
  // the last user left.
  Buffer Acquire(std::size_t bytes);

  std::size_t cached_bytes() const;

 private:
  static std::size_t RoundUp(std::size_t bytes);
  void Put(std::byte* p, std::size_t capacity);
  using FreeLists = std::map<std::size_t, std::vector<std::byte*>>;
  // Takes a kept buffer of the list `it` points at (its capacity is it->first).
  std::byte* TakeLocked(FreeLists::iterator it);

  const std::size_t max_cached_bytes_;
  mutable std::mutex mutex_;
  FreeLists free_;                 // GUARDED_BY(mutex_): by capacity, none empty
  std::size_t cached_bytes_ = 0;   // GUARDED_BY(mutex_)
};

}  // namespace kvtier
