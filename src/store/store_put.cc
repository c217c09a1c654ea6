// The store's put path (store_state.h): a chain's new blocks go into the fastest tier that
// admits them (with write-through, into the persist tier first); blocks already stored are
// touched.
#include <cstring>
#include <memory>

#include "store/store_state.h"

namespace kvtier {
namespace {

// A Put's request is checked whole before any of its blocks is stored.
Status CheckChain(std::span<const BlockPut> chain, bool metadata_only) {
  if (chain.empty()) return Status::InvalidArgument("store: Put of an empty chain");
  for (std::size_t i = 0; i < chain.size(); ++i) {
    const uint64_t bytes = chain[i].bytes != 0 ? chain[i].bytes : chain[i].payload.size();
    if (bytes == 0) return Status::InvalidArgument("store: block " + std::to_string(i) + " has no payload and no size");
    if (!chain[i].payload.empty() && chain[i].payload.size() != bytes) {
      return Status::InvalidArgument("store: block " + std::to_string(i) + " states " + std::to_string(bytes) +
                                     " bytes but carries " + std::to_string(chain[i].payload.size()));
    }
  }
  for (std::size_t i = 0; i < chain.size(); ++i) {
    if (metadata_only != chain[i].payload.empty()) {
      return Status::InvalidArgument(
          std::string("store: block ") + std::to_string(i) +
          (metadata_only ? " carries a payload into a metadata-only store" : " has no payload"));
    }
  }
  return Status::Ok();
}

}  // namespace

Result<int> TieredStore::Impl::Place(const BlockKey& key, const BlockMeta& meta, const Block& b,
                                     std::span<const std::byte> payload, int end, std::optional<uint64_t> checksum) {
  Status last_error = Status::Ok();
  for (int t = 0; t < end; ++t) {
    TierState& ts = tier_state(t);
    auto full = [&] { return ts.capacity > 0 && ts.used + meta.size_bytes > ts.capacity; };
    bool room = false;
    {
      std::shared_lock lock(mu_);  // most writes find room: only a full tier asks its policy
      room = !full();
    }
    if (!room) {
      ExclusiveLock lock(*this);
      if (full() && !ts.policy->ShouldAdmit(Resident(key, meta, b), Now())) {
        ++ts.stats.refused;
        continue;
      }
    }
    const Status s = WriteMakingRoom(t, key, payload, meta.size_bytes, checksum);
    if (s.ok()) return t;
    // The bytes are not the writer's: no other tier would get better ones.
    if (s.code() == StatusCode::kCorruption) return s;
    last_error = s;
  }
  if (!last_error.ok()) return last_error;
  return -1;
}

Result<PutResult> TieredStore::Impl::Put(std::span<const BlockPut> chain, const std::optional<BlockKey>& parent) {
  KVTIER_RETURN_IF_ERROR(CheckChain(chain, options.metadata_only));
  PutResult result;
  // The chain's blocks stay pinned until the whole chain is in: room for block i + 1 must not
  // come from evicting block i. Unpinned on every way out.
  struct ChainPins {
    Impl& s;
    std::vector<BlockKey> keys;
    ~ChainPins() {
      {
        ExclusiveLock lock(s);
        for (const BlockKey& key : keys) {
          auto it = s.blocks.find(key);
          if (it != s.blocks.end() && it->second.pins > 0) --it->second.pins;
          s.RefreshEvictableLocked(key);
        }
      }
      s.KickRebalances();
    }
  } putting{*this, {}};
  std::optional<BlockKey> previous = parent;
  uint64_t tokens_before = 0;
  if (parent) {
    std::shared_lock lock(mu_);
    auto it = blocks.find(*parent);
    if (it != blocks.end()) tokens_before = it->second.tokens_before + it->second.tokens;
  }
  for (std::size_t i = 0; i < chain.size(); ++i) {
    const BlockPut& p = chain[i];
    const uint32_t bytes = p.bytes != 0 ? p.bytes : static_cast<uint32_t>(p.payload.size());
    BlockMeta meta{.size_bytes = bytes, .type = p.type, .transition = p.transition};
    const Block b{.tokens = p.tokens,
                  .tokens_before = tokens_before,
                  .recompute_s = RecomputeSeconds(p.recompute_seconds, p.tokens, tokens_before)};
    tokens_before += p.tokens;
    PutAction action = PutAction::kWait;
    {
      ExclusiveLock lock(*this);
      while (action == PutAction::kWait) {
        KVTIER_ASSIGN_OR_RETURN(action, IndexForPutLocked(p, i, previous, meta, b, putting.keys));
        if (action == PutAction::kWait) move_done_.wait(lock);
      }
    }
    Result<bool> stored = true;
    if (action == PutAction::kRepersist) stored = Repersist(p, i, meta);
    if (action == PutAction::kNew) {
      // The payload may be a client's shared segment, still being written: when two tiers get
      // a copy (write-through into a persist tier below a faster one, or a publish to the
      // shared tier), they must get the same bytes, so they are read from it once.
      std::shared_ptr<AlignedBufferPool::Buffer> copy;  // shared: a background publish keeps it
      BlockPut put = p;
      if (!p.payload.empty() && (shared_tier >= 0 || (write_through() && persist_tier > 0))) {
        copy = std::make_shared<AlignedBufferPool::Buffer>(payload_copies.Acquire(p.payload.size()));
        if (*copy == nullptr) {
          return Status::ResourceExhausted("store: no memory to copy a block of " + std::to_string(p.payload.size()) +
                                           " bytes");
        }
        std::memcpy(copy->get(), p.payload.data(), p.payload.size());
        put.payload = {copy->get(), p.payload.size()};
      }
      const std::span<const std::byte> once = put.payload;
      stored = StoreNew(put, i, meta, b, result, putting.keys);
      if (stored.ok() && *stored && shared_tier >= 0 && options.publish_in_background) {
        Schedule([this, key = p.key, copy, once, meta, sum = p.checksum] { Publish(key, once, meta, sum); });
      } else if (stored.ok() && *stored && shared_tier >= 0) {
        Publish(p.key, once, meta, p.checksum);
      }
    }
    if (!stored.ok()) return stored.status();
    if (!*stored) {
      result.refused_blocks += chain.size() - i;
      break;
    }
    if (action == PutAction::kNew) {
      ++result.new_blocks;
    } else {
      ++result.present_blocks;
    }
    previous = p.key;
  }
  {
    ExclusiveLock lock(*this);
    ++stats.puts;
  }
  return result;
}

Result<TieredStore::Impl::PutAction> TieredStore::Impl::IndexForPutLocked(const BlockPut& p, std::size_t i,
                                                                          const std::optional<BlockKey>& previous,
                                                                          BlockMeta& meta, const Block& b,
                                                                          std::vector<BlockKey>& pinned) {
  const std::optional<BlockInfo> info = index.Find(p.key);
  if (info && info->meta.tiers != 0) {
    if (info->parent != previous) {
      return Status::AlreadyExists("store: block " + p.key.ToHex() +
                                   " is stored under another parent (a hash collision)");
    }
    auto it = blocks.find(p.key);
    const bool unpersisted = write_through() && !(info->meta.tiers & durable) &&
                             info->meta.size_bytes == meta.size_bytes && it != blocks.end();
    // Write-through acknowledges a block once the persist tier holds it: one a mover holds
    // (demoting it, perhaps into the persist tier, perhaps failing) is the mover's until it
    // lets go; then this Put looks again.
    if (unpersisted && it->second.moving) return PutAction::kWait;
    ++stats.put_blocks;
    index.Touch({&p.key, 1}, static_cast<uint64_t>(Now() * 1e6));
    tier_state(FastestTier(info->meta.tiers)).policy->Touch(p.key, p.transition, Now());
    if (it != blocks.end()) {
      ++it->second.pins;
      pinned.push_back(p.key);
      if (unpersisted) BeginMoveLocked(p.key, it->second);
      RefreshEvictableLocked(p.key);
    }
    meta = info->meta;
    return unpersisted ? PutAction::kRepersist : PutAction::kPresent;
  }
  // A block held by no tier whose last copy a mover is still evicting: written now, the new
  // copy could be the one the eviction deletes.
  if (auto it = blocks.find(p.key); info && it != blocks.end() && it->second.moving) return PutAction::kWait;
  ++stats.put_blocks;
  if (!info) {
    Result<std::size_t> inserted = index.Insert({&p.key, 1}, {&meta, 1}, static_cast<uint64_t>(Now() * 1e6), previous);
    if (!inserted.ok()) return inserted.status().WithContext("store: block " + std::to_string(i));
    blocks[p.key] = b;
    if (previous) RefreshEvictableLocked(*previous);  // it has a child now
  }
  return PutAction::kNew;
}

Result<bool> TieredStore::Impl::Repersist(const BlockPut& p, std::size_t i, const BlockMeta& meta) {
  const Status persisted = Persist(p.key, p.payload, meta.size_bytes, p.checksum);
  ExclusiveLock lock(*this);
  if (auto it = blocks.find(p.key); it != blocks.end()) {
    EndMoveLocked(p.key, it->second);
    if (persisted.ok()) AddToTierLocked(p.key, persist_tier, meta, it->second);
    RefreshEvictableLocked(p.key);
  }
  if (persisted.ok()) return true;
  if (persisted.code() != StatusCode::kResourceExhausted) {
    return persisted.WithContext("store: persisting block " + std::to_string(i));
  }
  ++tier_state(persist_tier).stats.refused;
  return false;
}

Result<bool> TieredStore::Impl::StoreNew(const BlockPut& p, std::size_t i, const BlockMeta& meta, const Block& b,
                                         const PutResult& so_far, std::vector<BlockKey>& pinned) {
  // Write-through: the persist tier's copy (with its journal record) first, then a copy in
  // a faster tier that admits it; the block is stored once the persist tier holds it.
  Result<int> placed = -1;
  Status persisted = Status::Ok();
  if (write_through()) {  // p.payload is a private copy when two tiers get it (Put)
    persisted = Persist(p.key, p.payload, meta.size_bytes, p.checksum);
    if (persisted.ok()) placed = Place(p.key, meta, b, p.payload, persist_tier, p.checksum);
  } else {
    placed = Place(p.key, meta, b, p.payload, last_tier() + 1, p.checksum);
  }
  ExclusiveLock lock(*this);
  const bool stored = write_through() ? persisted.ok() : placed.ok() && *placed >= 0;
  if (!stored) {
    ForgetLocked(p.key);
    if (!persisted.ok() && persisted.code() != StatusCode::kResourceExhausted) {
      return persisted.WithContext("store: persisting block " + std::to_string(i));
    }
    if (!persisted.ok()) ++tier_state(persist_tier).stats.refused;
    // A payload that is not what its writer hashed is the writer's error to see, wherever
    // in the chain it is.
    if (!placed.ok() && placed.status().code() == StatusCode::kCorruption) {
      return placed.status().WithContext("store: block " + std::to_string(i));
    }
    // A tier that is full even after making room, or down (a remote pool), refuses: for a
    // cache, a block it cannot hold now is a miss later, not a failure of the request.
    if (!placed.ok() && placed.status().code() != StatusCode::kUnavailable &&
        placed.status().code() != StatusCode::kResourceExhausted && so_far.new_blocks + so_far.present_blocks == 0) {
      return placed.status();
    }
    return false;
  }
  auto it = blocks.find(p.key);
  ++it->second.pins;
  pinned.push_back(p.key);
  if (write_through()) AddToTierLocked(p.key, persist_tier, meta, it->second);
  if (placed.ok() && *placed >= 0) AddToTierLocked(p.key, *placed, meta, it->second);
  RefreshEvictableLocked(p.key);
  return true;
}

}  // namespace kvtier
