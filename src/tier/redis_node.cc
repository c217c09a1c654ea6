#include "tier/redis_node.h"

#include <utility>

namespace kvtier {

RedisNode::Lease::~Lease() {
  if (node_ != nullptr && connection_ != nullptr) {
    const bool failed = connection_->broken();
    node_->Return(std::move(connection_), epoch_, failed);
  }
}

void RedisNode::Lease::Fail() {
  if (node_ != nullptr && connection_ != nullptr) node_->Return(std::move(connection_), epoch_, /*failed=*/true);
}

RedisNode::RedisNode(Options options) : options_(std::move(options)), address_(options_.endpoint.ToString()) {}

bool RedisNode::down() const {
  std::lock_guard lock(mutex_);
  return down_;
}

Result<std::unique_ptr<RedisConnection>> RedisNode::Open() const {
  return RedisConnection::Connect(options_.endpoint, options_.timeout, options_.auth);
}

Status RedisNode::DownStatusLocked() const {
  return Status::Unavailable(address_ + " is down (" + down_reason_ + "); retrying every " +
                             std::to_string(options_.reconnect_interval.count()) + " ms");
}

std::vector<std::unique_ptr<RedisConnection>> RedisNode::MarkDownLocked() {
  down_ = true;
  ++epoch_;
  retry_at_ = Clock::now() + options_.reconnect_interval;
  open_ -= static_cast<int>(idle_.size());
  returned_.notify_all();  // waiters fail fast rather than wait for a dead node
  return std::exchange(idle_, {});
}

Result<RedisNode::Lease> RedisNode::Borrow() {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (down_) {
      if (probing_ || Clock::now() < retry_at_) return DownStatusLocked();
      probing_ = true;
      ++open_;
      lock.unlock();
      Result<std::unique_ptr<RedisConnection>> connection = Open();
      lock.lock();
      probing_ = false;
      if (!connection.ok()) {
        --open_;
        down_reason_ = connection.status().message();
        retry_at_ = Clock::now() + options_.reconnect_interval;
        return DownStatusLocked();
      }
      down_ = false;
      return Lease(this, std::move(*connection), epoch_);
    }
    if (!idle_.empty()) {
      std::unique_ptr<RedisConnection> connection = std::move(idle_.back());
      idle_.pop_back();
      return Lease(this, std::move(connection), epoch_);
    }
    if (open_ < options_.connections) {
      ++open_;
      const uint64_t epoch = epoch_;
      lock.unlock();
      Result<std::unique_ptr<RedisConnection>> connection = Open();
      lock.lock();
      if (connection.ok()) return Lease(this, std::move(*connection), epoch);
      --open_;
      if (epoch == epoch_) {
        down_reason_ = connection.status().message();
        std::vector<std::unique_ptr<RedisConnection>> closing = MarkDownLocked();
        lock.unlock();
        closing.clear();
        lock.lock();
      }
      return DownStatusLocked();
    }
    returned_.wait(lock);
  }
}

void RedisNode::Return(std::unique_ptr<RedisConnection> connection, uint64_t epoch, bool failed) {
  std::vector<std::unique_ptr<RedisConnection>> closing;
  {
    std::lock_guard lock(mutex_);
    if (failed && epoch == epoch_) {
      down_reason_ = connection->broken() ? connection->failure().message() : "a command failed";
      closing = MarkDownLocked();
    }
    if (failed || epoch != epoch_) {
      --open_;
      closing.push_back(std::move(connection));
    } else {
      idle_.push_back(std::move(connection));
    }
    returned_.notify_one();
  }
}

}  // namespace kvtier
