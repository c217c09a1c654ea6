#include "tier/redis_cluster_slots.h"

#include <array>
#include <charconv>

namespace kvtier {
namespace {

constexpr std::array<uint16_t, 256> MakeCrc16Table() {
  std::array<uint16_t, 256> table{};
  for (unsigned byte = 0; byte < 256; ++byte) {
    unsigned crc = byte << 8;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 0x8000u) != 0 ? (crc << 1) ^ 0x1021u : crc << 1;
    table[byte] = static_cast<uint16_t>(crc);
  }
  return table;
}
constexpr std::array<uint16_t, 256> kCrc16Table = MakeCrc16Table();

std::optional<long long> IntegerOf(const redisReply& reply) {
  if (reply.type == REDIS_REPLY_INTEGER) return reply.integer;
  return std::nullopt;
}

}  // namespace

uint16_t Crc16Xmodem(std::string_view bytes) {
  unsigned crc = 0;
  for (char c : bytes) {
    const unsigned index = ((crc >> 8) ^ static_cast<unsigned char>(c)) & 0xffu;
    crc = ((crc << 8) ^ kCrc16Table[index]) & 0xffffu;
  }
  return static_cast<uint16_t>(crc);
}

uint16_t ClusterKeySlot(std::string_view key) {
  if (const std::size_t open = key.find('{'); open != std::string_view::npos) {
    const std::size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
  }
  return static_cast<uint16_t>(Crc16Xmodem(key) & (kClusterSlots - 1));
}

Result<std::vector<SlotRange>> ParseClusterSlots(const redisReply& reply, std::string_view asked_host) {
  if (IsErrorReply(reply)) return Status::Unavailable("CLUSTER SLOTS failed: " + std::string(ReplyText(reply)));
  if (reply.type != REDIS_REPLY_ARRAY) return Status::Corruption("CLUSTER SLOTS: the reply is not an array");
  std::vector<SlotRange> ranges;
  for (std::size_t i = 0; i < reply.elements; ++i) {
    const redisReply& entry = *reply.element[i];
    // [first slot, last slot, [master host, port, id, ...], replicas...]
    if (entry.type != REDIS_REPLY_ARRAY || entry.elements < 3) {
      return Status::Corruption("CLUSTER SLOTS: entry " + std::to_string(i) + " is not [first, last, master, ...]");
    }
    const std::optional<long long> first = IntegerOf(*entry.element[0]);
    const std::optional<long long> last = IntegerOf(*entry.element[1]);
    const redisReply& master = *entry.element[2];
    if (!first || !last || *first < 0 || *last < *first || *last >= kClusterSlots || master.type != REDIS_REPLY_ARRAY ||
        master.elements < 2 || master.element[0]->type != REDIS_REPLY_STRING) {
      return Status::Corruption("CLUSTER SLOTS: entry " + std::to_string(i) + " has a bad slot range or master");
    }
    const std::optional<long long> port = IntegerOf(*master.element[1]);
    if (!port || *port < 1 || *port > 65535) {
      return Status::Corruption("CLUSTER SLOTS: entry " + std::to_string(i) + " has a bad master port");
    }
    std::string host(ReplyText(*master.element[0]));
    if (host.empty() || host == "?") host = std::string(asked_host);
    if (host.find(':') != std::string::npos) host = "[" + host + "]";
    ranges.push_back({.first = static_cast<uint16_t>(*first),
                      .last = static_cast<uint16_t>(*last),
                      .master = host + ":" + std::to_string(*port)});
  }
  return ranges;
}

std::optional<Redirection> ParseRedirection(const redisReply& reply) {
  if (!IsErrorReply(reply)) return std::nullopt;
  std::string_view text = ReplyText(reply);
  Redirection redirection;
  if (text.starts_with("MOVED ")) {
    text.remove_prefix(6);
  } else if (text.starts_with("ASK ")) {
    redirection.ask = true;
    text.remove_prefix(4);
  } else {
    return std::nullopt;
  }
  const std::size_t space = text.find(' ');
  if (space == std::string_view::npos || space + 1 >= text.size()) return std::nullopt;
  unsigned slot = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + space, slot);
  if (error != std::errc() || end != text.data() + space || slot >= kClusterSlots) return std::nullopt;
  redirection.slot = static_cast<uint16_t>(slot);
  redirection.address = std::string(text.substr(space + 1));
  // Redis writes an IPv6 address without brackets ("::1:7000"): add them for ParseRedisEndpoint.
  const std::size_t last_colon = redirection.address.rfind(':');
  if (!redirection.address.starts_with('[') && last_colon != std::string::npos &&
      redirection.address.find(':') != last_colon) {
    redirection.address = "[" + redirection.address.substr(0, last_colon) + "]" + redirection.address.substr(last_colon);
  }
  return redirection;
}

}  // namespace kvtier
