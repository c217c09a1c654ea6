// Large zero-filled arrays backed by anonymous mmap and, where the kernel allows it
// (transparent huge pages in "madvise" or "always" mode), 2 MiB pages. Index structures
// probed at random over gigabytes spend much of each lookup in TLB misses on 4 KiB pages;
// huge pages remove most of them. Falls back to ordinary pages without error.
//
// Thread-safety: none of its own; owners synchronize access.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace kvtier {

template <typename T>
class HugePageArray {
  static_assert(std::is_trivially_copyable_v<T> || std::is_default_constructible_v<T>);

 public:
  HugePageArray() = default;
  // Throws std::bad_alloc when the OS has no memory, as std::vector would.
  explicit HugePageArray(std::size_t count) : count_(count) {
    if (count == 0) return;
    bytes_ = count * sizeof(T);
    void* memory = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) throw std::bad_alloc();
    (void)madvise(memory, bytes_, MADV_HUGEPAGE);
    data_ = static_cast<T*>(memory);
    for (std::size_t i = 0; i < count; ++i) new (&data_[i]) T();
  }
  HugePageArray(HugePageArray&& other) noexcept { *this = std::move(other); }
  HugePageArray& operator=(HugePageArray&& other) noexcept {
    if (this != &other) {
      Reset();
      data_ = std::exchange(other.data_, nullptr);
      count_ = std::exchange(other.count_, 0);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  HugePageArray(const HugePageArray&) = delete;
  HugePageArray& operator=(const HugePageArray&) = delete;
  ~HugePageArray() { Reset(); }

  T& operator[](std::size_t i) { return data_[i]; }
  const T& operator[](std::size_t i) const { return data_[i]; }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return bytes_; }
  T* begin() { return data_; }
  T* end() { return data_ + count_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + count_; }

 private:
  void Reset() {
    if (data_ == nullptr) return;
    if constexpr (!std::is_trivially_destructible_v<T>) {
      for (std::size_t i = 0; i < count_; ++i) data_[i].~T();
    }
    munmap(data_, bytes_);
    data_ = nullptr;
  }

  T* data_ = nullptr;
  std::size_t count_ = 0;
  std::size_t bytes_ = 0;
};

}  // namespace kvtier
