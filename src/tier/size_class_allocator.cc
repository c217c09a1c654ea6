#include "tier/size_class_allocator.h"

#include <algorithm>
#include <numeric>
#include <string>

namespace kvtier {

SizeClassAllocator::SizeClassAllocator(std::vector<uint64_t> region_bytes)
    : region_bytes_([&] {
        for (uint64_t& bytes : region_bytes) bytes = bytes / kAlignment * kAlignment;
        return std::move(region_bytes);
      }()),
      total_bytes_(std::accumulate(region_bytes_.begin(), region_bytes_.end(), uint64_t{0})),
      regions_(region_bytes_.size()) {
  for (std::size_t r = 0; r < regions_.size(); ++r) {
    if (region_bytes_[r] > 0) regions_[r].free_runs.emplace(0, region_bytes_[r]);
  }
}

Result<RegionSlot> SizeClassAllocator::Allocate(uint64_t slot_bytes) {
  if (slot_bytes == 0 || slot_bytes % kAlignment != 0) {
    return Status::InvalidArgument("a slot of " + std::to_string(slot_bytes) +
                                   " bytes is not a positive multiple of 4096");
  }
  std::lock_guard lock(mutex_);
  std::set<SlabId>& with_room = classes_with_room_[slot_bytes];
  if (!with_room.empty()) {
    const SlabId id = *with_room.begin();
    return TakeSlotLocked(id, regions_[id.first].slabs.at(id.second));
  }
  const uint64_t slab_bytes = slot_bytes * std::max<uint64_t>(1, kSlabBytes / slot_bytes);
  std::optional<RegionSlot> start = CarveLocked(slab_bytes);
  uint64_t carved = slab_bytes;
  if (!start && slab_bytes != slot_bytes) {  // no free run holds a whole slab: a single slot
    start = CarveLocked(slot_bytes);
    carved = slot_bytes;
  }
  if (!start) return ExhaustedLocked(slot_bytes);
  if (listener_) {
    if (Status heard = listener_({start->region, start->offset, carved, slot_bytes}); !heard.ok()) {
      GiveBackLocked(start->region, start->offset, carved);
      return heard;
    }
  }
  const SlabId id{start->region, start->offset};
  Slab& slab = regions_[id.first].slabs[id.second];
  slab = {.bytes = carved, .slot_bytes = slot_bytes};
  carved_bytes_ += carved;
  with_room.insert(id);
  return TakeSlotLocked(id, slab);
}

RegionSlot SizeClassAllocator::TakeSlotLocked(SlabId id, Slab& slab) {
  uint64_t offset = 0;
  if (!slab.free_slots.empty()) {
    offset = slab.free_slots.back();
    slab.free_slots.pop_back();
  } else {
    offset = id.second + slab.untouched;
    slab.untouched += slab.slot_bytes;
  }
  ++slab.live;
  live_bytes_ += slab.slot_bytes;
  if (!slab.has_room()) classes_with_room_[slab.slot_bytes].erase(id);
  return {id.first, offset};
}

void SizeClassAllocator::Free(RegionSlot slot, uint64_t slot_bytes) {
  std::lock_guard lock(mutex_);
  Region& region = regions_.at(slot.region);
  auto it = region.slabs.upper_bound(slot.offset);
  --it;  // the slab that holds the slot: it was handed out, so one starts at or before it
  Slab& slab = it->second;
  const SlabId id{slot.region, it->first};
  live_bytes_ -= slab.slot_bytes;
  if (--slab.live == 0) {
    classes_with_room_[slot_bytes].erase(id);
    const uint64_t bytes = slab.bytes;
    carved_bytes_ -= bytes;
    region.slabs.erase(it);
    GiveBackLocked(id.first, id.second, bytes);
    return;
  }
  if (!slab.has_room()) classes_with_room_[slot_bytes].insert(id);
  slab.free_slots.push_back(slot.offset);
}

std::optional<RegionSlot> SizeClassAllocator::CarveLocked(uint64_t bytes) {
  for (std::size_t i = 0; i < regions_.size(); ++i) {
    const std::size_t r = (next_region_ + i) % regions_.size();
    const std::map<uint64_t, uint64_t>& runs = regions_[r].free_runs;
    auto fits = std::find_if(runs.begin(), runs.end(), [&](const auto& run) { return run.second >= bytes; });
    if (fits == runs.end()) continue;
    const RegionSlot start{static_cast<uint32_t>(r), fits->first};
    (void)TakeLocked(start.region, start.offset, bytes);  // cannot fail: the run holds it
    next_region_ = (r + 1) % regions_.size();
    return start;
  }
  return std::nullopt;
}

bool SizeClassAllocator::TakeLocked(uint32_t region, uint64_t offset, uint64_t bytes) {
  std::map<uint64_t, uint64_t>& runs = regions_[region].free_runs;
  auto it = runs.upper_bound(offset);
  if (it == runs.begin()) return false;
  --it;
  const uint64_t run_offset = it->first;
  const uint64_t run_end = it->first + it->second;
  if (offset + bytes > run_end) return false;
  runs.erase(it);
  if (offset > run_offset) runs.emplace(run_offset, offset - run_offset);
  if (offset + bytes < run_end) runs.emplace(offset + bytes, run_end - offset - bytes);
  return true;
}

void SizeClassAllocator::GiveBackLocked(uint32_t region, uint64_t offset, uint64_t bytes) {
  std::map<uint64_t, uint64_t>& runs = regions_[region].free_runs;
  auto next = runs.lower_bound(offset);
  if (next != runs.end() && next->first == offset + bytes) {
    bytes += next->second;
    next = runs.erase(next);
  }
  if (next != runs.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second == offset) {
      previous->second += bytes;
      return;
    }
  }
  runs.emplace(offset, bytes);
}

