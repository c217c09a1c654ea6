// One client connection of the server, driven by its event loop (event_loop.h): the socket's
// TLS handshake when it has one, frames assembled from whatever bytes arrive, complete
// requests handed to the worker pool one at a time and in order (a Session is
// single-threaded; other connections' requests run in parallel), and replies written without
// waiting: what the client does not take at once is kept and finished when its socket
// drains, never holding a worker. On a plain socket the worker itself sends what the socket
// takes at once, sparing the loop a round trip.
//
// Back-pressure: a connection whose unstarted requests or unsent replies pile up is not read
// until they drain, so one client's backlog is bounded and others are not starved; nor does
// it start a new frame while its loop's request budget (request_budget.h) is spent.
//
// Thread-safety: everything runs on the loop's thread, except the request a worker serves
// with the connection's Session; the connection is never destroyed while a worker holds it
// (finished() says when it may be).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "kvtier/server.h"
#include "kvtier/store.h"
#include "server/byte_stream.h"
#include "server/event_loop.h"
#include "server/frame_assembler.h"
#include "server/request_budget.h"
#include "server/session.h"
#include "server/tls.h"
#include "util/posix_file.h"
#include "util/task_pool.h"

namespace kvtier::server {

// What every connection of one server shares. Not owned.
struct ConnectionContext {
  TieredStore& store;
  const ServerOptions& options;
  EventLoop& loop;
  RequestBudget& budget;  // the loop's
  TaskPool& workers;
  const TlsContext* tls;  // for TCP connections; null without TLS
  // Lookups are served on the loop's thread instead of a worker's: true when none can wait on
  // the network (no tier is shared, so a lookup reads only this node's index).
  bool lookups_on_loop = false;
  // Called on the loop's thread when connection `id` has become finished(); the connection
  // must not be destroyed inside this call.
  std::function<void(uint64_t id)> finished;
};

// An Error frame in the oldest protocol version: an Error is the same in all of them, and
// every client reads that one. Empty when even that does not encode.
std::vector<std::byte> ErrorFrame(const Status& status, uint64_t request_id, protocol::MessageType reply_to,
                                  const protocol::Limits& limits);

class Connection {
 public:
  using Clock = std::chrono::steady_clock;

  // Takes `fd` (connected, non-blocking); `tcp`: it came on the TCP listener (and starts
  // with a TLS handshake when the server has TLS).
  Connection(const ConnectionContext& context, uint64_t id, ScopedFd fd, bool tcp);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Starts watching the socket. IoError when the loop cannot.
  Status Open();
  // Closes it when its deadline has passed: a handshake, a frame started and not finished,
  // or a reply not taken, for longer than their timeouts.
  void CheckDeadline(Clock::time_point now);
  // The server is stopping: read nothing more and start no request; the one being served
  // finishes and its reply, with those already queued, is sent; then the connection closes.
  void BeginShutdown();
  // Closed, and no worker holds it: it may be destroyed (which ends its Session).
  bool finished() const { return phase_ == Phase::kClosed && !busy_; }
  // The request budget has room again after this connection waited for it (Wait).
  void ResumeReading();

 private:
  enum class Phase { kSniffing, kHandshaking, kOpen, kDraining, kClosed };
  // What a worker made of one request.
  struct Served {
    std::vector<std::byte> frame;
    bool close = false;
    std::size_t sent = 0;  // of `frame`, by the worker itself
    bool broken = false;   // the worker's send found the connection gone
  };

  void OnEvents(uint32_t events);
  void Sniff();
  void StepHandshake();
  void Read();
  void Flush();
  void StartNext();
  AssembledFrame TakeNextRequest();  // the oldest request, now running (busy_)
  void OnServed(Served served);
  void Finish(Served served);  // OnServed without starting the next request
  void SendWhatFits(Served& served);
  void Queue(std::vector<std::byte> frame, std::size_t sent = 0);
  void Drain();
  void Close();
  void ReportIfFinished();
  void UpdateInterest();
  bool ReadableButForBudget() const;  // open, and its own backlog is under its bounds
  bool ReadingAllowed() const;
  bool WaitingForRoom() const;  // readable but for the budget, and not halfway through a frame
  void DropRequests();
  // Brings the budget's charge to the request bytes this connection holds now.
  void Recharge();
  Served Serve(AssembledFrame& frame);

  const ConnectionContext& context_;
  const uint64_t id_;
  ScopedFd fd_;
  std::unique_ptr<ByteStream> stream_;  // borrows fd_, so it is reset first
  std::unique_ptr<TlsAccept> handshake_;
  Phase phase_;
  Session session_;  // used by one worker at a time, while busy_
  FrameAssembler assembler_;
  std::deque<AssembledFrame> requests_;  // assembled, not yet handed to a worker
  std::size_t request_bytes_ = 0;
  std::size_t running_bytes_ = 0;  // of the request a worker serves
  uint64_t charged_ = 0;           // to the budget
  bool waiting_for_room_ = false;  // in the budget's queue
  std::optional<Status> rejected_;  // a frame that cannot be read: answered after the requests before it
  bool busy_ = false;               // a worker is serving one of its requests
  bool peer_done_ = false;          // the peer sent its last byte
  std::deque<std::vector<std::byte>> replies_;  // unsent, the first maybe partly
  std::size_t reply_offset_ = 0, reply_bytes_ = 0;
  short read_wants_ = 0, write_wants_ = 0;  // what the stream's last step waits for (TLS may cross)
  Clock::time_point read_progress_, write_progress_, handshake_deadline_;
};

}  // namespace kvtier::server
