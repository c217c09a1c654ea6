#include "tier/aligned_buffer_pool.h"

#include <cstdlib>

namespace kvtier {

AlignedBufferPool::~AlignedBufferPool() {
  for (auto& [capacity, buffers] : free_) {
    for (std::byte* p : buffers) std::free(p);
  }
}

std::size_t AlignedBufferPool::RoundUp(std::size_t bytes) {
  const std::size_t granule = bytes > (64u << 10) ? (64u << 10) : kAlignment;
  return (bytes + granule - 1) / granule * granule;
}

AlignedBufferPool::Buffer AlignedBufferPool::Acquire(std::size_t bytes) {
  const std::size_t capacity = RoundUp(bytes == 0 ? 1 : bytes);
  {
    std::lock_guard lock(mutex_);
    // The smallest kept buffer that holds the request, up to twice its size: blocks of
    // varied sizes (several models, or MLA beside full attention) then share buffers
    // instead of each size faulting in buffers of its own while the others sit idle.
    auto it = free_.lower_bound(capacity);
    if (it != free_.end() && it->first <= 2 * capacity) {
      const std::size_t kept = it->first;
      return Buffer(TakeLocked(it), Release(this, kept));
    }
  }
  void* memory = nullptr;
  if (posix_memalign(&memory, kAlignment, capacity) != 0) return Buffer(nullptr, Release(this, capacity));
  return Buffer(static_cast<std::byte*>(memory), Release(this, capacity));
}

std::byte* AlignedBufferPool::TakeLocked(FreeLists::iterator it) {
  std::byte* p = it->second.back();
  it->second.pop_back();
  cached_bytes_ -= it->first;
  if (it->second.empty()) free_.erase(it);
  return p;
}

void AlignedBufferPool::Put(std::byte* p, std::size_t capacity) {
  std::vector<std::byte*> smaller;  // freed outside the lock
  {
    std::lock_guard lock(mutex_);
    // Full: smaller buffers make room for a larger one, which serves more requests (Acquire
    // takes any that holds the request); otherwise a pool full of small buffers would fault
    // in every large one anew.
    while (cached_bytes_ + capacity > max_cached_bytes_ && !free_.empty() && free_.begin()->first < capacity) {
      smaller.push_back(TakeLocked(free_.begin()));
    }
    if (cached_bytes_ + capacity <= max_cached_bytes_) {
      free_[capacity].push_back(p);
      cached_bytes_ += capacity;
      p = nullptr;
    }
  }
  for (std::byte* b : smaller) std::free(b);
  std::free(p);
}

std::size_t AlignedBufferPool::cached_bytes() const {
  std::lock_guard lock(mutex_);
  return cached_bytes_;
}

void AlignedBufferPool::Release::operator()(std::byte* p) const {
  if (p == nullptr) return;
  if (pool_ == nullptr) {
    std::free(p);
    return;
  }
  pool_->Put(p, capacity_);
}

}  // namespace kvtier
