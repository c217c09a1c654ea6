// Persistence (store_state.h): the journal of the blocks in the durable tiers (the persist
// tier and those below it that survive a restart), write-through, Flush, and recovery at Open
// (docs/store.md, "Persistence"). The journal has its own lock and is never called under `mu_`.
#include <filesystem>

#include "store/store_state.h"

namespace kvtier {

std::optional<JournalRecord> TieredStore::Impl::JournalRecordLocked(const BlockKey& key, TierMask held) const {
  const std::optional<BlockInfo> info = index.Find(key);
  BlockGuard guard(blocks, BlockGuard::Mode::kShared, key);
  const Block* entry = blocks.Find(key);
  if (!info || entry == nullptr) return std::nullopt;
  return JournalRecord{.kind = JournalRecord::Kind::kPut,
                       .key = key,
                       .parent = info->parent,
                       .tiers = held,
                       .tokens = entry->tokens,
                       .bytes = info->meta.size_bytes,
                       .type = info->meta.type,
                       .transition = info->meta.transition,
                       .recompute_seconds = entry->recompute_s};
}

Status TieredStore::Impl::JournalPuts(int t, std::span<const BlockKey> keys) {
  std::vector<JournalRecord> records;
  {
    std::shared_lock lock(mu_);  // only reads: puts journal their blocks side by side
    for (const BlockKey& key : keys) {
      const std::optional<BlockInfo> info = index.Find(key);
      const TierMask held = static_cast<TierMask>(((info ? info->meta.tiers : 0) & durable) | (1u << t));
      std::optional<JournalRecord> record = JournalRecordLocked(key, held);
      if (!record) return Status::NotFound("store: block " + key.ToHex() + " left the store");
      records.push_back(*record);
    }
  }
  KVTIER_RETURN_IF_ERROR(journal->Append(records, /*durable=*/true));
  MaybeCompactJournal();
  return Status::Ok();
}

void TieredStore::Impl::JournalEviction(int t, const BlockKey& key) {
  std::optional<JournalRecord> record;
  {
    std::shared_lock lock(mu_);
    const std::optional<BlockInfo> info = index.Find(key);
    const TierMask left = static_cast<TierMask>((info ? info->meta.tiers : 0) & durable & ~(1u << t));
    if (left != 0) record = JournalRecordLocked(key, left);
  }
  if (!record) record = JournalRecord{.kind = JournalRecord::Kind::kDrop, .key = key};
  (void)journal->Append({&*record, 1}, /*durable=*/false);  // at worst recovery finds the copy gone
  MaybeCompactJournal();
}

void TieredStore::Impl::MaybeCompactJournal() {
  uint64_t live = 0;  // copies in durable tiers: at least the blocks the journal lists
  {
    std::shared_lock lock(mu_);
    for (int t = 0; t <= last_tier(); ++t) {
      if (durable & (1u << t)) live += tier_state(t).accounts->blocks.load(std::memory_order_relaxed);
    }
  }
  const uint64_t min_records = options.persistence->compact_journal_min_records;
  const uint64_t records = journal->records();
  if (records <= 2 * live + min_records || records <= compaction_floor.load()) return;
  if (compaction_queued.exchange(true)) return;
  Schedule([this, records, min_records] {
    const Status compacted = journal->Compact();
    {
      ExclusiveLock lock(*this);
      if (compacted.ok()) {
        ++stats.journal_compactions;
      } else {
        ++stats.journal_compaction_failures;
        compaction_floor = records + min_records;  // a full disk: try again after as many records more
      }
    }
    compaction_queued = false;
  });
}

Status TieredStore::Impl::Persist(const BlockKey& key, std::span<const std::byte> payload, uint32_t bytes,
                                  std::optional<uint64_t> checksum) {
  return WriteMakingRoom(persist_tier, key, payload, bytes, checksum);
}

Status TieredStore::Impl::CopyToPersistTier(const BlockKey& key, std::vector<std::byte>& buffer) {
  int from = -1;
  BlockMeta meta;
  {
    ExclusiveLock lock(*this);
    const std::optional<BlockInfo> info = index.Find(key);
    Block* entry = blocks.Find(key);
    if (!info || entry == nullptr || info->meta.tiers == 0 || (info->meta.tiers & durable)) {
      return Status::Ok();  // dropped meanwhile, or persisted already
    }
    if (entry->moving) return Status::Unavailable("store: block " + key.ToHex() + " was moving; Flush again");
    from = FastestTier(info->meta.tiers);
    meta = info->meta;
    BeginMoveLocked(key, *entry);  // stays where it is until it is copied
  }
  buffer.resize(meta.size_bytes);
  uint64_t checksum = 0;  // carried to the persist tier, which checks the copy against it
  Status s = ReadFrom(from, key, buffer, &checksum);
  if (s.ok()) s = Persist(key, buffer, meta.size_bytes, checksum);
  ExclusiveLock lock(*this);
  Block* entry = blocks.Find(key);
  if (entry == nullptr) return s;
  EndMoveLocked(key, *entry);
  if (s.ok()) AddToTierLocked(key, persist_tier, meta, *entry);
  RefreshEvictableLocked(key);
  return s.WithContext("store: flushing block " + key.ToHex());
}

namespace {

// Recovery verifies journaled blocks this many (or this many bytes) per ReadBatch.
constexpr std::size_t kRecoveryBatch = 64;
constexpr std::size_t kRecoveryBatchBytes = 64u << 20;

// What recovery starts from: the last record of each key in the journal, when it is a put
// (none when there is no journal yet).
struct LiveRecords {
  std::vector<JournalRecord> records;
  uint64_t ignored_bytes = 0;  // of a torn or corrupt tail
};

Result<LiveRecords> ReadLiveRecords(const std::string& journal_path) {
  LiveRecords live;
  Result<BlockJournal::Contents> read = BlockJournal::Read(journal_path);
  if (!read.ok()) {
    if (read.status().code() == StatusCode::kNotFound) return live;
    return read.status().WithContext("store: persistence");
  }
  live.ignored_bytes = read->ignored_bytes;
  std::unordered_map<BlockKey, std::size_t, BlockKeyHash> last;
  for (std::size_t i = 0; i < read->records.size(); ++i) last[read->records[i].key] = i;
  for (std::size_t i = 0; i < read->records.size(); ++i) {
    const JournalRecord& r = read->records[i];
    if (last[r.key] == i && r.kind == JournalRecord::Kind::kPut) live.records.push_back(r);
  }
  return live;
}

// Indexes into `live`, parents first: walks up from each block to the first one already
// ordered. A parent the journal does not list (or a cycle, which only a forged journal holds)
// fails when the blocks are indexed.
std::vector<std::size_t> ParentsFirst(std::span<const JournalRecord> live) {
  std::unordered_map<BlockKey, std::size_t, BlockKeyHash> by_key;
  for (std::size_t i = 0; i < live.size(); ++i) by_key[live[i].key] = i;
  std::vector<std::size_t> order;
  std::vector<bool> visited(live.size());
  for (std::size_t i = 0; i < live.size(); ++i) {
    std::vector<std::size_t> up;
    for (std::size_t j = i; !visited[j];) {
      visited[j] = true;
      up.push_back(j);
      auto parent = live[j].parent ? by_key.find(*live[j].parent) : by_key.end();
      if (parent == by_key.end()) break;
      j = parent->second;
    }
    order.insert(order.end(), up.rbegin(), up.rend());
  }
  return order;
}

// Whether each live block the journal lists in `tier` (`listed`) is there at its journaled
// size and, with `verify_checksums`, reads back intact (in batches: one ReadBatch per
// kRecoveryBatch blocks or kRecoveryBatchBytes).
std::vector<bool> FindIntact(Tier& tier, std::span<const JournalRecord> live, std::span<const std::size_t> order,
                             const std::vector<bool>& listed, bool verify_checksums) {
  std::vector<bool> intact(live.size());
  for (std::size_t i : order) intact[i] = listed[i] && tier.Size(live[i].key) == live[i].bytes;
  if (!verify_checksums) return intact;
  std::vector<std::byte> buffer;
  std::vector<Tier::ReadOp> ops;
  std::vector<std::size_t> batch;
  auto verify = [&] {
    std::size_t at = 0;
    for (std::size_t k = 0; k < batch.size(); ++k) {
      ops.push_back({live[batch[k]].key, std::span(buffer).subspan(at, live[batch[k]].bytes)});
      at += live[batch[k]].bytes;
    }
    const std::vector<Result<std::size_t>> got = tier.ReadBatch(ops);
    for (std::size_t k = 0; k < batch.size(); ++k) intact[batch[k]] = got[k].ok() && *got[k] == ops[k].out.size();
    ops.clear();
    batch.clear();
  };
  std::size_t batch_bytes = 0;
  for (std::size_t i : order) {
    if (!intact[i]) continue;
    if (!batch.empty() && (batch.size() == kRecoveryBatch || batch_bytes + live[i].bytes > kRecoveryBatchBytes)) {
      verify();
      batch_bytes = 0;
    }
    batch.push_back(i);
    batch_bytes += live[i].bytes;
    if (buffer.size() < batch_bytes) buffer.resize(batch_bytes);
  }
  if (!batch.empty()) verify();
  return intact;
}

}  // namespace

Status TieredStore::Impl::Recover() {
  const PersistenceOptions& po = *options.persistence;
  KVTIER_ASSIGN_OR_RETURN(const LiveRecords live, ReadLiveRecords(po.journal_path));
  const std::vector<std::size_t> order = ParentsFirst(live.records);
  // Where each block's durable copies are (a version 1 journal lists the persist tier only),
  // then where they are intact.
  std::vector<TierMask> listed(live.records.size()), intact(live.records.size());
  for (std::size_t i = 0; i < live.records.size(); ++i) {
    const TierMask held = live.records[i].tiers == 0 ? static_cast<TierMask>(1u << persist_tier) : live.records[i].tiers;
    listed[i] = static_cast<TierMask>(held & durable);
  }
  for (int t = 0; t <= last_tier(); ++t) {
    if (!(durable & (1u << t))) continue;
    std::vector<bool> in_t(live.records.size());
    for (std::size_t i = 0; i < live.records.size(); ++i) in_t[i] = (listed[i] & (1u << t)) != 0;
    // A remote pool is taken at its journal's word: reading it back at open would make a start
    // wait on a pool that is slow or down (timeouts per batch). Its reads verify checksums,
    // and a copy it lost is forgotten when read (a vanished copy), so trusting costs a miss.
    const std::vector<bool> found = tier_state(t).kind == TierKind::kRemotePool
                                        ? in_t
                                        : FindIntact(*tier_state(t).tier, live.records, order, in_t, po.verify_checksums);
    for (std::size_t i = 0; i < live.records.size(); ++i) {
      if (found[i]) intact[i] |= static_cast<TierMask>(1u << t);
    }
  }
  std::vector<JournalRecord> recovered;
  {
    ExclusiveLock lock(*this);
    recovered = IndexRecoveredLocked(live.records, order, intact);
    stats.journal_ignored_bytes = live.ignored_bytes;
    stats.recovered_blocks = recovered.size();
    stats.recovery_dropped_blocks = live.records.size() - recovered.size();
  }
  // Copies not recovered leave their tiers too (corrupt, or under a parent that was dropped).
  for (std::size_t i = 0; i < live.records.size(); ++i) {
    for (int t = 0; t <= last_tier(); ++t) {
      if (!((listed[i] & ~intact[i]) & (1u << t))) continue;
      // A remote pool's copies are evicted after the start, with the refused evictions
      // (EvictFrom): a pool that is down must not hold the start up.
      if (tier_state(t).kind != TierKind::kRemotePool) {
        const Status evicted = tier_state(t).tier->Evict(live.records[i].key);
        if (evicted.ok() || evicted.code() == StatusCode::kNotFound) continue;
      }
      ExclusiveLock lock(*this);
      pending_evictions[live.records[i].key] |= static_cast<TierMask>(1u << t);
    }
  }
  return OpenCompactedJournal(recovered);
}

std::vector<JournalRecord> TieredStore::Impl::IndexRecoveredLocked(std::span<const JournalRecord> live,
                                                                   std::span<const std::size_t> order,
                                                                   std::vector<TierMask>& intact) {
  std::vector<JournalRecord> recovered;
  for (std::size_t i : order) {
    const JournalRecord& r = live[i];
    if (intact[i] == 0 || (r.parent && !blocks.Contains(*r.parent))) {
      intact[i] = 0;
      continue;
    }
    const BlockMeta meta{.size_bytes = r.bytes, .type = r.type, .transition = r.transition};
    uint64_t tokens_before = 0;
    if (r.parent) tokens_before = blocks[*r.parent].tokens_before + blocks[*r.parent].tokens;
    if (!index.Insert({&r.key, 1}, {&meta, 1}, static_cast<uint64_t>(Now() * 1e6), r.parent).ok()) {
      intact[i] = 0;  // listed twice under different parents: only a forged journal does that
      continue;
    }
    const Block b{.tokens = r.tokens,
                  .tokens_before = tokens_before,
                  .recompute_s = RecomputeSeconds(r.recompute_seconds, r.tokens, tokens_before)};
    blocks[r.key] = b;
    for (int t = 0; t <= last_tier(); ++t) {
      if (intact[i] & (1u << t)) AddToTierLocked(r.key, t, meta, b);
    }
    if (r.parent) RefreshEvictableLocked(*r.parent);
    RefreshEvictableLocked(r.key);
    recovered.push_back(r);
    recovered.back().tiers = intact[i];
  }
  return recovered;
}

Status TieredStore::Impl::OpenCompactedJournal(std::span<const JournalRecord> recovered) {
  const PersistenceOptions& po = *options.persistence;
  Result<std::unique_ptr<BlockJournal>> compacted = BlockJournal::Create(po.journal_path, recovered, po.sync);
  if (compacted.ok()) {
    journal = std::move(*compacted);
    return Status::Ok();
  }
  // No room for the compacted copy (a full disk): a store that serves what it recovered
  // beats one that does not start, so go on with the journal as it is. Its records of the
  // blocks just dropped are harmless: the next recovery finds them gone from the tier.
  std::error_code ignored;
  std::filesystem::remove(po.journal_path + ".tmp", ignored);
  if (!std::filesystem::exists(po.journal_path)) return compacted.status();
  Result<std::unique_ptr<BlockJournal>> existing = BlockJournal::OpenExisting(po.journal_path, po.sync);
  if (!existing.ok()) return compacted.status();
  journal = std::move(*existing);
  return Status::Ok();
}

void TieredStore::Impl::EvictUnindexed() {
  if (options.metadata_only) return;  // such a store never reads or writes the tiers' blocks
  for (int t = 0; t <= last_tier(); ++t) {
    Tier& tier = *tier_state(t).tier;
    const Result<std::vector<BlockKey>> held = tier.ListKeys();
    if (!held.ok()) continue;  // a tier that cannot list (a shared pool) keeps what it holds
    std::vector<BlockKey> unindexed;
    {
      ExclusiveLock lock(*this);
      for (const BlockKey& key : *held) {
        const std::optional<BlockInfo> info = index.Find(key);
        if (!info || !(info->meta.tiers & (1u << t))) unindexed.push_back(key);
      }
    }
    for (const BlockKey& key : unindexed) (void)tier.Evict(key);
  }
}

Status TieredStore::Impl::Flush() {
  if (!journal) return Status::FailedPrecondition("store: Flush needs StoreOptions::persistence");
  Status first = Status::Ok();
  if (!write_through()) {
    Drain();  // blocks a mover holds are skipped below
    std::vector<BlockKey> keys;
    {
      ExclusiveLock lock(*this);
      index.ForEachBlock([&](const BlockInfo& info) {
        if (info.meta.tiers != 0 && !(info.meta.tiers & durable)) keys.push_back(info.key);
      });
    }
    std::vector<std::byte> buffer;
    uint64_t failed = 0;
    for (const BlockKey& key : keys) {
      Status copied = CopyToPersistTier(key, buffer);
      if (copied.ok()) continue;
      if (first.ok()) first = copied;
      ++failed;
    }
    KickRebalances();
    if (!first.ok()) first = first.WithContext("store: Flush left " + std::to_string(failed) + " blocks unpersisted");
  }
  const Status synced = journal->Sync();
  return first.ok() ? synced : first;
}

}  // namespace kvtier
