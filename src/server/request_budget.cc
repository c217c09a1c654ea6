#include "server/request_budget.h"

#include <utility>

namespace kvtier::server {

RequestBudget::RequestBudget(EventLoop& loop, uint64_t limit, std::function<void(uint64_t id)> resume,
                             ServiceMetrics* metrics)
    : loop_(loop), limit_(limit), resume_(std::move(resume)), metrics_(metrics) {}

void RequestBudget::Recharge(uint64_t before, uint64_t after) {
  if (before == after) return;
  held_ = held_ - before + after;
  if (metrics_) metrics_->RequestBytesHeld(static_cast<int64_t>(after) - static_cast<int64_t>(before));
  if (after < before && has_room() && !waiting_.empty() && !resume_posted_) {
    resume_posted_ = true;
    loop_.Post([this] { ResumeWaiting(); });
  }
}

void RequestBudget::Wait(uint64_t id) { waiting_.push_back(id); }

// Each resumed connection reads, and charges what it starts, before the next is resumed:
// so exactly as many resume as there is room for, and the rest keep their turn.
void RequestBudget::ResumeWaiting() {
  resume_posted_ = false;
  while (has_room() && !waiting_.empty()) {
    const uint64_t id = waiting_.front();
    waiting_.pop_front();
    resume_(id);
  }
}

}  // namespace kvtier::server
