// The chaos benchmark's model of what the daemon acknowledged (chaos_benchmark.h).
//
// Block i of chain c of client k has a key, a size (4 to 32 KiB) and bytes that are functions
// of (k, c, i) alone, so any get is checked exactly without storing payloads, whichever
// daemon incarnation or tier served it.
//
// Which acknowledged blocks must come back after a restart: with write-through every
// acknowledged block is in the persist tier (the NVMe tier), but that tier's LRU policy may
// later demote it to Redis, after which it is no longer durable (docs/store.md, "Not
// guaranteed"). Under LRU a block B leaves only once the blocks used after it fill the tier
// past low_watermark x capacity. Those are blocks that entered the tier after B's put (new
// puts; blocks read from below it and later demoted into it; blocks still in DRAM whose tier
// copy had gone, at most the DRAM tier's size) and blocks already in it that were read
// since (fresh ones, themselves put within the window). So `traffic` counts the bytes put
// and the bytes read of blocks that are not fresh, and a chain is fresh, so must come back,
// while fewer than `window` = (low_watermark x capacity - DRAM) / 2 bytes of traffic have
// passed since its put began.
//
// Thread-safety: ClientModel's fields are guarded by its mutex; Gate and Tally are
// thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "kvtier/block.h"

namespace kvtier::bench::chaos {

inline constexpr uint64_t kChainBlocks = 4;
inline constexpr uint32_t kMaxBlockBytes = 32u << 10;
inline constexpr std::size_t kLiveChains = 16;     // per client: re-put, read and checked after restarts
inline constexpr std::size_t kRetiredChains = 64;  // per client: still read (mostly from Redis), never expected back
inline constexpr uint64_t kDramBytes = 16u << 20;  // the daemon's DRAM tier
inline constexpr double kLowWatermark = 0.85;      // the daemon's store.low_watermark

inline uint64_t DurableWindow(uint64_t persist_bytes) {
  return static_cast<uint64_t>(kLowWatermark * static_cast<double>(persist_bytes) - static_cast<double>(kDramBytes)) / 2;
}

inline uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// `run` keeps the keys of two runs against the same work directory apart.
inline BlockKey ChainBlockKey(uint64_t run, uint64_t client, uint64_t chain, uint64_t i) {
  return {(client << 40) ^ chain, Mix(run) ^ (i + 1)};
}

inline uint32_t BlockBytes(const BlockKey& key) {
  return static_cast<uint32_t>(4096 * (1 + Mix(key.hi ^ Mix(key.lo)) % (kMaxBlockBytes / 4096)));
}

inline void FillBlock(std::span<std::byte> out, const BlockKey& key) {
  uint64_t seed = Mix(key.lo ^ Mix(key.hi));
  for (std::size_t w = 0; w + 8 <= out.size(); w += 8) {
    const uint64_t v = Mix(seed + w);
    std::memcpy(out.data() + w, &v, 8);
  }
}

// Whether `bytes` are exactly block `key`'s.
inline bool BlockMatches(std::span<const std::byte> bytes, const BlockKey& key) {
  if (bytes.size() != BlockBytes(key)) return false;
  uint64_t seed = Mix(key.lo ^ Mix(key.hi));
  uint64_t diff = 0;
  for (std::size_t w = 0; w + 8 <= bytes.size(); w += 8) {
    uint64_t v;
    std::memcpy(&v, bytes.data() + w, 8);
    diff |= v ^ Mix(seed + w);
  }
  return diff == 0;
}

struct Chain {
  uint64_t id = 0;
  uint64_t acked = 0;   // blocks of its prefix some put acknowledged
  uint64_t mark = 0;    // `traffic` when the put that first acknowledged them began

  bool Fresh(uint64_t traffic, uint64_t window) const { return acked > 0 && traffic - mark < window; }
};

struct ClientModel {
  std::mutex mu;
  std::deque<Chain> live;      // GUARDED_BY(mu)
  std::deque<uint64_t> retired;  // GUARDED_BY(mu)
  uint64_t next_chain = 0;     // GUARDED_BY(mu)
};

// Lets the orchestrator stop every client between requests (while the daemon restarts and
// the acknowledged blocks are checked) without starving behind them.
class Gate {
 public:
  // Blocks while closed; then counts the caller in until Leave.
  void Enter() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return open_; });
    ++inside_;
  }
  void Leave() {
    std::lock_guard lock(mu_);
    if (--inside_ == 0) cv_.notify_all();
  }
  // Closes and waits for the clients inside to leave.
  void Close() {
    std::unique_lock lock(mu_);
    open_ = false;
    cv_.wait(lock, [&] { return inside_ == 0; });
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;  // GUARDED_BY(mu_)
  int inside_ = 0;    // GUARDED_BY(mu_)
};

// What the clients and the checks count, with the first few wrong blocks described.
struct Tally {
  std::atomic<uint64_t> ops{0}, acked_blocks{0}, wrong_bytes{0}, wrong_sizes{0}, misses{0};
  std::atomic<uint64_t> short_puts{0};  // puts answered, of which the store refused a tail
  std::atomic<uint64_t> traffic{0};  // bytes put or read, by every client (see above)

  // A failed request: counted by status code, the last message of each code kept.
  void Error(const std::string& code, const std::string& message) {
    std::lock_guard lock(mu_);
    ++errors_[code];
    last_error_[code] = message;
  }
  void Wrong(const std::string& what) {
    std::lock_guard lock(mu_);
    if (wrong_.size() < 20) wrong_.push_back(what);
  }
  std::map<std::string, uint64_t> errors() const {
    std::lock_guard lock(mu_);
    return errors_;
  }
  std::map<std::string, std::string> last_errors() const {
    std::lock_guard lock(mu_);
    return last_error_;
  }
  std::vector<std::string> wrong() const {
    std::lock_guard lock(mu_);
    return wrong_;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> errors_;  // GUARDED_BY(mu_): failed requests by status code
  std::map<std::string, std::string> last_error_;  // GUARDED_BY(mu_)
  std::vector<std::string> wrong_;          // GUARDED_BY(mu_)
};

}  // namespace kvtier::bench::chaos
