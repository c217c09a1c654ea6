// ARC (Megiddo & Modha, "ARC: A Self-Tuning, Low Overhead Replacement Cache", FAST'03), over
// the evictable filter of a prefix cache.
//
// T1 holds blocks seen once recently, T2 blocks seen at least twice; B1 and B2 remember the
// keys last evicted from each. A hit moves a block to T2's most recent end. A miss whose key
// is in B1 means T1 was too small: the target p for T1 grows by max(1, |B2| / |B1|); one in
// B2 shrinks it by max(1, |B1| / |B2|); both enter T2. Victim() takes T1's least recent
// block while T1 holds more than p blocks, else T2's. Ghosts are bounded as in the paper:
// |T1| + |B1| <= c and |T1| + |T2| + |B1| + |B2| <= 2c.
//
// Differences from the paper, because the store (not the policy) decides when to evict:
// the store asks for victims before it admits the block that needs room, so the paper's
// tie rule (evict from T1 when |T1| == p and the incoming key is in B2) cannot apply and
// ties go to T2; and c is PolicyOptions::capacity_blocks or the most blocks resident at once.
//
// Evictable filter: a non-evictable block that reaches the least recent end of T1 or T2 is
// set aside (parked, O(1)). SetEvictable(true) returns it to the least recent end, the place
// its last access gives it (everything still listed was used after it), or to the most
// recent end of T2 when it was hit while parked. Parked blocks count in |T1| and |T2|.
// Each operation is O(1) amortized.
#include <algorithm>
#include <string_view>

#include "policy/entry_table.h"
#include "policy/ghost_queue.h"
#include "policy/id_list.h"
#include "policy/policies.h"

namespace kvtier::policy_internal {
namespace {

struct ArcEntry {
  BlockKey key;
  ListLink link;
  bool in_t2 = false;
  bool parked = false;
  bool hit_while_parked = false;
  bool evictable = true;
};

class ArcPolicy final : public EvictionPolicy {
 public:
  explicit ArcPolicy(const PolicyOptions& options)
      : options_(options), t1_(Link{table_.entries()}), t2_(Link{table_.entries()}) {}

  std::string_view name() const override { return "arc"; }

  void Admit(const ResidentBlock& block, double now_s) override {
    if (table_.Find(block.key) != kNoId) return Touch(block.key, block.transition, now_s);
    const double b1 = static_cast<double>(b1_.size());
    const double b2 = static_cast<double>(b2_.size());
    const uint32_t id = table_.Insert(block.key);
    ArcEntry& entry = table_[id];
    if (b1_.Take(block.key)) {
      p_ = std::min(Capacity(), p_ + std::max(1.0, b2 / b1));
      entry.in_t2 = true;
    } else if (b2_.Take(block.key)) {
      p_ = std::max(0.0, p_ - std::max(1.0, b1 / b2));
      entry.in_t2 = true;
    }
    List(entry).PushBack(id);
    ++Members(entry);
    TrimGhosts();
  }

  void Touch(const BlockKey& key, TransitionType /*transition*/, double /*now_s*/) override {
    const uint32_t id = table_.Find(key);
    if (id == kNoId) return;
    ArcEntry& entry = table_[id];
    if (entry.parked) {
      entry.hit_while_parked = true;
    } else {
      List(entry).Unlink(id);
    }
    --Members(entry);
    entry.in_t2 = true;
    ++t2_members_;
    if (!entry.parked) t2_.PushBack(id);
  }

  void Remove(const BlockKey& key, double /*now_s*/) override {
    const uint32_t id = table_.Find(key);
    if (id == kNoId) return;
    ArcEntry& entry = table_[id];
    if (!entry.parked) List(entry).Unlink(id);
    --Members(entry);
    (entry.in_t2 ? b2_ : b1_).Push(key, 0);
    table_.Erase(id);
    TrimGhosts();
  }

  void SetEvictable(const BlockKey& key, bool evictable) override {
    const uint32_t id = table_.Find(key);
    if (id == kNoId) return;
    ArcEntry& entry = table_[id];
    entry.evictable = evictable;
    if (!evictable || !entry.parked) return;
    entry.parked = false;
    if (entry.hit_while_parked) {
      t2_.PushBack(id);
    } else {
      List(entry).PushFront(id);
    }
    entry.hit_while_parked = false;
  }

  std::optional<BlockKey> Victim() override {
    for (;;) {
      const bool from_t1 = !t1_.empty() && (static_cast<double>(t1_members_) > p_ || t2_.empty());
      if (!from_t1 && t2_.empty()) return std::nullopt;
      IdList<Link>& list = from_t1 ? t1_ : t2_;
      const uint32_t id = list.front();
      ArcEntry& entry = table_[id];
      if (entry.evictable) return entry.key;
      list.Unlink(id);
      entry.parked = true;
    }
  }

  std::size_t size() const override { return table_.size(); }

 private:
  struct Link {
    std::vector<ArcEntry>* entries;
    ListLink& operator()(uint32_t id) const { return (*entries)[id].link; }
  };

  IdList<Link>& List(const ArcEntry& entry) { return entry.in_t2 ? t2_ : t1_; }
  std::size_t& Members(const ArcEntry& entry) { return entry.in_t2 ? t2_members_ : t1_members_; }
  double Capacity() const {
    return static_cast<double>(options_.capacity_blocks > 0 ? options_.capacity_blocks : table_.high_water());
  }

  void TrimGhosts() {
    const auto c = static_cast<std::size_t>(Capacity());
    b1_.TrimTo(c > t1_members_ ? c - t1_members_ : 0);
    const std::size_t used = t1_members_ + t2_members_ + b1_.size();
    b2_.TrimTo(2 * c > used ? 2 * c - used : 0);
  }

  const PolicyOptions options_;
  EntryTable<ArcEntry> table_;
  IdList<Link> t1_;  // least recent first; parked blocks are out of the lists
  IdList<Link> t2_;
  std::size_t t1_members_ = 0;  // parked or not
  std::size_t t2_members_ = 0;
  GhostQueue<uint8_t> b1_;
  GhostQueue<uint8_t> b2_;
  double p_ = 0;
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewArcPolicy(const PolicyOptions& options) {
  return std::make_unique<ArcPolicy>(options);
}

}  // namespace kvtier::policy_internal
