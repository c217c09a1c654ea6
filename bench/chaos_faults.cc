#include "chaos_faults.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "kvtier/protocol.h"

namespace kvtier::bench::chaos {
namespace {

std::string Errno() { return std::strerror(errno); }

// An fd closed when this goes.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

Result<std::unique_ptr<Fd>> Connect(const RawTarget& target) {
  if (target.tcp_port != 0) {
    auto fd = std::make_unique<Fd>(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(target.tcp_port);
    if (fd->get() < 0 || ::connect(fd->get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      return Status::Unavailable("connect to 127.0.0.1:" + std::to_string(target.tcp_port) + ": " + Errno());
    }
    return fd;
  }
  auto fd = std::make_unique<Fd>(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, target.unix_socket.c_str(), sizeof address.sun_path - 1);
  if (fd->get() < 0 || ::connect(fd->get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    return Status::Unavailable("connect to " + target.unix_socket + ": " + Errno());
  }
  return fd;
}

Status SendAll(const Fd& fd, std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return Status::Unavailable("send: " + Errno());  // the server may close on us: fine
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
  return Status::Ok();
}

// Reads whatever the server answers within `ms`, until it closes or goes quiet.
void Drain(const Fd& fd, int ms) {
  std::byte buffer[4096];
  pollfd p{.fd = fd.get(), .events = POLLIN, .revents = 0};
  while (::poll(&p, 1, ms) > 0 && ::recv(fd.get(), buffer, sizeof buffer, 0) > 0) {
  }
}

std::vector<std::byte> Frame(const protocol::Message& message, uint64_t request_id) {
  std::vector<std::byte> out;
  // Only requests this file builds itself, well inside the limits: encoding cannot fail.
  (void)protocol::EncodeFrame(message, request_id, protocol::MessageType::kError, protocol::Limits{}, out);
  return out;
}

// The frame of a Put of 1-4 random inline blocks.
std::vector<std::byte> RandomPutFrame(std::mt19937_64& rng, uint64_t request_id) {
  protocol::Put put;
  const int blocks = 1 + static_cast<int>(rng() % 4);
  std::vector<std::vector<std::byte>> payloads(static_cast<std::size_t>(blocks));  // what the blocks view
  for (std::vector<std::byte>& payload : payloads) {
    protocol::PutBlock b;
    b.key = {rng(), rng()};
    b.tokens = 16;
    payload.resize(4096 * (1 + rng() % 8));
    for (std::byte& x : payload) x = static_cast<std::byte>(rng());
    b.inline_bytes = payload;
    b.checksum = PayloadChecksum(payload);  // protocol version 2 requires it
    b.payload = {.segment = protocol::PayloadRef::kInline, .offset = 0, .length = static_cast<uint32_t>(payload.size())};
    put.blocks.push_back(b);
  }
  return Frame(put, request_id);
}

}  // namespace

Result<std::unique_ptr<TmpfsMount>> TmpfsMount::Mount(const std::string& dir, uint64_t bytes) {
  // In a mount namespace of the calling thread's own, which the daemons it starts inherit: the
  // tmpfs then goes when the run and its daemons end, however they end (a run killed from
  // outside used to leave it mounted).
  if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return Status::PermissionDenied("cannot make a private mount namespace for a tmpfs on " + dir + ": " + Errno());
  }
  const std::string options = "size=" + std::to_string(bytes);
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, options.c_str()) != 0) {
    return Status::PermissionDenied("cannot mount a tmpfs on " + dir + ": " + Errno());
  }
  return std::unique_ptr<TmpfsMount>(new TmpfsMount(dir));
}

TmpfsMount::~TmpfsMount() { ::umount2(dir_.c_str(), MNT_DETACH); }

Result<uint64_t> FillDisk(const std::string& dir) {
  const std::string path = dir + "/filler";
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  if (fd.get() < 0) return Status::IoError("open " + path + ": " + Errno());
  uint64_t taken = 0;
  // Smaller and smaller pieces, down to a page, so that the disk ends up really full.
  for (uint64_t chunk = 16u << 20; chunk >= 4096; chunk /= 2) {
    while (::fallocate(fd.get(), 0, static_cast<off_t>(taken), static_cast<off_t>(chunk)) == 0) taken += chunk;
  }
  return taken;
}

void FreeDisk(const std::string& dir) { ::unlink((dir + "/filler").c_str()); }

Status FlipSlotBytes(const std::string& path, int count, std::mt19937_64& rng) {
  Fd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  struct stat st{};
  if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0) return Status::IoError("open " + path + ": " + Errno());
  uint64_t data_offset = 0;  // superblock byte 48 (nvme_tier.h)
  if (::pread(fd.get(), &data_offset, 8, 48) != 8) return Status::IoError("pread " + path + ": " + Errno());
  const auto size = static_cast<uint64_t>(st.st_size);
  if (data_offset < 4096 || data_offset >= size) {
    return Status::Corruption(path + ": superblock gives data offset " + std::to_string(data_offset));
  }
  for (int i = 0; i < count; ++i) {
    const auto offset = static_cast<off_t>(data_offset + rng() % (size - data_offset));
    unsigned char byte = 0;
    if (::pread(fd.get(), &byte, 1, offset) != 1) return Status::IoError("pread " + path + ": " + Errno());
    byte = static_cast<unsigned char>(byte ^ (1 + rng() % 255));
    if (::pwrite(fd.get(), &byte, 1, offset) != 1) return Status::IoError("pwrite " + path + ": " + Errno());
  }
  return Status::Ok();
}

