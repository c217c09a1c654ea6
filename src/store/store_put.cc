// The store's put path (store_state.h): a chain's new blocks go into the fastest tier that
// admits them (with write-through, into the persist tier first); blocks already stored are
// touched.
#include <algorithm>
#include <cstring>
#include <limits>
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
    auto full = [&] { return ts.capacity > 0 && ts.used() + meta.size_bytes > ts.capacity; };
    if (full()) {  // most writes find room: only a full tier asks its policy
      SharedSection section(*this);  // the policy sees the Gets' hits first
      if (full() && !ts.policy->ShouldAdmit(Resident(key, meta, b), Now())) {
        CountInTier(t, &TierState::Accounts::refused);
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
  // The chain's blocks stay pinned until the whole chain is in (room for block i + 1 must
  // not come from evicting block i), and the blocks indexed for a write are held until it is
  // recorded. Both are let go by the last section, or here on the way out of an error.
  struct Progress : PutProgress {
    Impl& s;
    explicit Progress(Impl& store) : s(store) {}
    // Shared is enough when nothing is held (each pin is let go under its block's shard).
    void ReleaseLocked() {
      s.ReleaseHeldLocked(*this);
      for (const BlockKey& key : pinned) {
        BlockGuard guard(s.blocks, BlockGuard::Mode::kExclusive, key);
        Block* entry = s.blocks.Find(key);
        if (entry != nullptr && entry->pins > 0) --entry->pins;
        s.RefreshEvictableLocked(key);
      }
      pinned.clear();
    }
    ~Progress() {
      if (pinned.empty() && held.empty()) return;
      {
        ExclusiveLock lock(s);
        ReleaseLocked();
      }
      s.KickRebalances();
    }
  } progress{*this};
  std::vector<BlockMeta> metas(chain.size());
  std::vector<Block> blocks_to_put(chain.size());
  DescribeChain(chain, parent, metas, blocks_to_put);
  std::optional<BlockKey> previous = parent;
  std::size_t next = 0;
  std::vector<PutWrite> written;  // the last batch's writes, recorded by the next section
  Status failed = Status::Ok();   // ends the put once its writes so far are recorded
  for (;;) {
    std::vector<std::pair<std::size_t, PutAction>> batch;
    bool recorded = false;  // `written` is recorded
    bool stop = false;      // the put ends: done, refused or failed
    bool ended = false;
    // One section: records the last batch's writes, indexes the next batch, or ends the put.
    // With `lock` null it runs under `mu_` shared, beside other puts; what it cannot do so
    // (wait for a block another holds, forget blocks after an error) it leaves undone and
    // returns false, to go on under the exclusive lock from where it stopped.
    auto section = [&](ExclusiveLock* lock) {
      if (!recorded) {
        stop = !RecordBatchLocked(chain, written, result, progress, failed) || !failed.ok() || next == chain.size();
        recorded = true;
      }
      ended = stop;
      if (!ended) {
        bool must_wait = false;
        failed = IndexBatchLocked(chain, metas, blocks_to_put, next, previous, result, progress, batch, lock,
                                  must_wait);
        if (must_wait) return false;
        ended = stop = !failed.ok();
      }
      if (ended && lock == nullptr && !progress.held.empty()) return false;  // blocks to forget
      if (ended) {
        write_counters.puts.fetch_add(1, std::memory_order_relaxed);
        progress.ReleaseLocked();
      }
      return true;
    };
    // The common case, every write of the last batch stored, runs shared.
    bool done = false;
    if (failed.ok() && std::ranges::all_of(written, [&](const PutWrite& w) { return Stored(w); })) {
      SharedSection shared(*this);
      done = section(nullptr);
    }
    if (!done) {
      ExclusiveLock lock(*this);
      section(&lock);
    }
    if (shared_tier >= 0) {
      for (const PutWrite& w : written) {
        if (w.action == PutAction::kNew && Stored(w)) PublishPutWrite(chain[w.i], w);
      }
    }
    if (ended) break;
    written.clear();
    for (const auto& [i, action] : batch) {
      Result<PutWrite> w = WriteForPut(chain[i], i, action, metas[i], blocks_to_put[i]);
      if (!w.ok()) {
        failed = w.status();
        break;
      }
      written.push_back(std::move(*w));
      if (!Stored(written.back())) break;  // the rest of the chain is not written
    }
  }
  KickRebalances();
  if (!failed.ok()) return failed;
  return result;
}

void TieredStore::Impl::DescribeChain(std::span<const BlockPut> chain, const std::optional<BlockKey>& parent,
                                      std::span<BlockMeta> metas, std::span<Block> blocks_to_put) const {
  uint64_t tokens_before = 0;
  if (parent) {
    std::shared_lock lock(mu_);
    BlockGuard guard(blocks, BlockGuard::Mode::kShared, *parent);
    const Block* entry = blocks.Find(*parent);
    if (entry != nullptr) tokens_before = entry->tokens_before + entry->tokens;
  }
  for (std::size_t i = 0; i < chain.size(); ++i) {
    const BlockPut& p = chain[i];
    metas[i] = {.size_bytes = p.bytes != 0 ? p.bytes : static_cast<uint32_t>(p.payload.size()),
                .type = p.type,
                .transition = p.transition};
    blocks_to_put[i] = {.tokens = p.tokens,
                        .tokens_before = tokens_before,
                        .recompute_s = RecomputeSeconds(p.recompute_seconds, p.tokens, tokens_before)};
    tokens_before += p.tokens;
  }
}

bool TieredStore::Impl::RecordBatchLocked(std::span<const BlockPut> chain, std::span<const PutWrite> written,
                                          PutResult& result, PutProgress& progress, Status& failed) {
  // The writes are the first of the blocks the put holds, in the same order: once recorded,
  // they are no longer held.
  std::size_t recorded = 0;
  bool stored_all = true;
  for (const PutWrite& w : written) {
    Result<bool> stored = [&] {
      BlockGuard guard(blocks, BlockGuard::Mode::kExclusive, chain[w.i].key);
      return RecordPutWriteLocked(chain[w.i], w, result, progress.pinned);
    }();
    ++recorded;
    if (stored.ok() && *stored) {
      ++(w.action == PutAction::kNew ? result.new_blocks : result.present_blocks);
      continue;
    }
    // Refused or failed: it is the batch's last write, and nothing after it is stored.
    if (stored.ok()) {
      result.refused_blocks += chain.size() - w.i;
    } else {
      failed = stored.status();
    }
    stored_all = false;
    break;
  }
  progress.held.erase(progress.held.begin(), progress.held.begin() + static_cast<std::ptrdiff_t>(recorded));
  return stored_all;
}

uint64_t TieredStore::Impl::PutBatchBytesLocked() const {
  if (options.metadata_only) return 0;
  uint64_t smallest = 0;
  for (const TierState& ts : tiers) {
    if (ts.capacity > 0 && (smallest == 0 || ts.capacity < smallest)) smallest = ts.capacity;
  }
  if (smallest == 0) return std::numeric_limits<uint64_t>::max();  // no tier is bounded
  return static_cast<uint64_t>((1.0 - options.high_watermark) * static_cast<double>(smallest));
}

Status TieredStore::Impl::IndexBatchLocked(std::span<const BlockPut> chain, std::span<BlockMeta> metas,
                                           std::span<const Block> blocks_to_put, std::size_t& next,
                                           std::optional<BlockKey>& previous, PutResult& result,
                                           PutProgress& progress,
                                           std::vector<std::pair<std::size_t, PutAction>>& batch,
                                           ExclusiveLock* lock, bool& must_wait) {
  const uint64_t budget = PutBatchBytesLocked();
  uint64_t bytes = 0;
  while (next < chain.size() && (batch.empty() || bytes < budget)) {
    Result<PutAction> indexed = [&] {
      BlockGuard guard(blocks, BlockGuard::Mode::kExclusive, chain[next].key, previous);
      return IndexForPutLocked(chain[next], next, previous, metas[next], blocks_to_put[next], progress.pinned);
    }();
    KVTIER_ASSIGN_OR_RETURN(const PutAction action, std::move(indexed));
    if (action == PutAction::kWait) {
      if (!batch.empty()) return Status::Ok();  // the blocks before it go first
      // A wait sleeps on move_done_ with `mu_` held exclusively: the look and the sleep are
      // one step against a mover letting the block go, which needs `mu_` too.
      if (lock == nullptr) {
        must_wait = true;
        return Status::Ok();
      }
      move_done_.wait(*lock);
      continue;
    }
    if (action != PutAction::kPresent) {
      progress.held.emplace_back(chain[next].key, action);
      batch.emplace_back(next, action);
      bytes += metas[next].size_bytes;
    } else {
      ++result.present_blocks;
    }
    previous = chain[next].key;
    ++next;
  }
  return Status::Ok();
}

void TieredStore::Impl::ReleaseHeldLocked(PutProgress& progress) {
  for (auto held = progress.held.rbegin(); held != progress.held.rend(); ++held) {
    const auto& [key, action] = *held;
    Block* entry = blocks.Find(key);
    if (entry == nullptr) continue;
    if (entry->moving) EndMoveLocked(key, *entry);
    if (action == PutAction::kNew) ForgetLocked(key);
  }
  progress.held.clear();
}

Result<TieredStore::Impl::PutWrite> TieredStore::Impl::WriteForPut(const BlockPut& p, std::size_t i, PutAction action,
                                                                    const BlockMeta& meta, const Block& b) {
  PutWrite w{.i = i, .action = action, .meta = meta};
  if (action == PutAction::kRepersist) {
    w.persisted = Persist(p.key, p.payload, meta.size_bytes, p.checksum);
    return w;
  }
  // The payload may be a client's shared segment, still being written: when two tiers get a
  // copy (write-through into a persist tier below a faster one, or a publish to the shared
  // tier), they must get the same bytes, so they are read from it once.
  w.payload = p.payload;
  if (!p.payload.empty() && (shared_tier >= 0 || (write_through() && persist_tier > 0))) {
    w.copy = std::make_shared<AlignedBufferPool::Buffer>(payload_copies.Acquire(p.payload.size()));
    if (*w.copy == nullptr) {
      return Status::ResourceExhausted("store: no memory to copy a block of " + std::to_string(p.payload.size()) +
                                       " bytes");
    }
    std::memcpy(w.copy->get(), p.payload.data(), p.payload.size());
    w.payload = {w.copy->get(), p.payload.size()};
  }
  // Write-through: the persist tier's copy (with its journal record) first, then a copy in a
  // faster tier that admits it; the block is stored once the persist tier holds it.
  if (write_through()) {
    w.persisted = Persist(p.key, w.payload, meta.size_bytes, p.checksum);
    if (w.persisted.ok()) w.placed = Place(p.key, meta, b, w.payload, persist_tier, p.checksum);
  } else {
    w.placed = Place(p.key, meta, b, w.payload, last_tier() + 1, p.checksum);
  }
  if (shared_tier < 0) {
    // Only a publish reads the copy later: back to the pool now, so that a batch in flight
    // holds one copy at a time and the pool's buffers are reused rather than faulted in anew.
    w.copy.reset();
    w.payload = {};
  }
  return w;
}

void TieredStore::Impl::PublishPutWrite(const BlockPut& p, const PutWrite& w) {
  if (options.publish_in_background) {
    Schedule([this, key = p.key, copy = w.copy, once = w.payload, meta = w.meta, sum = p.checksum] {
      Publish(key, once, meta, sum);
    });
  } else {
    Publish(p.key, w.payload, w.meta, p.checksum);
  }
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
    Block* entry = blocks.Find(p.key);
    const bool unpersisted = write_through() && !(info->meta.tiers & durable) &&
                             info->meta.size_bytes == meta.size_bytes && entry != nullptr;
    // Write-through acknowledges a block once the persist tier holds it: one a mover holds
    // (demoting it, perhaps into the persist tier, perhaps failing) is the mover's until it
    // lets go; then this Put looks again.
    if (unpersisted && entry->moving) return PutAction::kWait;
    write_counters.put_blocks.fetch_add(1, std::memory_order_relaxed);
    index.Touch({&p.key, 1}, static_cast<uint64_t>(Now() * 1e6));
    tier_state(FastestTier(info->meta.tiers)).policy->Touch(p.key, p.transition, Now());
    if (entry != nullptr) {
      ++entry->pins;
      pinned.push_back(p.key);
      if (unpersisted) BeginMoveLocked(p.key, *entry);
      RefreshEvictableLocked(p.key);
    }
    meta = info->meta;
    return unpersisted ? PutAction::kRepersist : PutAction::kPresent;
  }
  // A block held by no tier whose last copy a mover is still evicting: written now, the new
  // copy could be the one the eviction deletes.
  if (Block* entry = blocks.Find(p.key); info && entry != nullptr && entry->moving) return PutAction::kWait;
  write_counters.put_blocks.fetch_add(1, std::memory_order_relaxed);
  if (!info) {
    Result<std::size_t> inserted = index.Insert({&p.key, 1}, {&meta, 1}, static_cast<uint64_t>(Now() * 1e6), previous);
    if (!inserted.ok()) return inserted.status().WithContext("store: block " + std::to_string(i));
    blocks[p.key] = b;
    if (previous) RefreshEvictableLocked(*previous);  // it has a child now
  }
  BeginMoveLocked(p.key, blocks[p.key]);  // this put's until its write is recorded
  return PutAction::kNew;
}