Status SizeClassAllocator::ExhaustedLocked(uint64_t slot_bytes) const {
  uint64_t largest_run = 0;  // few runs are left in a tier this full
  for (const Region& region : regions_) {
    for (const auto& [offset, run] : region.free_runs) largest_run = std::max(largest_run, run);
  }
  const uint64_t free_in_slabs = carved_bytes_ - live_bytes_;
  return Status::ResourceExhausted("no free slot of " + std::to_string(slot_bytes) + " bytes in " +
                                   std::to_string(total_bytes_) + " bytes: " + std::to_string(free_in_slabs) +
                                   " bytes are free in slabs of other sizes and the largest free run is " +
                                   std::to_string(largest_run) + " bytes; evict blocks first");
}

Status SizeClassAllocator::RestoreSlab(const RegionSlab& slab, const std::function<bool(RegionSlot)>& occupied) {
  if (slab.slot_bytes == 0 || slab.slot_bytes % kAlignment != 0 || slab.bytes == 0 ||
      slab.bytes % slab.slot_bytes != 0 || slab.offset % kAlignment != 0 || slab.region >= regions_.size() ||
      slab.bytes > region_bytes_[slab.region] || slab.offset > region_bytes_[slab.region] - slab.bytes) {
    return Status::InvalidArgument("a slab of " + std::to_string(slab.bytes) + " bytes (slots of " +
                                   std::to_string(slab.slot_bytes) + ") at offset " + std::to_string(slab.offset) +
                                   " does not fit its region");
  }
  std::lock_guard lock(mutex_);
  if (!TakeLocked(slab.region, slab.offset, slab.bytes)) {
    return Status::InvalidArgument("a slab at offset " + std::to_string(slab.offset) + " overlaps another slab");
  }
  Slab restored{.bytes = slab.bytes, .slot_bytes = slab.slot_bytes, .untouched = slab.bytes};
  for (uint64_t offset = slab.offset; offset < slab.offset + slab.bytes; offset += slab.slot_bytes) {
    if (occupied({slab.region, offset})) {
      ++restored.live;
    } else {
      restored.free_slots.push_back(offset);
    }
  }
  if (restored.live == 0) {
    GiveBackLocked(slab.region, slab.offset, slab.bytes);
    return Status::Ok();
  }
  // Lowest offsets last, so they are handed out first (the free list is a stack).
  std::reverse(restored.free_slots.begin(), restored.free_slots.end());
  const SlabId id{slab.region, slab.offset};
  carved_bytes_ += restored.bytes;
  live_bytes_ += restored.live * restored.slot_bytes;
  if (restored.has_room()) classes_with_room_[slab.slot_bytes].insert(id);
  regions_[slab.region].slabs.emplace(slab.offset, std::move(restored));
  return Status::Ok();
}

uint64_t SizeClassAllocator::uncarved_bytes() const {
  std::lock_guard lock(mutex_);
  uint64_t bytes = 0;
  for (const Region& region : regions_) {
    for (const auto& [offset, run] : region.free_runs) bytes += run;
  }
  return bytes;
}

}  // namespace kvtier