Result<std::string> FlipRedisValue(const testing::RedisServers& redis, int node, std::mt19937_64& rng) {
  KVTIER_ASSIGN_OR_RETURN(RedisReply key_reply, redis.Command(node, {"RANDOMKEY"}));
  if (key_reply->type != REDIS_REPLY_STRING) return std::string();
  const std::string key(ReplyText(*key_reply));
  KVTIER_ASSIGN_OR_RETURN(RedisReply length, redis.Command(node, {"STRLEN", key}));
  if (length->type != REDIS_REPLY_INTEGER || length->integer <= 0) return std::string();
  const std::string offset = std::to_string(rng() % static_cast<uint64_t>(length->integer));
  KVTIER_ASSIGN_OR_RETURN(RedisReply old, redis.Command(node, {"GETRANGE", key, offset, offset}));
  std::string byte(ReplyText(*old));
  if (byte.size() != 1) return std::string();
  byte[0] = static_cast<char>(byte[0] ^ static_cast<char>(1 + rng() % 255));
  KVTIER_RETURN_IF_ERROR(redis.Command(node, {"SETRANGE", key, offset, byte}).status());
  return key;
}

Status SendTruncatedFrame(const RawTarget& target, std::mt19937_64& rng) {
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Fd> fd, Connect(target));
  KVTIER_RETURN_IF_ERROR(SendAll(*fd, Frame(protocol::Hello{}, 1)));
  const std::vector<std::byte> put = RandomPutFrame(rng, 2);
  const std::size_t cut = 1 + rng() % (put.size() - 1);
  return SendAll(*fd, std::span(put).first(cut));  // and close
}

Status SendMalformedFrame(const RawTarget& target, std::mt19937_64& rng) {
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Fd> fd, Connect(target));
  if (rng() % 8 != 0) KVTIER_RETURN_IF_ERROR(SendAll(*fd, Frame(protocol::Hello{}, 1)));
  std::vector<std::byte> frame;
  if (rng() % 2 == 0) {
    frame = RandomPutFrame(rng, 2);
    const std::size_t flips = 1 + rng() % 16;  // mutate the body, keep the header
    for (std::size_t i = 0; i < flips && frame.size() > protocol::kHeaderBytes; ++i) {
      frame[protocol::kHeaderBytes + rng() % (frame.size() - protocol::kHeaderBytes)] ^= static_cast<std::byte>(1 + rng() % 255);
    }
  } else {
    protocol::Lookup lookup{.chains = {{BlockKey{rng(), rng()}}}};
    frame = Frame(lookup, 2);
    frame.resize(protocol::kHeaderBytes);  // a valid header whose body is random
    const uint32_t body = static_cast<uint32_t>(rng() % 4096);
    std::memcpy(frame.data() + 16, &body, 4);  // the header's payload length (protocol.md)
    for (uint32_t i = 0; i < body; ++i) frame.push_back(static_cast<std::byte>(rng()));
  }
  (void)SendAll(*fd, frame);  // the server may close before the whole frame is in
  Drain(*fd, 1000);
  return Status::Ok();
}

}  // namespace kvtier::bench::chaos
