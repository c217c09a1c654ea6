#include "tier/region_prefaulter.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>

namespace kvtier {
namespace {

constexpr std::size_t kSmallPageBytes = 4096;

// Write-faults every 4 KiB page of [begin, begin + bytes) without changing a byte: a
// compare-and-swap of the byte with itself, retried until it succeeds, is a write that
// stores the value the byte holds, so a put copying into the same page concurrently loses
// nothing. An idempotent fetch_add(0) would not do: LLVM lowers it to a fenced load, which
// faults the page in read-only. Hidden from ThreadSanitizer because a put's memcpy into the
// page is a plain write; only kernels without MADV_POPULATE_WRITE take this path.
__attribute__((no_sanitize("thread"))) void TouchPages(std::byte* begin, std::size_t bytes) {
  for (std::size_t offset = 0; offset < bytes; offset += kSmallPageBytes) {
    auto* byte = reinterpret_cast<unsigned char*>(begin + offset);
    unsigned char seen = __atomic_load_n(byte, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(byte, &seen, seen, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
  }
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
      if (outcome == ChunkOutcome::kUnsupported) method = PrefaultMethod::kTouchPages;
    }
    if (method == PrefaultMethod::kTouchPages) TouchPages(data_ + offset, chunk);
    prefaulted_bytes_.store(offset + chunk, std::memory_order_relaxed);
  }
  std::lock_guard lock(mutex_);
  ended_ = true;
  ended_cv_.notify_all();
}

}  // namespace kvtier
