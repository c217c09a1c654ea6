#include "server/session.h"

#include <nlohmann/json.hpp>
#include <openssl/crypto.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <type_traits>
#include <variant>

namespace kvtier::server {
namespace {

Reply Error(const Status& status, bool close = false) {
  return {protocol::ErrorReply{status.code(), status.message()}, close};
}

// Compares without leaking, through timing, how much of a token matched.
bool SameToken(const std::string& given, const std::string& expected) {
  return given.size() == expected.size() && CRYPTO_memcmp(given.data(), expected.data(), given.size()) == 0;
}

// "2026-01-31T12:00:00Z"
std::string FormatUtc(std::chrono::sys_seconds t) {
  const std::chrono::sys_days day = std::chrono::floor<std::chrono::days>(t);
  const std::chrono::year_month_day ymd(day);
  const std::chrono::hh_mm_ss hms(t - day);
  char text[32];
  std::snprintf(text, sizeof(text), "%04d-%02u-%02uT%02d:%02d:%02dZ", static_cast<int>(ymd.year()),
                static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()), static_cast<int>(hms.hours().count()),
                static_cast<int>(hms.minutes().count()), static_cast<int>(hms.seconds().count()));
  return text;
}

std::string StatsJson(const StoreStats& s, const std::string& predictor_json) {
  nlohmann::json tiers = nlohmann::json::array();
  for (const StoreTierStats& t : s.tiers) {
    tiers.push_back({{"name", t.name}, {"kind", TierKindName(t.kind)}, {"capacity_bytes", t.capacity_bytes},
                     {"used_bytes", t.used_bytes}, {"blocks", t.blocks}, {"hits", t.hits},
                     {"promotions", t.promotions}, {"demotions", t.demotions}, {"drops", t.drops},
                     {"refused", t.refused}, {"promotions_declined", t.promotions_declined},
                     {"promotions_used", t.promotions_used}, {"promotions_wasted", t.promotions_wasted},
                     {"promotion_rate", t.promotion_rate}});
  }
  const nlohmann::json out = {
      {"tiers", tiers},
      {"lookups", s.lookups}, {"lookup_blocks", s.lookup_blocks}, {"lookup_hit_blocks", s.lookup_hit_blocks},
      {"gets", s.gets}, {"get_blocks", s.get_blocks}, {"get_misses", s.get_misses},
      {"puts", s.puts}, {"put_blocks", s.put_blocks}, {"corrupt_blocks", s.corrupt_blocks},
      {"prefetch_issued", s.prefetch_issued}, {"prefetch_used", s.prefetch_used},
      {"prefetch_wasted", s.prefetch_wasted}, {"prefetch_window", s.prefetch_window},
      {"queued_moves", s.queued_moves}, {"pinned_blocks", s.pinned_blocks}, {"index_blocks", s.index_blocks},
      {"expected_blocks", s.expected_blocks},
      {"shared_found_blocks", s.shared_found_blocks}, {"shared_publish_failures", s.shared_publish_failures},
      {"vanished_copies", s.vanished_copies},
      {"recovered_blocks", s.recovered_blocks}, {"recovery_dropped_blocks", s.recovery_dropped_blocks},
      {"metadata_lock",
       {{"exclusive_acquisitions", s.metadata_lock.exclusive_acquisitions},
        {"exclusive_hold_seconds", s.metadata_lock.exclusive_hold_seconds},
        {"exclusive_waits", s.metadata_lock.exclusive_waits},
        {"exclusive_wait_seconds", s.metadata_lock.exclusive_wait_seconds},
        {"shared_waits", s.metadata_lock.shared_waits},
        {"shared_wait_seconds", s.metadata_lock.shared_wait_seconds}}},
      {"predictor", nlohmann::json::parse(predictor_json)}};
  return out.dump();
}

}  // namespace

Session::Session(TieredStore& store, const ServerOptions& options, bool tcp)
    : store_(store), options_(options), tcp_(tcp) {}

