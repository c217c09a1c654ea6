#include "server/connection.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>

#include "server/service_metrics.h"

namespace kvtier::server {
namespace {

// Bytes read from a socket at a time.
constexpr std::size_t kReadChunk = 64 << 10;
// A connection is not read while this much waits for it: requests it sent and no worker has
// started, or replies its client has not taken. A single request or reply may exceed them.
constexpr std::size_t kMaxQueuedRequests = 64;
constexpr std::size_t kMaxQueuedRequestBytes = 8 << 20;
constexpr std::size_t kMaxUnsentReplyBytes = 8 << 20;
// Lookups one connection may have served on the loop before the loop turns to the others.
constexpr int kLookupsOnLoopPerTurn = 8;

uint32_t EpollEvents(short wants) { return wants == POLLOUT ? EPOLLOUT : EPOLLIN; }

// Reads and drops what a peer we are about to close on has sent already (up to 64 KiB):
// closing a TCP socket with unread bytes resets the connection, and the reset can overtake
// the error frame just sent.
void DiscardWaiting(int fd) {
  char sink[4096];
  for (int i = 0; i < 16 && ::recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; ++i) {
  }
}

}  // namespace

std::vector<std::byte> ErrorFrame(const Status& status, uint64_t request_id, protocol::MessageType reply_to,
                                  const protocol::Limits& limits) {
  std::vector<std::byte> frame;
  if (!protocol::EncodeFrame(protocol::ErrorReply{status.code(), status.message().substr(0, limits.max_string_bytes)},
                             request_id, reply_to, limits, frame, protocol::kMinVersion)
           .ok()) {
    frame.clear();
  }
  return frame;
}

Connection::Connection(const ConnectionContext& context, uint64_t id, ScopedFd fd, bool tcp)
    : context_(context),
      id_(id),
      fd_(std::move(fd)),
      phase_(tcp && context.tls != nullptr ? Phase::kSniffing : Phase::kOpen),
      session_(context.store, context.options, tcp),
      assembler_(context.options.limits) {
  const auto now = Clock::now();
  read_progress_ = write_progress_ = now;
  handshake_deadline_ = now + std::chrono::milliseconds(context.options.tls.handshake_timeout_ms);
  if (phase_ == Phase::kOpen) stream_ = NewPlainStream(fd_.get());
}

Connection::~Connection() {
  context_.budget.Recharge(charged_, 0);
  context_.loop.Unwatch(fd_.get());
  stream_.reset();
  handshake_.reset();
}

Status Connection::Open() {
  read_wants_ = POLLIN;
  return context_.loop.Watch(fd_.get(), EPOLLIN, [this](uint32_t events) { OnEvents(events); });
}

void Connection::OnEvents(uint32_t events) {
  if (phase_ == Phase::kSniffing) {
    Sniff();
  } else if (phase_ == Phase::kHandshaking) {
    StepHandshake();
  } else {
    // A peer gone both ways while we are not reading (waiting on a worker, or draining):
    // nothing more can reach it, and level-triggered epoll would report it forever.
    if ((events & (EPOLLHUP | EPOLLERR)) != 0 && !ReadingAllowed()) {
      Close();
      return;
    }
    if (!replies_.empty()) Flush();
    if (ReadingAllowed()) Read();
    StartNext();
  }
  UpdateInterest();
}

// On the TLS port: a plain kvtier client is told why in its own framing, a TLS client
// starts its handshake; every failure is counted.
void Connection::Sniff() {
  const Result<bool> plain = PlainKvtierWaiting(fd_.get());
  Result<std::unique_ptr<TlsAccept>> accept =
      plain.ok() && !*plain ? context_.tls->StartAccept(fd_.get()) : Status::Unavailable("not a TLS client");
  if (accept.ok()) {
    handshake_ = std::move(*accept);
    phase_ = Phase::kHandshaking;
    StepHandshake();
    return;
  }
  // Counted before the plain client is told, so that the count is there once it knows.
  if (context_.options.metrics) context_.options.metrics->TlsHandshakeFailed();
  if (!plain.ok() || !*plain) {
    Close();
    return;
  }
  stream_ = NewPlainStream(fd_.get());
  phase_ = Phase::kOpen;
  Queue(ErrorFrame(Status::FailedPrecondition("this kvtier port speaks TLS: connect with TLS (ClientOptions::tls)"), 0,
                   protocol::MessageType::kError, context_.options.limits));
  Drain();
}

void Connection::StepHandshake() {
  const Result<short> step = handshake_->Step();
  if (!step.ok()) {
    if (context_.options.metrics) context_.options.metrics->TlsHandshakeFailed();
    Close();
    return;
  }
  read_wants_ = *step;
  if (*step != 0) return;
  stream_ = handshake_->TakeStream();
  handshake_.reset();
  phase_ = Phase::kOpen;
  read_wants_ = POLLIN;
  read_progress_ = Clock::now();
  Read();  // the client's first request may have come with its last handshake record
  StartNext();
}

bool Connection::ReadableButForBudget() const {
  return phase_ == Phase::kOpen && !peer_done_ && !rejected_ && requests_.size() < kMaxQueuedRequests &&
         request_bytes_ < kMaxQueuedRequestBytes && reply_bytes_ < kMaxUnsentReplyBytes;
}

// A frame started is always finished: its buffer is charged, and only finished frames give
// the budget back.
bool Connection::ReadingAllowed() const {
  return ReadableButForBudget() && (assembler_.mid_frame() || context_.budget.has_room());
}

bool Connection::WaitingForRoom() const {
  return ReadableButForBudget() && !assembler_.mid_frame() && !context_.budget.has_room();
}

void Connection::ResumeReading() {
  if (!waiting_for_room_) return;
  waiting_for_room_ = false;
  if (phase_ != Phase::kClosed) OnEvents(EPOLLIN);
}

void Connection::Recharge() {
  const uint64_t now = assembler_.payload_bytes_held() + request_bytes_ + running_bytes_;
  context_.budget.Recharge(charged_, now);
  charged_ = now;
}

void Connection::DropRequests() {
  requests_.clear();
  request_bytes_ = 0;
}

void Connection::Read() {
  // Only the loop's thread reads: one buffer serves every connection.
  thread_local std::vector<std::byte> chunk(kReadChunk);
  while (ReadingAllowed()) {
    std::vector<ScopedFd> fds;
    // A large payload is read where it goes; the rest through the chunk, frames and all.
    const std::span<std::byte> direct = assembler_.DirectTarget(kReadChunk);
    std::span<std::byte> target = direct.empty() ? std::span(chunk) : direct;
    // Over budget only a frame already started is read, and not past its end: the next
    // frame's header, read with it, would start that frame too.
    if (!context_.budget.has_room()) target = target.first(std::min(target.size(), assembler_.bytes_to_boundary()));
    Result<StreamProgress> step = stream_->TryRead(target, fds);
    if (!step.ok()) {
      // Too many descriptors is the client's mistake, answered like a malformed frame;
      // anything else is a connection that is gone.
      if (step.status().code() == StatusCode::kInvalidArgument) {
        rejected_ = step.status();
      } else {
        Close();
      }
      return;
    }
    if (step->end) {
      // A close between frames is a client that is done: its requests are still answered.
      // A close inside one loses that frame only.
      peer_done_ = true;
      return;
    }
    if (step->wants != 0) {
      read_wants_ = step->wants;
      return;
    }
    read_wants_ = POLLIN;
    read_progress_ = Clock::now();
    const std::size_t queued = requests_.size();
    if (!direct.empty()) {
      assembler_.DirectFilled(step->bytes, std::move(fds), requests_);
    } else if (Status fed = assembler_.Feed(std::span(chunk).first(step->bytes), std::move(fds), requests_); !fed.ok()) {
      rejected_ = fed;
    }
    for (std::size_t i = queued; i < requests_.size(); ++i) request_bytes_ += requests_[i].payload.size();
    Recharge();
    // A short read of a socket took all it held: epoll is level-triggered and reports what
    // comes next, so asking again now would only add a failing recvmsg to every request
    // (a third of a lookup's system calls). A TLS stream may hold decrypted bytes: it reads on.
    if (step->bytes < target.size() && !stream_->Buffered()) return;
  }
}

AssembledFrame Connection::TakeNextRequest() {
  AssembledFrame frame = std::move(requests_.front());
  requests_.pop_front();
  request_bytes_ -= frame.payload.size();
  running_bytes_ = frame.payload.size();
  busy_ = true;
  return frame;
}

void Connection::StartNext() {
  // A lookup served here costs less than its hand-off: a worker woken and the loop woken
  // back are two thread wake-ups, more CPU than the lookup itself. A few per turn, so that
  // one client's pipeline of lookups cannot keep the loop from the other connections; the
  // rest wait for the loop's next round (not for a worker, which may be held by slow I/O).
  for (int here = 0; !busy_ && phase_ == Phase::kOpen && !requests_.empty() && context_.lookups_on_loop &&
                     requests_.front().header.type == protocol::MessageType::kLookup;
       ++here) {
    if (here == kLookupsOnLoopPerTurn) {
      context_.loop.Post([this] {
        if (phase_ == Phase::kClosed) return;
        StartNext();
        UpdateInterest();
      });
      return;
    }
    AssembledFrame frame = TakeNextRequest();
    Finish(Serve(frame));
  }
  if (busy_ || phase_ != Phase::kOpen) return;
  if (!requests_.empty()) {
    auto frame = std::make_shared<AssembledFrame>(TakeNextRequest());
    // No earlier reply waits (none can be queued while this request runs), and the loop's
    // reads do not race a plain socket's writes: the worker may send the reply itself.
    const bool send_here = replies_.empty() && stream_->ConcurrentReadWrite();
    context_.workers.Submit([this, frame, send_here] {
      Served served = Serve(*frame);
      if (send_here) SendWhatFits(served);
      context_.loop.Post([this, served = std::move(served)]() mutable { OnServed(std::move(served)); });
    });
    return;
  }
  if (rejected_) {
    // A frame that cannot be read: after the replies to the frames before it, say why and close.
    if (context_.options.metrics) context_.options.metrics->FrameRejected();
    Queue(ErrorFrame(*rejected_, 0, protocol::MessageType::kError, context_.options.limits));
    Drain();
    return;
  }
  if (peer_done_) Drain();
}

// On a worker: decode, serve and encode one request. Each is answered in the protocol
// version of its frame (version 1 clients get no checksums).
Connection::Served Connection::Serve(AssembledFrame& frame) {
  const ServerOptions& options = context_.options;
  const protocol::FrameHeader& header = frame.header;
  const auto start = Clock::now();
  Result<protocol::Message> request = protocol::DecodePayload(header, frame.payload, options.limits);
  if (!request.ok() || header.reply) {
    if (options.metrics) options.metrics->FrameRejected();
    const Status why = request.ok() ? Status::InvalidArgument("a client sent a reply frame") : request.status();
    return {ErrorFrame(why, header.request_id, header.type, options.limits), /*close=*/true};
  }
  if (options.metrics) options.metrics->InFlightAdd(1);
  Reply reply = session_.Handle(*request, header.version, frame.fds);
  // Counted before the reply leaves: a client that sees the refusal sees the count.
  if (options.metrics && reply.put_checksum_mismatches > 0) options.metrics->PutChecksumMismatches(reply.put_checksum_mismatches);
  Served served{.close = reply.close};
  Status encoded = protocol::EncodeFrame(reply.message, header.request_id, header.type, options.limits, served.frame, header.version);
  if (!encoded.ok()) {  // e.g. a reply over the frame limit: say so instead
    reply.message = protocol::ErrorReply{encoded.code(), encoded.message().substr(0, options.limits.max_string_bytes)};
    served.frame.clear();
    encoded = protocol::EncodeFrame(reply.message, header.request_id, header.type, options.limits, served.frame, header.version);
  }
  if (!encoded.ok()) served = {.frame = {}, .close = true};
  if (options.metrics) {
    options.metrics->InFlightAdd(-1);
    const bool ok = !std::holds_alternative<protocol::ErrorReply>(reply.message);
    options.metrics->RecordRequest(header.type, std::chrono::duration<double>(Clock::now() - start).count(), ok, reply.blocks,
                                   reply.payload_bytes);
  }
  return served;
}

// On the worker: as much of the reply as the socket takes now; the loop sends the rest.
void Connection::SendWhatFits(Served& served) {
  while (served.sent < served.frame.size()) {
    Result<StreamProgress> step = stream_->TryWrite(std::span(served.frame).subspan(served.sent), {});
    if (!step.ok()) {
      served.broken = true;
      return;
    }
    if (step->wants != 0) return;
    served.sent += step->bytes;
  }
}

void Connection::OnServed(Served served) {
  Finish(std::move(served));
  StartNext();
  UpdateInterest();
}

void Connection::Finish(Served served) {
  busy_ = false;
  running_bytes_ = 0;
  Recharge();
  if (phase_ == Phase::kClosed) {
    ReportIfFinished();
    return;
  }
  if (served.broken) {
    Close();
    return;
  }
  Queue(std::move(served.frame), served.sent);
  if (served.close) {
    DropRequests();
    phase_ = Phase::kDraining;
  }
  Flush();  // and a draining connection closes once its last reply is out
  if (ReadingAllowed()) Read();  // reading may have waited for this reply
}

void Connection::Queue(std::vector<std::byte> frame, std::size_t sent) {
  if (sent == frame.size()) return;
  if (replies_.empty()) {
    write_progress_ = Clock::now();
    reply_offset_ = sent;  // only the first reply can have been started elsewhere
  }
  reply_bytes_ += frame.size() - sent;
  replies_.push_back(std::move(frame));
}

void Connection::Flush() {
  while (!replies_.empty() && phase_ != Phase::kClosed) {
    const std::span<const std::byte> rest = std::span(replies_.front()).subspan(reply_offset_);
    Result<StreamProgress> step = stream_->TryWrite(rest, {});
    if (!step.ok()) {
      Close();
      return;
    }
    if (step->wants != 0) {
      write_wants_ = step->wants;
      return;
    }
    write_progress_ = Clock::now();
    reply_offset_ += step->bytes;
    reply_bytes_ -= step->bytes;
    if (reply_offset_ == replies_.front().size()) {
      replies_.pop_front();
      reply_offset_ = 0;
    }
  }
  if (phase_ == Phase::kDraining && replies_.empty() && !busy_) {
    DiscardWaiting(fd_.get());
    Close();
  }
}

// Read nothing more; close once the request being served is answered and every reply is out.
void Connection::Drain() {
  if (phase_ == Phase::kClosed) return;
  phase_ = Phase::kDraining;
  Flush();
}

void Connection::BeginShutdown() {
  DropRequests();
  if (phase_ == Phase::kOpen) {
    Drain();
  } else if (phase_ != Phase::kDraining) {
    Close();
  }
  if (phase_ != Phase::kClosed) UpdateInterest();
}

void Connection::CheckDeadline(Clock::time_point now) {
  const auto io_timeout = std::chrono::milliseconds(context_.options.io_timeout_ms);
  const bool handshaking = phase_ == Phase::kSniffing || phase_ == Phase::kHandshaking;
  if (handshaking && context_.options.tls.handshake_timeout_ms > 0 && now >= handshake_deadline_) {
    if (context_.options.metrics) context_.options.metrics->TlsHandshakeFailed();
    Close();
    return;
  }
  if (handshaking || phase_ == Phase::kClosed || context_.options.io_timeout_ms == 0) return;
  // Between frames a connection may idle as long as it likes; inside one it may not stall,
  // and a reply must leave. Time spent not reading it (back-pressure) is ours, not its.
  const bool stalled_mid_frame = ReadingAllowed() && assembler_.mid_frame() && now - read_progress_ > io_timeout;
  const bool reply_stuck = !replies_.empty() && now - write_progress_ > io_timeout;
  if (stalled_mid_frame || reply_stuck) Close();
}

void Connection::Close() {
  if (phase_ == Phase::kClosed) return;
  phase_ = Phase::kClosed;
  DropRequests();
  Recharge();  // what a worker still serves stays charged until it is done
  replies_.clear();
  context_.loop.Unwatch(fd_.get());
  // The peer sees the end at once; the descriptor itself closes with this object.
  ::shutdown(fd_.get(), SHUT_RDWR);
  ReportIfFinished();
}

void Connection::ReportIfFinished() {
  if (finished()) context_.finished(id_);
}

void Connection::UpdateInterest() {
  if (phase_ == Phase::kClosed) return;
  Recharge();
  if (!waiting_for_room_ && WaitingForRoom()) {
    waiting_for_room_ = true;
    context_.budget.Wait(id_);
    if (context_.options.metrics) context_.options.metrics->ReadPausedForBudget();
  }
  uint32_t events = 0;
  if (phase_ == Phase::kSniffing) events = EPOLLIN;
  if (phase_ == Phase::kHandshaking) events = EpollEvents(read_wants_);
  if (ReadingAllowed()) {
    events |= EpollEvents(read_wants_);
    // Records TLS decrypted ahead wait inside the stream, where epoll does not see them.
    if (stream_->Buffered()) context_.loop.Post([this] { if (phase_ != Phase::kClosed) OnEvents(EPOLLIN); });
  }
  if (!replies_.empty()) events |= EpollEvents(write_wants_);
  if (!context_.loop.Change(fd_.get(), events).ok()) Close();
}

}  // namespace kvtier::server
