// The memory one event loop spends on its connections' requests: the payload of each frame
// from the moment its header is read (its buffer is allocated then) until a worker has
// served it. Without a bound, many clients each sending large inline puts make the daemon
// hold every one of them at once, waiting for a few workers: hundreds of connections of
// 4 MiB frames grew a daemon by gigabytes, its CPU spent faulting in fresh pages.
//
// Over budget, a connection does not start reading a new frame; one halfway through a frame
// finishes it (its buffer is charged already, and stopping it could leave all the budget
// held by frames that never complete). Its bytes wait in the kernel's socket buffers, and TCP
// slows its sender. Waiting connections are resumed in the order they paused, once served
// requests give the budget back. Replies are not charged: a client that does not read its
// replies must not stop the others (a connection's own unsent replies stop its reading).
//
// Every connection charges its loop's budget and its loop alone, so pausing and resuming
// need no cross-thread wake-up.
//
// Thread-safety: the loop's thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>

#include "server/event_loop.h"
#include "server/service_metrics.h"

namespace kvtier::server {

class RequestBudget {
 public:
  // `resume(id)` is called on the loop for a connection that waited, once there is room; it
  // must do nothing for a connection that has gone. `limit` > 0 bytes. `metrics` (may be
  // null, not owned) gets the bytes held.
  RequestBudget(EventLoop& loop, uint64_t limit, std::function<void(uint64_t id)> resume, ServiceMetrics* metrics);
  RequestBudget(const RequestBudget&) = delete;
  RequestBudget& operator=(const RequestBudget&) = delete;

  // Whether a new frame may start: the bytes charged are under the limit.
  bool has_room() const { return held_ < limit_; }
  uint64_t held() const { return held_; }
  uint64_t limit() const { return limit_; }

  // Moves one connection's charge from `before` to `after` bytes. Room made for waiting
  // connections resumes them, from a posted task (not inside the caller's handler).
  void Recharge(uint64_t before, uint64_t after);
  // Connection `id` wants to read and may not: resumed when there is room, once. A
  // connection waits again only after it was resumed.
  void Wait(uint64_t id);

 private:
  void ResumeWaiting();

  EventLoop& loop_;
  const uint64_t limit_;
  const std::function<void(uint64_t)> resume_;
  ServiceMetrics* const metrics_;
  uint64_t held_ = 0;
  std::deque<uint64_t> waiting_;  // in the order they paused; may hold ids already gone
  bool resume_posted_ = false;
};

}  // namespace kvtier::server
