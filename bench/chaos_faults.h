// The chaos benchmark's faults, each one action on a running system (chaos_benchmark.cc
// schedules them): a tmpfs mounted for the persist tier and filled up, bytes flipped in the
// slot file and in Redis values, and raw connections that send broken frames.
//
// Thread-safety: free functions on their arguments; TmpfsMount is driven by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include "kvtier/status.h"
#include "testing/redis_server.h"

namespace kvtier::bench::chaos {

// A tmpfs of `bytes` mounted on `dir` (needs CAP_SYS_ADMIN), unmounted (lazily, so that a
// daemon still holding files cannot keep it) when this goes. Mount moves the calling thread
// into a mount namespace of its own: only it, and the processes it starts afterwards, see the
// tmpfs, and the kernel unmounts it when the last of them exits.
class TmpfsMount {
 public:
  static Result<std::unique_ptr<TmpfsMount>> Mount(const std::string& dir, uint64_t bytes);
  ~TmpfsMount();
  TmpfsMount(const TmpfsMount&) = delete;
  TmpfsMount& operator=(const TmpfsMount&) = delete;

 private:
  explicit TmpfsMount(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

// Fills the filesystem of `dir` with `dir`/filler until it is full; returns the bytes taken.
Result<uint64_t> FillDisk(const std::string& dir);
// Gives the space back.
void FreeDisk(const std::string& dir);

// Flips one random byte at each of `count` random offsets of the slot area of NVMe slot file
// `path` (nvme_tier.h: past the superblock and the slab journal, whose data offset the
// superblock gives), with the daemon running: a flipped slot header or payload must fail its
// check and lose that block only (with the rest of its chain, at the next recovery).
Status FlipSlotBytes(const std::string& path, int count, std::mt19937_64& rng);
// Flips one random byte of a random key's value on Redis node `node` (SETRANGE). Returns the
// key, or "" when the node holds none.
Result<std::string> FlipRedisValue(const testing::RedisServers& redis, int node, std::mt19937_64& rng);

// Where raw connections go: the daemon's Unix socket, or TCP on loopback when `tcp_port` is set.
struct RawTarget {
  std::string unix_socket;
  uint16_t tcp_port = 0;
};
// A Hello, then part of a Put frame (cut anywhere, the header included), then the connection
// closes: a client that vanished mid-frame.
Status SendTruncatedFrame(const RawTarget& target, std::mt19937_64& rng);
// A frame with a valid header and random or mutated bytes after it (or, at times, a request
// before any Hello); the reply, if any, is read and the connection closed.
Status SendMalformedFrame(const RawTarget& target, std::mt19937_64& rng);

}  // namespace kvtier::bench::chaos
