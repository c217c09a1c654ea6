// S3-FIFO (Yang et al., "FIFO queues are all you need for cache eviction", SOSP'23), over
// the evictable filter of a prefix cache.
//
// New blocks enter the small FIFO S (about 10% of capacity), or the main FIFO M when their
// key is in the ghost queue G (they were evicted from S recently and came back). Hits only
// bump a 2-bit frequency (capped at 3), never move anything. Victim() runs the paper's
// eviction loop: while S holds its share, look at S's oldest block, which moves to M (its
// frequency cleared) when it was accessed at least `s3fifo_move_to_main_threshold` times and
// is otherwise the victim (one-hit wonders die young); else look at M's oldest, which is
// reinserted at M's tail with frequency - 1 while it is non-zero (2-bit CLOCK) and is
// otherwise the victim. A block removed from S is remembered in G (about 90% of capacity).
//
// Evictable filter: blocks that are pinned or have a cached child stay in their queue, but
// when one reaches the head of a queue the loop sets it aside ("parks" it, O(1)) instead of
// evicting it. SetEvictable(true) puts a parked block back at the head of its queue, where
// the scan had found it, so it is judged next by its frequency exactly as it would have
// been; a block made non-evictable and evictable again before reaching the head never
// leaves its place. For a one-off chain this evicts the tail, then (its parent now a leaf,
// back at the head) the parent, and so on: tail first, as vLLM does. Each park is paid for
// by the SetEvictable(false) that caused it, so Victim() stays O(1) amortized.
//
// Queue shares count parked blocks: they hold space. Capacity is
// PolicyOptions::capacity_blocks, or the most blocks resident at once.
#include <algorithm>
#include <cmath>
#include <string_view>

#include "policy/entry_table.h"
#include "policy/ghost_queue.h"
#include "policy/id_list.h"
#include "policy/policies.h"

namespace kvtier::policy_internal {
namespace {

constexpr uint8_t kMaxFrequency = 3;

struct S3FifoEntry {
  BlockKey key;
  ListLink link;
  uint8_t frequency = 0;
  bool in_main = false;
  bool parked = false;
  bool evictable = true;
};

class S3FifoPolicy final : public EvictionPolicy {
 public:
  explicit S3FifoPolicy(const PolicyOptions& options)
      : options_(options), small_(Link{table_.entries()}), main_(Link{table_.entries()}) {}

  std::string_view name() const override { return "s3fifo"; }

  void Admit(const ResidentBlock& block, double now_s) override {
    if (table_.Find(block.key) != kNoId) return Touch(block.key, block.transition, now_s);
    const uint32_t id = table_.Insert(block.key);
    S3FifoEntry& entry = table_[id];
    entry.in_main = ghost_.Take(block.key).has_value();
    Queue(entry).PushBack(id);
    if (!entry.in_main) ++small_members_;
  }

  void Touch(const BlockKey& key, TransitionType /*transition*/, double /*now_s*/) override {
    const uint32_t id = table_.Find(key);
    if (id == kNoId) return;
    S3FifoEntry& entry = table_[id];
    if (entry.frequency < kMaxFrequency) ++entry.frequency;
  }

  void Remove(const BlockKey& key, double /*now_s*/) override {
    const uint32_t id = table_.Find(key);
    if (id == kNoId) return;
    S3FifoEntry& entry = table_[id];
    if (!entry.parked) Queue(entry).Unlink(id);
    if (!entry.in_main) {
      --small_members_;
      ghost_.Push(key, 0);
      ghost_.TrimTo(Share(options_.s3fifo_ghost_fraction));
    }
    table_.Erase(id);
  }

  void SetEvictable(const BlockKey& key, bool evictable) override {
    const uint32_t id = table_.Find(key);
    if (id == kNoId) return;
    S3FifoEntry& entry = table_[id];
    entry.evictable = evictable;
    if (evictable && entry.parked) {
      entry.parked = false;
      Queue(entry).PushFront(id);
    }
  }

  std::optional<BlockKey> Victim() override {
    const std::size_t small_share = std::max<std::size_t>(1, Share(options_.s3fifo_small_fraction));
    const auto threshold = static_cast<uint8_t>(options_.s3fifo_move_to_main_threshold);
    for (;;) {
      const bool from_small = !small_.empty() && (small_members_ >= small_share || main_.empty());
      if (!from_small && main_.empty()) return std::nullopt;
      IdList<Link>& queue = from_small ? small_ : main_;
      const uint32_t id = queue.front();
      S3FifoEntry& entry = table_[id];
      if (!entry.evictable) {
        queue.Unlink(id);
        entry.parked = true;
      } else if (from_small && entry.frequency >= threshold) {
        small_.Unlink(id);
        --small_members_;
        entry.in_main = true;
        entry.frequency = 0;
        main_.PushBack(id);
      } else if (!from_small && entry.frequency > 0) {
        --entry.frequency;
        main_.Unlink(id);
        main_.PushBack(id);
      } else {
        return entry.key;
      }
    }
  }

  std::size_t size() const override { return table_.size(); }

 private:
  struct Link {
    std::vector<S3FifoEntry>* entries;
    ListLink& operator()(uint32_t id) const { return (*entries)[id].link; }
  };

  IdList<Link>& Queue(const S3FifoEntry& entry) { return entry.in_main ? main_ : small_; }
  std::size_t Share(double fraction) const {
    const std::size_t capacity = options_.capacity_blocks > 0 ? options_.capacity_blocks : table_.high_water();
    return static_cast<std::size_t>(std::floor(fraction * static_cast<double>(capacity)));
  }

  const PolicyOptions options_;
  EntryTable<S3FifoEntry> table_;
  IdList<Link> small_;  // oldest first; parked blocks are out of the lists
  IdList<Link> main_;
  std::size_t small_members_ = 0;  // in S, parked or not
  GhostQueue<uint8_t> ghost_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewS3FifoPolicy(const PolicyOptions& options) {
  return std::make_unique<S3FifoPolicy>(options);
}

}  // namespace kvtier::policy_internal
