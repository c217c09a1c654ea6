// FaultyTier: a decorator that injects failures and latency into any tier, so that every
// tier's callers can be tested against the same faults (LevelDB's FaultInjectionTestEnv).
// Production tiers carry no fault hooks.
//
// Thread-safety: as the wrapped tier; the fault settings are atomics.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>

#include "kvtier/tier.h"

namespace kvtier::testing {

class FaultyTier : public TierWrapper {
 public:
  using TierWrapper::TierWrapper;

  // The next `count` writes fail with `code` (and store nothing).
  void FailNextWrites(int count, StatusCode code = StatusCode::kIoError) {
    write_failure_code_ = code;
    failing_writes_ = count;
  }
  // The next `count` reads that succeed flip one bit in the middle of the bytes they hand
  // back, after the wrapped tier checked them (and with its checksum): a byte changed in the
  // reader's memory or on its way to the client, which only an end-to-end check sees.
  void CorruptNextReads(int count) { corrupting_reads_ = count; }
  // Every n-th write / read fails (0 disables).
  void FailOneWriteIn(int n) { write_period_ = n; }
  void FailOneReadIn(int n) { read_period_ = n; }
  // Every call sleeps this long first.
  void AddLatency(std::chrono::microseconds latency) { latency_us_ = latency.count(); }
  // The next `count` evictions fail with `code` (and evict nothing), as a remote pool that is
  // down does.
  void FailNextEvictions(int count, StatusCode code = StatusCode::kUnavailable) {
    evict_failure_code_ = code;
    failing_evictions_ = count;
  }
  // Runs before every write (on the writer's thread): a status other than OK is returned
  // instead of writing. Lets a test act at the moment a write is in flight. Empty: none.
  void BeforeWrite(std::function<Status(const BlockKey&)> hook) {
    std::lock_guard lock(hook_mu_);
    before_write_ = std::move(hook);
  }
  // The same before every eviction.
  void BeforeEvict(std::function<Status(const BlockKey&)> hook) {
    std::lock_guard lock(hook_mu_);
    before_evict_ = std::move(hook);
  }

  uint64_t injected_failures() const { return injected_.load(); }

  using Tier::Write;
  Status Write(const WriteOp& op) override {
    const BlockKey& key = op.key;
    Delay();
    if (TakeOne(failing_writes_) || Every(write_period_, writes_)) {
      injected_.fetch_add(1);
      return Injected(write_failure_code_.load(), "write");
    }
    if (Status s = RunHook(before_write_, key); !s.ok()) return s;
    return TierWrapper::Write(op);
  }

  Status Evict(const BlockKey& key) override {
    if (TakeOne(failing_evictions_)) {
      injected_.fetch_add(1);
      return Injected(evict_failure_code_.load(), "eviction");
    }
    if (Status s = RunHook(before_evict_, key); !s.ok()) return s;
    return TierWrapper::Evict(key);
  }

  using Tier::Read;
  Result<std::size_t> Read(const ReadOp& op) override {
    Delay();
    if (Every(read_period_, reads_)) {
      injected_.fetch_add(1);
      return Injected(StatusCode::kIoError, "read");
    }
    Result<std::size_t> n = TierWrapper::Read(op);
    if (n.ok() && *n > 0 && TakeOne(corrupting_reads_)) {
      op.out[*n / 2] ^= std::byte{0x10};
      injected_.fetch_add(1);
    }
    return n;
  }

  // Batches go through Write/Read one by one so that every block sees the faults.
  std::vector<Status> WriteBatch(std::span<const WriteOp> ops) override { return Tier::WriteBatch(ops); }
  std::vector<Result<std::size_t>> ReadBatch(std::span<const ReadOp> ops) override { return Tier::ReadBatch(ops); }
  // Through this decorator's batches, so that the faults apply to asynchronous ops too.
  void SubmitWriteBatch(std::vector<WriteOp> ops, WriteDone done) override {
    Tier::SubmitWriteBatch(std::move(ops), std::move(done));
  }
  void SubmitReadBatch(std::vector<ReadOp> ops, ReadDone done) override {
    Tier::SubmitReadBatch(std::move(ops), std::move(done));
  }

 private:
  static Status Injected(StatusCode code, const char* what) {
    const std::string message = std::string("injected ") + what + " failure";
    switch (code) {
      case StatusCode::kResourceExhausted: return Status::ResourceExhausted(message);
      case StatusCode::kUnavailable: return Status::Unavailable(message);
      case StatusCode::kCorruption: return Status::Corruption(message);
      default: return Status::IoError(message);
    }
  }
  // Decrements `count` if it is positive; true when it did.
  static bool TakeOne(std::atomic<int>& count) {
    int value = count.load();
    while (value > 0) {
      if (count.compare_exchange_weak(value, value - 1)) return true;
    }
    return false;
  }
  static bool Every(const std::atomic<int>& period, std::atomic<uint64_t>& counter) {
    const int n = period.load();
    return n > 0 && (counter.fetch_add(1) + 1) % static_cast<uint64_t>(n) == 0;
  }
  Status RunHook(const std::function<Status(const BlockKey&)>& slot, const BlockKey& key) {
    std::function<Status(const BlockKey&)> hook;
    {
      std::lock_guard lock(hook_mu_);
      hook = slot;
    }
    return hook ? hook(key) : Status::Ok();
  }
  void Delay() const {
    const auto us = latency_us_.load();
    if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
  }

  std::atomic<StatusCode> write_failure_code_{StatusCode::kIoError};
  std::atomic<int> failing_writes_{0};
  std::atomic<StatusCode> evict_failure_code_{StatusCode::kUnavailable};
  std::atomic<int> failing_evictions_{0};
  std::mutex hook_mu_;
  std::function<Status(const BlockKey&)> before_write_;  // GUARDED_BY(hook_mu_)
  std::function<Status(const BlockKey&)> before_evict_;  // GUARDED_BY(hook_mu_)
  std::atomic<int> write_period_{0}, read_period_{0}, corrupting_reads_{0};
  std::atomic<uint64_t> writes_{0}, reads_{0}, injected_{0};
  std::atomic<int64_t> latency_us_{0};
};

}  // namespace kvtier::testing
