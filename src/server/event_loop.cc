#include "server/event_loop.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace kvtier::server {
namespace {

constexpr int kEventsPerWait = 256;

}  // namespace

Result<std::unique_ptr<EventLoop>> EventLoop::Create() {
  ScopedFd epoll(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll.valid()) return ErrnoStatus("the server's event loop", "epoll_create1", errno);
  ScopedFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return ErrnoStatus("the server's event loop", "eventfd", errno);
  std::unique_ptr<EventLoop> loop(new EventLoop(std::move(epoll), std::move(wake)));
  epoll_event event{.events = EPOLLIN, .data = {.fd = loop->wake_.get()}};
  if (::epoll_ctl(loop->epoll_.get(), EPOLL_CTL_ADD, loop->wake_.get(), &event) != 0) {
    return ErrnoStatus("the server's event loop", "epoll_ctl", errno);
  }
  return loop;
}

Status EventLoop::Watch(int fd, uint32_t events, Handler handler) {
  epoll_event event{.events = events, .data = {.fd = fd}};
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &event) != 0) return ErrnoStatus("a connection", "epoll_ctl", errno);
  watched_[fd] = Watched{events, std::move(handler)};
  return Status::Ok();
}

Status EventLoop::Change(int fd, uint32_t events) {
  auto it = watched_.find(fd);
  if (it == watched_.end() || it->second.events == events) return Status::Ok();
  epoll_event event{.events = events, .data = {.fd = fd}};
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &event) != 0) return ErrnoStatus("a connection", "epoll_ctl", errno);
  it->second.events = events;
  return Status::Ok();
}

void EventLoop::Unwatch(int fd) {
  if (watched_.erase(fd) > 0) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
}

void EventLoop::Post(std::function<void()> task) {
  bool was_empty = false;
  {
    std::lock_guard lock(posted_mu_);
    was_empty = posted_.empty();
    posted_.push_back(std::move(task));
  }
  // One wake-up per batch: the loop takes every task queued by the time it looks.
  if (was_empty) {
    const uint64_t one = 1;
    (void)::write(wake_.get(), &one, sizeof(one));
  }
}

void EventLoop::RunPosted() {
  uint64_t count = 0;
  (void)::read(wake_.get(), &count, sizeof(count));
  std::vector<std::function<void()>> tasks;
  {
    std::lock_guard lock(posted_mu_);
    tasks.swap(posted_);
  }
  for (auto& task : tasks) task();
}

void EventLoop::Run(int tick_ms, const std::function<void()>& tick) {
  using Clock = std::chrono::steady_clock;
  epoll_event events[kEventsPerWait];
  auto next_tick = Clock::now() + std::chrono::milliseconds(tick_ms);
  while (!stopping_) {
    const int n = ::epoll_wait(epoll_.get(), events, kEventsPerWait, tick_ms);
    for (int i = 0; i < n && !stopping_; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_.get()) {
        RunPosted();
        continue;
      }
      // A handler earlier in this batch may have stopped watching it.
      auto it = watched_.find(fd);
      if (it == watched_.end()) continue;
      Handler handler = it->second.handler;  // a copy: the handler may unwatch itself
      handler(events[i].events);
    }
    if (const auto now = Clock::now(); now >= next_tick && !stopping_) {
      tick();
      next_tick = now + std::chrono::milliseconds(tick_ms);
    }
  }
}

}  // namespace kvtier::server