Reply Session::Handle(const protocol::Message& request, uint16_t version, std::vector<ScopedFd>& fds) {
  if (const auto* hello = std::get_if<protocol::Hello>(&request)) return Hello(*hello, version, fds);
  if (!tenant_) return Error(Status::FailedPrecondition("send Hello first"), /*close=*/true);
  if (!fds.empty()) return Error(Status::InvalidArgument("descriptors may only come with Hello"), /*close=*/true);
  return std::visit(
      [&](const auto& m) -> Reply {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, protocol::Lookup>) return Lookup(m);
        else if constexpr (std::is_same_v<T, protocol::Put>) return Put(m);
        else if constexpr (std::is_same_v<T, protocol::Get>) return Get(m, version);
        else if constexpr (std::is_same_v<T, protocol::Prefetch>) {
          store_.Prefetch(tenant_->Map(m.keys));
          return {protocol::EmptyReply{}, false, m.keys.size(), 0};
        } else if constexpr (std::is_same_v<T, protocol::Pin>) return Pin(m);
        else if constexpr (std::is_same_v<T, protocol::Unpin>) return Unpin(m);
        else if constexpr (std::is_same_v<T, protocol::Expect>) return Expect(m);
        else if constexpr (std::is_same_v<T, protocol::Unexpect>) return Unexpect(m);
        else if constexpr (std::is_same_v<T, protocol::Tags>) return Tags(m);
        else if constexpr (std::is_same_v<T, protocol::Importance>) return Importance(m);
        else if constexpr (std::is_same_v<T, protocol::Stats>) return Stats();
        else return Error(Status::InvalidArgument("a reply is not a request"), /*close=*/true);
      },
      request);
}

Reply Session::Hello(const protocol::Hello& m, uint16_t version, std::vector<ScopedFd>& fds) {
  if (tenant_) return Error(Status::FailedPrecondition("Hello was already sent on this connection"), true);
  const TenantOptions* known = nullptr;
  if (!options_.tenants.empty()) {
    auto it = std::find_if(options_.tenants.begin(), options_.tenants.end(),
                           [&](const TenantOptions& t) { return t.name == m.tenant; });
    if (it == options_.tenants.end()) return Error(Status::PermissionDenied("unknown tenant '" + m.tenant + "'"), true);
    known = &*it;
  }
  const bool own_token = known != nullptr && !known->auth_token.empty();
  const std::string& expected = own_token ? known->auth_token : options_.auth_token;
  if (!expected.empty() && !SameToken(m.auth_token, expected)) {
    return Error(Status::PermissionDenied("wrong auth token for tenant '" + m.tenant + "'"), true);
  }
  // Checked only once the token matched, so that only its holder learns that it expired.
  const std::optional<std::chrono::sys_seconds>& expires = own_token ? known->expires : options_.auth_token_expires;
  if (!expected.empty() && expires && std::chrono::system_clock::now() >= *expires) {
    return Error(Status::PermissionDenied("the auth token for tenant '" + m.tenant + "' expired at " +
                                          FormatUtc(*expires) + "; ask the server's operator for a new one"),
                 true);
  }
  if (tcp_ && !m.segment_bytes.empty()) return Error(Status::InvalidArgument("shared segments need the Unix socket"), true);
  if (m.segment_bytes.size() != fds.size()) {
    return Error(Status::InvalidArgument("Hello declares " + std::to_string(m.segment_bytes.size()) +
                                         " shared segments and carries " + std::to_string(fds.size()) + " descriptors"),
                 true);
  }
  if (m.segment_bytes.size() > options_.max_segments_per_client) {
    return Error(Status::ResourceExhausted(std::to_string(m.segment_bytes.size()) + " shared segments, over the limit of " +
                                           std::to_string(options_.max_segments_per_client)),
                 true);
  }
  uint64_t total = 0;
  for (uint64_t b : m.segment_bytes) total += std::min<uint64_t>(b, options_.max_shared_bytes_per_client + 1);
  if (total > options_.max_shared_bytes_per_client) {
    return Error(Status::ResourceExhausted(std::to_string(total) + " bytes of shared segments, over the limit of " +
                                           std::to_string(options_.max_shared_bytes_per_client)),
                 true);
  }
  for (std::size_t i = 0; i < fds.size(); ++i) {
    Result<SharedSegment> segment = SharedSegment::Map(std::move(fds[i]), m.segment_bytes[i]);
    if (!segment.ok()) return Error(segment.status(), true);
    segments_.push_back(std::move(*segment));
  }
  fds.clear();
  tenant_.emplace(m.tenant, options_.tenant_keys);
  // The client's version, which this server speaks too (frames of others do not decode).
  return {protocol::HelloReply{version, static_cast<uint32_t>(store_.tier_count())}};
}

Result<std::span<std::byte>> Session::Resolve(const protocol::PayloadRef& ref) const {
  if (ref.segment >= segments_.size()) {
    return Status::InvalidArgument("shared segment " + std::to_string(ref.segment) + " was not announced in Hello");
  }
  return segments_[ref.segment].Slice(ref.offset, ref.length);
}