Result<bool> TieredStore::Impl::RecordPutWriteLocked(const BlockPut& p, const PutWrite& w, const PutResult& so_far,
                                                     std::vector<BlockKey>& pinned) {
  Block* entry = blocks.Find(p.key);
  if (entry != nullptr && entry->moving) EndMoveLocked(p.key, *entry);  // this put held it
  if (w.action == PutAction::kRepersist) {
    if (entry != nullptr) {
      if (w.persisted.ok()) AddToTierLocked(p.key, persist_tier, w.meta, *entry);
      RefreshEvictableLocked(p.key);
    }
    if (w.persisted.ok()) return true;
    if (w.persisted.code() != StatusCode::kResourceExhausted) {
      return w.persisted.WithContext("store: persisting block " + std::to_string(w.i));
    }
    CountInTier(persist_tier, &TierState::Accounts::refused);
    return false;
  }
  if (!Stored(w)) {
    ForgetLocked(p.key);
    if (!w.persisted.ok() && w.persisted.code() != StatusCode::kResourceExhausted) {
      return w.persisted.WithContext("store: persisting block " + std::to_string(w.i));
    }
    if (!w.persisted.ok()) CountInTier(persist_tier, &TierState::Accounts::refused);
    // A payload that is not what its writer hashed is the writer's error to see, wherever
    // in the chain it is.
    if (!w.placed.ok() && w.placed.status().code() == StatusCode::kCorruption) {
      return w.placed.status().WithContext("store: block " + std::to_string(w.i));
    }
    // A tier that is full even after making room, or down (a remote pool), refuses: for a
    // cache, a block it cannot hold now is a miss later, not a failure of the request.
    if (!w.placed.ok() && w.placed.status().code() != StatusCode::kUnavailable &&
        w.placed.status().code() != StatusCode::kResourceExhausted && so_far.new_blocks + so_far.present_blocks == 0) {
      return w.placed.status();
    }
    return false;
  }
  ++entry->pins;
  pinned.push_back(p.key);
  // Held by these tiers only (it is new), each told it is pinned as it admits it.
  if (write_through()) AddToTierLocked(p.key, persist_tier, w.meta, *entry);
  if (w.placed.ok() && *w.placed >= 0) AddToTierLocked(p.key, *w.placed, w.meta, *entry);
  return true;
}

}  // namespace kvtier
