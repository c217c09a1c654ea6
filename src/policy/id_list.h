// IdList: an intrusive doubly linked list of entry ids (FIFO and LRU queues). Each entry
// holds one ListLink; an entry is in at most one list at a time. All operations are O(1).
//
// Thread-safety: none (owned by one policy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "policy/entry_table.h"

namespace kvtier::policy_internal {

struct ListLink {
  uint32_t prev = kNoId;
  uint32_t next = kNoId;
};

// `Link(id)` returns the ListLink& of entry `id`.
template <typename Link>
class IdList {
 public:
  explicit IdList(Link link) : link_(std::move(link)) {}

  bool empty() const { return size_ == 0; }
  std::size_t size() const { return size_; }
  uint32_t front() const { return head_; }  // kNoId when empty
  uint32_t back() const { return tail_; }

  void PushBack(uint32_t id) {
    link_(id) = ListLink{tail_, kNoId};
    if (tail_ == kNoId) {
      head_ = id;
    } else {
      link_(tail_).next = id;
    }
    tail_ = id;
    ++size_;
  }

  void PushFront(uint32_t id) {
    link_(id) = ListLink{kNoId, head_};
    if (head_ == kNoId) {
      tail_ = id;
    } else {
      link_(head_).prev = id;
    }
    head_ = id;
    ++size_;
  }

  void Unlink(uint32_t id) {
    const ListLink link = link_(id);
    if (link.prev == kNoId) {
      head_ = link.next;
    } else {
      link_(link.prev).next = link.next;
    }
    if (link.next == kNoId) {
      tail_ = link.prev;
    } else {
      link_(link.next).prev = link.prev;
    }
    link_(id) = ListLink{};
    --size_;
  }

 private:
  Link link_;
  uint32_t head_ = kNoId;
  uint32_t tail_ = kNoId;
  std::size_t size_ = 0;
};

}  // namespace kvtier::policy_internal