Reply Session::Lookup(const protocol::Lookup& m) {
  protocol::LookupReply reply;
  uint64_t blocks = 0;
  for (const auto& chain : m.chains) {
    LookupResult found = store_.Lookup(tenant_->Map(chain));
    protocol::ChainLookup c{.prefix_blocks = static_cast<uint32_t>(found.prefix_blocks),
                            .load_blocks = static_cast<uint32_t>(found.load_blocks),
                            .tier = std::vector<uint8_t>(found.tier.begin(), found.tier.end()),
                            .bytes = std::move(found.bytes)};
    reply.chains.push_back(std::move(c));
    blocks += chain.size();
  }
  return {std::move(reply), false, blocks, 0};
}

Reply Session::Put(const protocol::Put& m) {
  std::vector<BlockPut> puts;
  puts.reserve(m.blocks.size());
  uint64_t bytes = 0;
  for (const protocol::PutBlock& b : m.blocks) {
    std::span<const std::byte> payload = b.inline_bytes;
    if (b.payload.segment != protocol::PayloadRef::kInline) {
      Result<std::span<std::byte>> shared = Resolve(b.payload);
      if (!shared.ok()) return Error(shared.status());
      payload = *shared;
    }
    bytes += payload.size();
    // The client's checksum goes down to the tier, which checks the bytes against it while
    // it copies them: no extra pass here, and no byte changed after the client hashed it (in
    // the segment, the socket or this process) is stored.
    puts.push_back({.key = tenant_->Map(b.key), .payload = payload, .tokens = b.tokens, .type = b.type,
                    .transition = b.transition, .checksum = b.checksum});
  }
  std::optional<BlockKey> parent;
  if (m.parent) parent = tenant_->Map(*m.parent);
  Result<PutResult> r = store_.Put(puts, parent);
  if (!r.ok()) {
    Reply refused = Error(r.status());
    // Only a checksum the client sent makes a tier refuse a write as Corruption.
    const bool checksummed = !m.blocks.empty() && m.blocks.front().checksum.has_value();
    if (r.status().code() == StatusCode::kCorruption && checksummed) refused.put_checksum_mismatches = 1;
    return refused;
  }
  return {protocol::PutReply{static_cast<uint32_t>(r->new_blocks), static_cast<uint32_t>(r->present_blocks),
                             static_cast<uint32_t>(r->refused_blocks)},
          false, m.blocks.size(), bytes};
}

Reply Session::Get(const protocol::Get& m, uint16_t version) {
  std::vector<std::span<std::byte>> outs;
  outs.reserve(m.keys.size());
  // Inline destinations (TCP clients) are read into one buffer the reply then carries; their
  // total is bounded like a frame, which bounds the memory one client can make us hold. It is
  // not zeroed: the reply views only the bytes the store wrote.
  uint64_t inline_bytes = 0;
  const bool inline_reply = !m.destinations.empty() && m.destinations[0].segment == protocol::PayloadRef::kInline;
  for (const protocol::PayloadRef& d : m.destinations) {
    if ((d.segment == protocol::PayloadRef::kInline) != inline_reply) {
      return Error(Status::InvalidArgument("a Get's destinations must be all inline or all shared"));
    }
    inline_bytes += d.length;
  }
  std::unique_ptr<std::byte[]> inline_storage;
  if (inline_reply) {
    // the blocks' bytes, each with its size and length fields (and its checksum in version
    // 2), and the reply's two counts
    const uint64_t frame_bytes = inline_bytes + m.destinations.size() * (version >= 2 ? 16 : 8) + 8;
    if (frame_bytes > options_.limits.max_payload_bytes) {
      return Error(Status::ResourceExhausted("a Get of " + std::to_string(frame_bytes) +
                                             " inline bytes is over the frame limit; use shared memory or smaller batches"));
    }
    inline_storage = std::make_unique_for_overwrite<std::byte[]>(inline_bytes);
  }
  std::size_t inline_at = 0;
  for (const protocol::PayloadRef& d : m.destinations) {
    if (inline_reply) {
      outs.emplace_back(inline_storage.get() + inline_at, d.length);
      inline_at += d.length;
    } else {
      Result<std::span<std::byte>> shared = Resolve(d);
      if (!shared.ok()) return Error(shared.status());
      outs.push_back(*shared);
    }
  }
  std::vector<std::size_t> sizes(m.keys.size(), 0);
  // Version 2: each block's stored checksum (its writer's), which the tier checked the bytes
  // against as it copied them into `outs`; the client checks its copy against it in turn.
  std::vector<uint64_t> checksums(version >= 2 ? m.keys.size() : 0, 0);
  Result<std::size_t> read = store_.Get(tenant_->Map(m.keys), outs, m.transition, sizes, checksums);
  if (!read.ok()) return Error(read.status());
  protocol::GetReply reply;
  if (!checksums.empty()) reply.checksums.assign(checksums.begin(), checksums.begin() + static_cast<std::ptrdiff_t>(*read));
  uint64_t bytes = 0;
  for (std::size_t i = 0; i < *read; ++i) {
    reply.sizes.push_back(static_cast<uint32_t>(sizes[i]));
    bytes += sizes[i];
  }
  if (inline_reply) {
    for (std::size_t i = 0; i < *read; ++i) reply.inline_blocks.push_back(outs[i].first(sizes[i]));
  }
  return {.message = std::move(reply), .blocks = *read, .payload_bytes = bytes, .inline_storage = std::move(inline_storage)};
}

