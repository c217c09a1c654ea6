// Faults in a memory tier's region on a background thread, so that puts never pay
// first-touch page faults (issue 17: with an untouched region, puts from 4 clients ran at a
// fifth of the speed of 1, every client waiting on the kernel's page-fault path). Started
// after the region is mapped, so a large tier does not delay the daemon's start; puts that
// arrive before it finishes work as before and fault their own pages.
//
// How: madvise(MADV_POPULATE_WRITE) over one chunk at a time (Linux 5.14+), which maps every
// page writable without changing its bytes; on an older kernel (EINVAL), mlock then munlock
// of each 64 KiB, which populates the pages the same way and leaves them resident. Neither
// reads or writes a byte from user space, so puts writing the region meanwhile race with
// nothing. Any other error (no memory left for the pages, mlock refused) stops the pass
// quietly: prefaulting is best effort, the tier works without it.
//
// Costs: the whole region is resident from the start (it would be once full anyway), and
// one thread for as long as the pass takes (about a second per few GiB).
//
// Thread-safety: every method may be called from any thread; the destructor stops the
// pass after the chunk in progress (at most kChunkBytes, about a millisecond) and joins it.
// The region must outlive the prefaulter.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>

namespace kvtier {

enum class PrefaultMethod : uint8_t {
  kPopulateWrite,  // madvise(MADV_POPULATE_WRITE), falling back to kLockPages on EINVAL
  kLockPages,      // mlock + munlock per 64 KiB (older kernels; tests force it)
};

class RegionPrefaulter {
 public:
  static constexpr std::size_t kChunkBytes = std::size_t{2} << 20;

  // Starts the thread at once; [data, data + bytes) must stay mapped until destruction.
  RegionPrefaulter(std::byte* data, uint64_t bytes, PrefaultMethod method = PrefaultMethod::kPopulateWrite);
  ~RegionPrefaulter();
  RegionPrefaulter(const RegionPrefaulter&) = delete;
  RegionPrefaulter& operator=(const RegionPrefaulter&) = delete;

  // True once the pass has ended (finished, stopped or given up), waiting up to `timeout`.
  bool WaitFor(std::chrono::milliseconds timeout);
  // Bytes faulted in so far (a multiple of kChunkBytes, or all of them).
  uint64_t prefaulted_bytes() const { return prefaulted_bytes_.load(std::memory_order_relaxed); }

 private:
  void Run(PrefaultMethod method);

  std::byte* const data_;
  const uint64_t bytes_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> prefaulted_bytes_{0};
  std::mutex mutex_;
  std::condition_variable ended_cv_;
  bool ended_ = false;  // GUARDED_BY(mutex_)
  std::thread thread_;  // last: started once every other member is ready
};

}  // namespace kvtier
