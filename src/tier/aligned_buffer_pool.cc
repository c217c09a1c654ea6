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
    auto it = free_.find(capacity);
    if (it != free_.end() && !it->second.empty()) {
      std::byte* p = it->second.back();
      it->second.pop_back();
      cached_bytes_ -= capacity;
      return Buffer(p, Release(this, capacity));
    }
  }
  void* memory = nullptr;
  if (posix_memalign(&memory, kAlignment, capacity) != 0) return Buffer(nullptr, Release(this, capacity));
  return Buffer(static_cast<std::byte*>(memory), Release(this, capacity));
}

void AlignedBufferPool::Put(std::byte* p, std::size_t capacity) {
  {
    std::lock_guard lock(mutex_);
    if (cached_bytes_ + capacity <= max_cached_bytes_) {
      free_[capacity].push_back(p);
      cached_bytes_ += capacity;
      return;
    }
  }
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