Reply Session::Pin(const protocol::Pin& m) {
  if (pins_.size() >= options_.max_pins_per_client) {
    return Error(Status::ResourceExhausted("this connection holds " + std::to_string(pins_.size()) +
                                           " pins, the limit; unpin some first"));
  }
  Result<StorePin> pin = store_.Pin(tenant_->Map(m.keys));
  if (!pin.ok()) return Error(pin.status());
  const uint64_t id = next_pin_id_++;
  const auto pinned = static_cast<uint32_t>(pin->size());
  pins_.emplace(id, std::move(*pin));
  return {protocol::PinReply{id, pinned}, false, m.keys.size(), 0};
}

Reply Session::Unpin(const protocol::Unpin& m) {
  if (pins_.erase(m.pin_id) == 0) return Error(Status::NotFound("no pin " + std::to_string(m.pin_id) + " on this connection"));
  return {protocol::EmptyReply{}};
}

Reply Session::Expect(const protocol::Expect& m) {
  if (expectations_.size() >= options_.max_expectations_per_client) {
    return Error(Status::ResourceExhausted("this connection holds " + std::to_string(expectations_.size()) +
                                           " expectations, the limit; withdraw some first (Unexpect)"));
  }
  const uint64_t id = next_expect_id_++;
  expectations_.emplace(id, store_.Expect(tenant_->Map(m.keys)));
  return {protocol::ExpectReply{id}, false, m.keys.size(), 0};
}

Reply Session::Unexpect(const protocol::Unexpect& m) {
  if (expectations_.erase(m.expect_id) == 0) {
    return Error(Status::NotFound("no expectation " + std::to_string(m.expect_id) + " on this connection"));
  }
  return {protocol::EmptyReply{}};
}

Reply Session::Tags(const protocol::Tags& m) {
  std::vector<BlockTags> updates;
  updates.reserve(m.updates.size());
  for (const protocol::TagUpdate& u : m.updates) {
    updates.push_back({.key = tenant_->Map(u.key), .type = u.type, .transition = u.transition});
  }
  store_.Retag(updates);
  return {protocol::EmptyReply{}, false, m.updates.size(), 0};
}

Reply Session::Importance(const protocol::Importance& m) {
  if (!options_.head_importance) {
    return Error(Status::FailedPrecondition("this server has no head layout configured (model and head_granular in its config)"));
  }
  // All or nothing: a batch with one bad report changes nothing.
  const HeadImportance& importance = *options_.head_importance;
  for (const protocol::ImportanceReport& r : m.reports) {
    if (r.layer >= importance.layers() || r.head >= importance.kv_heads() || !std::isfinite(r.value)) {
      return Error(Status::InvalidArgument("importance report (layer " + std::to_string(r.layer) + ", head " +
                                           std::to_string(r.head) + ") is outside the " +
                                           std::to_string(importance.layers()) + " x " +
                                           std::to_string(importance.kv_heads()) + " head layout or not finite"));
    }
  }
  for (const protocol::ImportanceReport& r : m.reports) {
    if (Status s = options_.head_importance->Report(r.layer, r.head, r.value); !s.ok()) return Error(s);
  }
  return {protocol::EmptyReply{}, false, m.reports.size(), 0};
}

Reply Session::Stats() { return {protocol::StatsReply{StatsJson(store_.GetStats(), store_.PredictorJson())}}; }

}  // namespace kvtier::server
