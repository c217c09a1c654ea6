#include "tier/region_prefaulter.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace kvtier {
namespace {

// RLIMIT_MEMLOCK's smallest common default: what one mlock below may hold at a time.
constexpr std::size_t kLockStepBytes = std::size_t{64} << 10;

// Faults [begin, begin + bytes) in without reading or writing a byte from user space (so
// that puts writing the same pages meanwhile race with nothing): mlock populates the range,
// write-faulting a private writable mapping's pages as MAP_POPULATE does, and munlock
// leaves them resident. 64 KiB at a time, to stay under the lock limit. False when mlock is
// refused (a limit under 64 KiB): the pages are then left to the puts.
bool LockAndUnlock(std::byte* begin, std::size_t bytes) {
  for (std::size_t offset = 0; offset < bytes; offset += kLockStepBytes) {
    const std::size_t step = std::min(kLockStepBytes, bytes - offset);
    // Raw system calls: the sanitizers' runtimes replace mlock and munlock with no-ops.
    if (syscall(SYS_mlock, begin + offset, step) != 0) return false;
    (void)syscall(SYS_munlock, begin + offset, step);
  }
  return true;
}

enum class ChunkOutcome : uint8_t { kDone, kUnsupported, kFailed };

ChunkOutcome PopulateWrite(std::byte* begin, std::size_t bytes) {
#ifdef MADV_POPULATE_WRITE
  while (madvise(begin, bytes, MADV_POPULATE_WRITE) != 0) {
    if (errno == EINTR || errno == EAGAIN) continue;
    return errno == EINVAL ? ChunkOutcome::kUnsupported : ChunkOutcome::kFailed;
  }
  return ChunkOutcome::kDone;
#else
  (void)begin;
  (void)bytes;
  return ChunkOutcome::kUnsupported;
#endif
}

}  // namespace

RegionPrefaulter::RegionPrefaulter(std::byte* data, uint64_t bytes, PrefaultMethod method)
    : data_(data), bytes_(bytes), thread_([this, method] { Run(method); }) {}

RegionPrefaulter::~RegionPrefaulter() {
  stop_.store(true, std::memory_order_relaxed);
  thread_.join();
}

bool RegionPrefaulter::WaitFor(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return ended_cv_.wait_for(lock, timeout, [this] { return ended_; });
}

void RegionPrefaulter::Run(PrefaultMethod method) {
  for (uint64_t offset = 0; offset < bytes_ && !stop_.load(std::memory_order_relaxed); offset += kChunkBytes) {
    const std::size_t chunk = static_cast<std::size_t>(std::min<uint64_t>(kChunkBytes, bytes_ - offset));
    if (method == PrefaultMethod::kPopulateWrite) {
      const ChunkOutcome outcome = PopulateWrite(data_ + offset, chunk);
      if (outcome == ChunkOutcome::kFailed) break;
      if (outcome == ChunkOutcome::kUnsupported) method = PrefaultMethod::kLockPages;
    }
    if (method == PrefaultMethod::kLockPages && !LockAndUnlock(data_ + offset, chunk)) break;
    prefaulted_bytes_.store(offset + chunk, std::memory_order_relaxed);
  }
  std::lock_guard lock(mutex_);
  ended_ = true;
  ended_cv_.notify_all();
}

}  // namespace kvtier
