// EntryTable: the resident blocks of one policy, as a dense vector of policy-specific
// entries addressed by small ids (so lists and heaps link ids, 4 bytes, not pointers) with
// a FlatKeyMap from key to id. Freed ids are reused, so a tier at steady state allocates
// nothing.
//
// Thread-safety: none (owned by one policy).
#pragma once

#include <cstdint>
#include <vector>

#include "kvtier/block.h"
#include "policy/flat_key_map.h"

namespace kvtier::policy_internal {

inline constexpr uint32_t kNoId = UINT32_MAX;

// Entry needs a `BlockKey key` member and a default constructor.
template <typename Entry>
class EntryTable {
 public:
  std::size_t size() const { return ids_.size(); }
  std::size_t high_water() const { return high_water_; }

  uint32_t Find(const BlockKey& key) const {
    const uint32_t* id = ids_.Find(key);
    return id == nullptr ? kNoId : *id;
  }

  // A fresh entry for a key that is not present.
  uint32_t Insert(const BlockKey& key) {
    uint32_t id;
    if (free_.empty()) {
      id = static_cast<uint32_t>(entries_.size());
      entries_.emplace_back();
    } else {
      id = free_.back();
      free_.pop_back();
      entries_[id] = Entry{};
    }
    entries_[id].key = key;
    ids_.Put(key, id);
    if (ids_.size() > high_water_) high_water_ = ids_.size();
    return id;
  }

  void Erase(uint32_t id) {
    ids_.Erase(entries_[id].key);
    free_.push_back(id);
  }

  Entry& operator[](uint32_t id) { return entries_[id]; }
  const Entry& operator[](uint32_t id) const { return entries_[id]; }
  // The entry vector itself, for heap and list functors that must survive its growth.
  std::vector<Entry>* entries() { return &entries_; }

 private:
  std::vector<Entry> entries_;
  std::vector<uint32_t> free_;
  FlatKeyMap<uint32_t> ids_;
  std::size_t high_water_ = 0;
};

}  // namespace kvtier::policy_internal
