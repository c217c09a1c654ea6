// Redis Cluster's key-to-slot function and the replies that carry the slot map: CLUSTER
// SLOTS, and the MOVED / ASK redirections of a command sent to the wrong node.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tier/redis_connection.h"

namespace kvtier {

inline constexpr int kClusterSlots = 16384;

// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), the cluster specification's.
uint16_t Crc16Xmodem(std::string_view bytes);

// The slot of `key`: CRC16 of the key, or of its hash tag -- the bytes between the first '{'
// and the next '}' when that is not empty -- modulo 16384.
uint16_t ClusterKeySlot(std::string_view key);

// One range of slots served by one master ("host:port").
struct SlotRange {
  uint16_t first = 0;
  uint16_t last = 0;
  std::string master;
};

// The masters' ranges from a CLUSTER SLOTS reply. A master announced with an empty or "?"
// address is the node that was asked (`asked_host`). Unavailable for an error reply
// (e.g. a node not in cluster mode); Corruption for a malformed one.
Result<std::vector<SlotRange>> ParseClusterSlots(const redisReply& reply, std::string_view asked_host);

// "MOVED <slot> <host:port>" or "ASK <slot> <host:port>"; an IPv6 host comes back in brackets.
struct Redirection {
  bool ask = false;  // a one-off redirection during a slot migration; MOVED is permanent
  uint16_t slot = 0;
  std::string address;
};
std::optional<Redirection> ParseRedirection(const redisReply& reply);

}  // namespace kvtier
