#include "tier/file_slot_allocator.h"

#include <algorithm>
#include <numeric>

namespace kvtier {

FileSlotAllocator::FileSlotAllocator(std::vector<uint64_t> file_bytes)
    : file_bytes_([&] {
        for (uint64_t& bytes : file_bytes) bytes = bytes / kAlignment * kAlignment;
        return std::move(file_bytes);
      }()),
      total_bytes_(std::accumulate(file_bytes_.begin(), file_bytes_.end(), uint64_t{0})),
      carved_(file_bytes_.size(), 0) {}

std::optional<FileSlot> FileSlotAllocator::CarveLocked(uint64_t bytes) {
  for (std::size_t i = 0; i < file_bytes_.size(); ++i) {
    const std::size_t file = (next_file_ + i) % file_bytes_.size();
    if (file_bytes_[file] - carved_[file] >= bytes) {
      const FileSlot slot{static_cast<uint32_t>(file), carved_[file]};
      carved_[file] += bytes;
      next_file_ = (file + 1) % file_bytes_.size();
      return slot;
    }
  }
  return std::nullopt;
}

std::optional<FileSlot> FileSlotAllocator::Allocate(uint64_t slot_bytes) {
  if (slot_bytes == 0 || slot_bytes % kAlignment != 0) return std::nullopt;
  std::lock_guard lock(mutex_);
  SizeClass& c = classes_[slot_bytes];
  if (!c.free.empty()) {
    const FileSlot out = c.free.back();
    c.free.pop_back();
    return out;
  }
  if (c.slab_end - c.cursor.offset < slot_bytes) {
    const uint64_t slab = slot_bytes * std::max<uint64_t>(1, kSlabBytes / slot_bytes);
    std::optional<FileSlot> start = CarveLocked(slab);
    uint64_t carved = slab;
    if (!start && slab != slot_bytes) {  // no room for a whole slab: one slot from a tail
      start = CarveLocked(slot_bytes);
      carved = slot_bytes;
    }
    if (!start) return std::nullopt;
    if (listener_ && !listener_({start->file, start->offset, carved, slot_bytes})) {
      carved_[start->file] -= carved;  // the slab is the file's last carve: give it back
      return std::nullopt;
    }
    c.cursor = *start;
    c.slab_end = start->offset + carved;
  }
  const FileSlot out = c.cursor;
  c.cursor.offset += slot_bytes;
  return out;
}

bool FileSlotAllocator::RestoreSlab(const FileSlab& slab, const std::function<bool(FileSlot)>& occupied) {
  if (slab.slot_bytes == 0 || slab.slot_bytes % kAlignment != 0 || slab.bytes == 0 ||
      slab.bytes % slab.slot_bytes != 0 || slab.offset % kAlignment != 0 || slab.file >= file_bytes_.size()) {
    return false;
  }
  std::lock_guard lock(mutex_);
  if (slab.offset < carved_[slab.file] || slab.bytes > file_bytes_[slab.file] ||
      slab.offset > file_bytes_[slab.file] - slab.bytes) {
    return false;
  }
  carved_[slab.file] = slab.offset + slab.bytes;
  SizeClass& c = classes_[slab.slot_bytes];
  for (uint64_t offset = slab.offset; offset < slab.offset + slab.bytes; offset += slab.slot_bytes) {
    const FileSlot slot{slab.file, offset};
    if (!occupied(slot)) c.free.push_back(slot);
  }
  return true;
}

void FileSlotAllocator::Free(FileSlot slot, uint64_t slot_bytes) {
  std::lock_guard lock(mutex_);
  classes_[slot_bytes].free.push_back(slot);
}

}  // namespace kvtier
