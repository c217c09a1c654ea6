// The server's event loop: one thread waits on epoll for every socket it watches and runs
// each socket's handler when it is ready; other threads hand it work with Post. A connection
// that is idle, or stalled halfway through a frame, costs the loop nothing until it moves.
//
// Sockets are watched level-triggered: a handler that leaves bytes unread is called again.
// A handler may watch, change or stop watching any socket, its own included.
//
// Thread-safety: Post may be called from any thread. Everything else from the loop's
// thread (handlers and posted tasks), or before Run starts.
#pragma once

#include <sys/epoll.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kvtier/status.h"
#include "util/posix_file.h"

namespace kvtier::server {

class EventLoop {
 public:
  // `events` are EPOLLIN / EPOLLOUT as asked, with EPOLLHUP / EPOLLERR when they happen.
  using Handler = std::function<void(uint32_t events)>;

  // IoError when the kernel refuses an epoll instance or an eventfd (descriptor limits).
  static Result<std::unique_ptr<EventLoop>> Create();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Calls `handler` whenever `fd` is ready for `events` (0: only for hangups and errors).
  // IoError when epoll refuses (the descriptor is not a socket, or the kernel is out of memory).
  Status Watch(int fd, uint32_t events, Handler handler);
  // Changes what `fd` is watched for; a no-op when it is that already.
  Status Change(int fd, uint32_t events);
  // Stops watching `fd`; do it before closing it.
  void Unwatch(int fd);

  // Runs `task` on the loop's thread, soon, in the order posted.
  void Post(std::function<void()> task);

  // Serves events and posted tasks until Stop, calling `tick` about every `tick_ms` (the
  // deadlines of the sockets it watches are its caller's).
  void Run(int tick_ms, const std::function<void()>& tick);
  // Makes Run return after the handler or task that calls it.
  void Stop() { stopping_ = true; }

 private:
  EventLoop(ScopedFd epoll, ScopedFd wake) : epoll_(std::move(epoll)), wake_(std::move(wake)) {}
  void RunPosted();

  struct Watched {
    uint32_t events;
    Handler handler;
  };

  const ScopedFd epoll_;
  const ScopedFd wake_;  // an eventfd: Post's wake-up
  std::unordered_map<int, Watched> watched_;
  bool stopping_ = false;
  std::mutex posted_mu_;
  std::vector<std::function<void()>> posted_;  // GUARDED_BY(posted_mu_)
};

}  // namespace kvtier::server
