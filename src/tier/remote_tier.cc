// The remote-pool tier (remote_tier.h has the value format, batching and locking).
#include "tier/remote_tier.h"

#include <algorithm>
#include <array>
#include <latch>
#include <map>
#include <numeric>
#include <unordered_map>

#include "tier/writer_checksum.h"
#include "util/little_endian.h"

namespace kvtier {
namespace {

// On the wire: do not change.
constexpr uint64_t kMagic = 0x31305444524d5456ull;  // "VTMRDT01" read as little-endian bytes
constexpr uint32_t kVersion = 1;
constexpr std::size_t kHeaderBytes = RemoteTier::kHeaderBytes;

// A pipeline queues at most this much before reading replies, so that neither side buffers
// a whole batch.
constexpr std::size_t kWindowCommands = 256;
constexpr std::size_t kWindowBytes = 32u << 20;
// A batch's parts wait in the workers' queue behind other batches' parts; Submit blocks past
// this many, which only slows the callers down.
constexpr std::size_t kMaxQueuedParts = 4096;

// Deletes KEYS[1] when it still holds ARGV[1]: a corrupt value is dropped, a newer one kept.
constexpr std::string_view kDeleteIfUnchangedScript =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

using little_endian::GetU32;
using little_endian::GetU64;
using little_endian::PutU32;
using little_endian::PutU64;

// The value for `payload`: header then payload, copied and checksummed in one pass. Returns
// the checksum of the bytes copied.
uint64_t EncodeValue(const BlockKey& key, std::span<const std::byte> payload, std::string& value) {
  value.resize(kHeaderBytes + payload.size());
  std::byte* data = reinterpret_cast<std::byte*>(value.data());
  const uint64_t checksum = CopyWithChecksum(std::span(data + kHeaderBytes, payload.size()), payload);
  PutU64(data + 0, kMagic);
  PutU32(data + 8, kVersion);
  PutU32(data + 12, static_cast<uint32_t>(kHeaderBytes));
  PutU64(data + 16, key.hi);
  PutU64(data + 24, key.lo);
  PutU64(data + 32, payload.size());
  PutU64(data + 40, checksum);
  return checksum;
}

struct ValueHeader {
  uint64_t size = 0;
  uint64_t checksum = 0;
};

// The header of a value of `value_size` bytes stored under `key`, from its first bytes (`head`,
// kHeaderBytes of them when the value has as many), or what is wrong with it.
Result<ValueHeader> DecodeHeader(std::span<const std::byte> head, std::size_t value_size, const BlockKey& key) {
  if (value_size < kHeaderBytes || head.size() < kHeaderBytes) {
    return Status::Corruption("value of " + std::to_string(value_size) + " bytes is shorter than its header");
  }
  const std::byte* data = head.data();
  if (GetU64(data) != kMagic || GetU32(data + 8) != kVersion || GetU32(data + 12) != kHeaderBytes) {
    return Status::Corruption("bad magic, version or header size");
  }
  if (GetU64(data + 16) != key.hi || GetU64(data + 24) != key.lo) {
    return Status::Corruption("the header names another key");
  }
  const ValueHeader header{.size = GetU64(data + 32), .checksum = GetU64(data + 40)};
  if (header.size != value_size - kHeaderBytes) {
    return Status::Corruption("header says " + std::to_string(header.size) + " payload bytes, value holds " +
                              std::to_string(value_size - kHeaderBytes));
  }
  return header;
}

bool IsOkStatusReply(const redisReply& reply) {
  return reply.type == REDIS_REPLY_STATUS && ReplyText(reply) == "OK";
}

}  // namespace

Status RemoteTierOptions::Validate() const {
  const std::string who = "remote tier '" + name + "'";
  if (endpoints.empty()) return Status::InvalidArgument(who + ": endpoints must name at least one host:port");
  const bool ring = topology == RemoteTopology::kHashRing;
  if (!ring && topology != RemoteTopology::kCluster) {
    return Status::InvalidArgument(who + ": unknown topology " + std::to_string(static_cast<int>(topology)));
  }
  std::vector<std::string> seen;
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    Result<RedisEndpoint> endpoint = ParseRedisEndpoint(endpoints[i], ring);
    if (!endpoint.ok()) return endpoint.status().WithContext(who + ": endpoints[" + std::to_string(i) + "]");
    const std::string address = endpoint->ToString();
    if (std::find(seen.begin(), seen.end(), address) != seen.end()) {
      return Status::InvalidArgument(who + ": endpoint '" + address + "' is listed twice");
    }
    seen.push_back(address);
  }
  if (!username.empty() && password.empty()) {
    return Status::InvalidArgument(who + ": username '" + username + "' needs its password (AUTH takes both)");
  }
  if (!ring && key_prefix.find_first_of("{}") != std::string::npos) {
    return Status::InvalidArgument(who + ": key_prefix '" + key_prefix +
                                   "' contains '{' or '}': a hash tag would put every block in one cluster slot");
  }
  auto in_range = [&](const char* field, int value, int low, int high) -> Status {
    if (value >= low && value <= high) return Status::Ok();
    return Status::InvalidArgument(who + ": " + field + " must be " + std::to_string(low) + " to " +
                                   std::to_string(high) + ", got " + std::to_string(value));
  };
  KVTIER_RETURN_IF_ERROR(in_range("connections_per_node", connections_per_node, 1, 64));
  KVTIER_RETURN_IF_ERROR(in_range("timeout_ms", timeout_ms, 1, 3'600'000));
  KVTIER_RETURN_IF_ERROR(in_range("reconnect_interval_ms", reconnect_interval_ms, 1, 3'600'000));
  KVTIER_RETURN_IF_ERROR(in_range("virtual_nodes", virtual_nodes, 1, 65536));
  return Status::Ok();
}

Result<std::unique_ptr<Tier>> NewRemoteTier(const RemoteTierOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<RemoteTier> tier, RemoteTier::Open(options));
  return std::unique_ptr<Tier>(std::move(tier));
}

Result<std::unique_ptr<RemoteTier>> RemoteTier::Open(const RemoteTierOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<RedisRouter> router, RedisRouter::Create(options));
  // One worker per connection of every node known now (a cluster's replicas count too: they
  // are the masters after a failover), so that every connection can be busy at once.
  const std::size_t nodes = std::max(options.endpoints.size(), router->nodes().size());
  const int workers = static_cast<int>(std::min<std::size_t>(nodes * static_cast<std::size_t>(options.connections_per_node), 256));
  return std::unique_ptr<RemoteTier>(new RemoteTier(options, std::move(router), workers));
}

RemoteTier::RemoteTier(RemoteTierOptions options, std::unique_ptr<RedisRouter> router, int workers)
    : options_(std::move(options)), router_(std::move(router)), workers_(std::make_unique<TaskPool>(workers, kMaxQueuedParts, std::string(kWorkerThreadName))) {}

// The operations of one batch that one connection of `node` runs.
struct RemoteTier::Chunk {
  std::shared_ptr<RedisNode> node;
  std::vector<std::size_t> ops;
  std::vector<bool>* asking;                          // per operation of the batch: send ASKING first
  std::vector<std::optional<Redirection>>* redirected;  // per operation: the redirection it got
  // Per operation: why its node could not answer it (no connection, or the connection lost
  // before its reply). Run finishes it with that, or retries it on the slot's new owner.
  std::vector<std::optional<Status>>* unanswered;
  bool node_failed = false;
};

// Hands operation i's value to the batch's take_value.
class RemoteTier::ValueSink final : public RedisStringSink {
 public:
  ValueSink(const CommandBatch& batch, std::size_t i) : batch_(batch), i_(i) {}
  void Take(std::size_t size, RedisValueStream& value) override { batch_.take_value(i_, size, value); }

 private:
  const CommandBatch& batch_;
  std::size_t i_;
};

// One chunk's pipeline on one connection of its node: a window of commands is queued and
// sent, then its replies are read, then the next window. One thread drives it.
class RemoteTier::ChunkPipeline {
 public:
  ChunkPipeline(Chunk& chunk, CommandBatch& batch) : chunk_(chunk), batch_(batch) { asking_command_.Add("ASKING"); }

  // Borrows a connection and sends the first window.
  void Start() {
    Result<RedisNode::Lease> lease = chunk_.node->Borrow();
    if (!lease.ok()) {
      chunk_.node_failed = true;
      for (std::size_t i : chunk_.ops) (*chunk_.unanswered)[i] = lease.status();
      answered_ = chunk_.ops.size();
      return;
    }
    lease_.emplace(std::move(*lease));
    SendWindow();
  }

  bool done() const { return answered_ == chunk_.ops.size(); }

  // Reads the replies of the window sent, then sends the next window, if any.
  void ReadWindow() {
    RedisConnection& connection = lease_->connection();
    for (; answered_ < queued_ && failure_.ok(); ++answered_) {
      const std::size_t i = chunk_.ops[answered_];
      ValueSink sink(batch_, i);
      RedisStringSink* const value_sink = batch_.take_value ? &sink : nullptr;
      if ((*chunk_.asking)[i]) {
        Result<RedisReply> asking_reply = connection.GetReply(value_sink);  // "+OK"
        if (!asking_reply.ok()) {
          failure_ = asking_reply.status();
          break;
        }
      }
      Result<RedisReply> reply = connection.GetReply(value_sink);
      if (!reply.ok()) {
        failure_ = reply.status();
        break;
      }
      if (std::optional<Redirection> redirection = ParseRedirection(**reply)) {
        (*chunk_.redirected)[i] = std::move(redirection);
      } else {
        batch_.finish(i, std::move(reply));
      }
    }
    if (!failure_.ok()) {
      FailRest();
    } else if (!done()) {
      SendWindow();
    } else {
      lease_.reset();  // back to the node's pool while the batch's other parts are read
    }
  }

 private:
  void SendWindow() {
    RedisConnection& connection = lease_->connection();
    std::size_t window_bytes = 0;
    while (failure_.ok() && queued_ < chunk_.ops.size() && queued_ - answered_ < kWindowCommands &&
           window_bytes < kWindowBytes) {
      const std::size_t i = chunk_.ops[queued_];
      if ((*chunk_.asking)[i]) failure_ = connection.Append(asking_command_);
      args_.Clear();
      batch_.build(i, args_, scratch_);
      window_bytes += args_.bytes();
      if (failure_.ok()) failure_ = connection.Append(args_);
      ++queued_;
    }
    if (failure_.ok()) failure_ = connection.Flush();
    if (!failure_.ok()) FailRest();
  }

  // The connection is gone, and with it the replies not read yet: those operations are
  // unanswered (a write among them may or may not have been applied; every command this tier
  // sends may be sent again).
  void FailRest() {
    lease_->Fail();
    lease_.reset();
    chunk_.node_failed = true;
    for (; answered_ < chunk_.ops.size(); ++answered_) (*chunk_.unanswered)[chunk_.ops[answered_]] = failure_;
  }

  Chunk& chunk_;
  CommandBatch& batch_;
  std::optional<RedisNode::Lease> lease_;
  RedisArgs args_;
  RedisArgs asking_command_;
  std::string scratch_;  // lives until the command built with it is queued
  std::size_t queued_ = 0;    // operations whose command was queued, in chunk.ops order
  std::size_t answered_ = 0;  // operations whose reply was handled (or that failed)
  Status failure_;
};

void RemoteTier::RunChunk(Chunk& chunk, CommandBatch& batch) const {
  ChunkPipeline pipeline(chunk, batch);
  pipeline.Start();
  while (!pipeline.done()) pipeline.ReadWindow();
}

// Every part's first window is sent before any reply is read. The parts' connections are
// held together, borrowed in the nodes' address order (the order of `chunks`, one part per
// node): a thread that holds one node's connection while it waits for another's never waits
// on a thread that waits for one of its own.
void RemoteTier::RunChunksOnThisThread(std::span<Chunk> chunks, CommandBatch& batch) const {
  std::vector<ChunkPipeline> pipelines;
  pipelines.reserve(chunks.size());
  for (Chunk& chunk : chunks) pipelines.emplace_back(chunk, batch);
  for (ChunkPipeline& pipeline : pipelines) pipeline.Start();
  for (bool pending = true; pending;) {
    pending = false;
    for (ChunkPipeline& pipeline : pipelines) {
      if (pipeline.done()) continue;
      pipeline.ReadWindow();
      pending |= !pipeline.done();
    }
  }
}

void RemoteTier::Run(CommandBatch& batch) const {
  TaskPool::BlockingScope blocking;  // round trips: an elastic pool may start a thread meanwhile (task_pool.h)
  const std::size_t count = batch.keys.size();
  std::vector<bool> asking(count, false);
  std::vector<std::shared_ptr<RedisNode>> ask_target(count);
  std::vector<std::optional<Redirection>> redirected(count);
  std::vector<std::optional<Status>> unanswered(count);
  std::vector<std::size_t> pending(count);
  std::iota(pending.begin(), pending.end(), std::size_t{0});
  for (int round = 0; !pending.empty(); ++round) {
    // Group by node (in address order: see RunChunksOnThisThread), then split each node's
    // group over its connections when the parts are spread over the workers.
    std::map<RedisNode*, std::pair<std::shared_ptr<RedisNode>, std::vector<std::size_t>>> groups;
    bool node_failed = false;
    for (std::size_t i : pending) {
      std::shared_ptr<RedisNode> node = ask_target[i] ? ask_target[i] : router_->NodeFor(batch.keys[i]);
      if (node == nullptr) {
        node_failed = true;
        batch.finish(i, Status::Unavailable(name() + ": no cluster node serves the slot of " + batch.keys[i]));
        continue;
      }
      auto& group = groups[node.get()];
      group.first = std::move(node);
      group.second.push_back(i);
    }
    auto parts_of = [](const auto& group) {
      return std::clamp<std::size_t>(group.second.size() / kMinOpsPerConnection, 1,
                                     static_cast<std::size_t>(group.first->max_connections()));
    };
    std::size_t spread_parts = 0;
    for (const auto& [unused, group] : groups) spread_parts += parts_of(group);
    const uint64_t round_bytes = batch.payload_bytes * pending.size() / count;
    const bool spread = spread_parts > 1 && round_bytes / spread_parts >= kParallelChunkBytes;
    std::vector<Chunk> chunks;
    for (auto& [unused, group] : groups) {
      const std::size_t ops = group.second.size();
      const std::size_t parts = spread ? parts_of(group) : 1;
      for (std::size_t part = 0; part < parts; ++part) {
        const std::size_t begin = ops * part / parts, end = ops * (part + 1) / parts;
        chunks.push_back({.node = group.first,
                          .ops = std::vector<std::size_t>(group.second.begin() + static_cast<std::ptrdiff_t>(begin),
                                                          group.second.begin() + static_cast<std::ptrdiff_t>(end)),
                          .asking = &asking,
                          .redirected = &redirected,
                          .unanswered = &unanswered});
      }
    }
    if (!spread) {
      RunChunksOnThisThread(chunks, batch);
    } else {
      std::latch others_done(static_cast<std::ptrdiff_t>(chunks.size() - 1));
      for (std::size_t c = 1; c < chunks.size(); ++c) {
        workers_->Submit([&, c] {
          RunChunk(chunks[c], batch);
          others_done.count_down();
        });
      }
      RunChunk(chunks[0], batch);
      others_done.wait();
    }
    for (const Chunk& chunk : chunks) node_failed |= chunk.node_failed;
    if (node_failed) router_->RefreshSlots(/*force=*/false);

    std::vector<std::size_t> next;
    RetryUnanswered(chunks, round, unanswered, asking, ask_target, batch, next);
    bool moved = false;
    for (std::size_t i : pending) {
      if (!redirected[i]) continue;
      const Redirection redirection = *std::exchange(redirected[i], std::nullopt);
      if (round + 1 >= kMaxRedirections) {
        batch.finish(i, Status::Unavailable(name() + ": " + batch.keys[i] + " was redirected " +
                                            std::to_string(kMaxRedirections) + " times; the cluster is resharding"));
        continue;
      }
      asking[i] = redirection.ask;
      ask_target[i] = nullptr;
      if (redirection.ask) {
        ask_target[i] = router_->NodeAt(redirection.address);
      } else {
        router_->ApplyMoved(redirection);
        moved = true;
      }
      next.push_back(i);
    }
    if (moved) router_->RefreshSlots(/*force=*/true);
    pending = std::move(next);
  }
}

void RemoteTier::RetryUnanswered(std::span<const Chunk> chunks, int round,
                                 std::vector<std::optional<Status>>& unanswered, std::vector<bool>& asking,
                                 std::vector<std::shared_ptr<RedisNode>>& ask_target, CommandBatch& batch,
                                 std::vector<std::size_t>& next) const {
  for (const Chunk& chunk : chunks) {
    if (!chunk.node_failed) continue;
    for (std::size_t i : chunk.ops) {
      if (!unanswered[i]) continue;
      const Status failure = *std::exchange(unanswered[i], std::nullopt);
      const std::shared_ptr<RedisNode> owner = router_->NodeFor(batch.keys[i]);
      if (owner == nullptr || owner == chunk.node || round + 1 >= kMaxRedirections) {
        batch.finish(i, failure);
        continue;
      }
      asking[i] = false;
      ask_target[i] = nullptr;
      next.push_back(i);
    }
  }
}

// Counts an operation that met a node that is down or unreachable.
Status RemoteTier::NodeUnavailable(Status status) const {
  unavailable_.fetch_add(1, std::memory_order_relaxed);
  return status;
}

Result<uint64_t> RemoteTier::Reserve(const BlockKey& key, uint64_t size) {
  if (options_.capacity_bytes == 0) return uint64_t{0};
  uint64_t old_size = 0;
  {
    Shard& shard = ShardFor(key);
    std::lock_guard lock(shard.mutex);
    if (auto it = shard.sizes.find(key); it != shard.sizes.end()) old_size = it->second;
  }
  const uint64_t growth = size > old_size ? size - old_size : 0;
  uint64_t accounted = accounted_bytes_.load(std::memory_order_relaxed);
  do {
    if (accounted + growth > options_.capacity_bytes) {
      return Status::ResourceExhausted(name() + " is full: " + std::to_string(accounted) + " of " +
                                       std::to_string(options_.capacity_bytes) + " bytes written, block " +
                                       key.ToHex() + " needs " + std::to_string(growth) + " more; evict blocks first");
    }
  } while (!accounted_bytes_.compare_exchange_weak(accounted, accounted + growth, std::memory_order_relaxed));
  return growth;
}

void RemoteTier::Commit(const BlockKey& key, uint64_t size, uint64_t reservation) {
  Shard& shard = ShardFor(key);
  std::lock_guard lock(shard.mutex);
  auto [it, inserted] = shard.sizes.try_emplace(key, 0);
  const uint64_t old_size = it->second;
  it->second = size;
  if (inserted) blocks_.fetch_add(1, std::memory_order_relaxed);
  // Add before subtracting: the sums never pass below zero.
  used_bytes_.fetch_add(size, std::memory_order_relaxed);
  used_bytes_.fetch_sub(old_size, std::memory_order_relaxed);
  accounted_bytes_.fetch_add(size, std::memory_order_relaxed);
  accounted_bytes_.fetch_sub(old_size + reservation, std::memory_order_relaxed);
}

void RemoteTier::Forget(const BlockKey& key) const {
  Shard& shard = ShardFor(key);
  std::lock_guard lock(shard.mutex);
  auto it = shard.sizes.find(key);
  if (it == shard.sizes.end()) return;
  used_bytes_.fetch_sub(it->second, std::memory_order_relaxed);
  accounted_bytes_.fetch_sub(it->second, std::memory_order_relaxed);
  blocks_.fetch_sub(1, std::memory_order_relaxed);
  shard.sizes.erase(it);
}

Status RemoteTier::Write(const WriteOp& op) { return std::move(WriteBatch({&op, 1})[0]); }

Result<std::size_t> RemoteTier::Read(const ReadOp& op) { return std::move(ReadBatch({&op, 1})[0]); }

std::vector<Status> RemoteTier::WriteBatch(std::span<const WriteOp> ops) {
  std::vector<Status> results(ops.size());
  std::vector<std::size_t> admitted;  // indices into ops, in batch order
  std::vector<uint64_t> reservations;
  CommandBatch batch;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].payload.empty()) {
      results[i] = Status::InvalidArgument(name() + ": cannot store an empty payload (block " + ops[i].key.ToHex() + ")");
      continue;
    }
    Result<uint64_t> reservation = Reserve(ops[i].key, ops[i].payload.size());
    if (!reservation.ok()) {
      results[i] = reservation.status();
      continue;
    }
    admitted.push_back(i);
    reservations.push_back(*reservation);
    batch.keys.push_back(RedisKey(ops[i].key));
    batch.payload_bytes += ops[i].payload.size();
  }
  const std::string ttl = std::to_string(options_.ttl_seconds);
  // Bytes that do not match their writer's checksum are found while the value is encoded,
  // with its command already due: it becomes a harmless EXISTS, and the write fails.
  std::vector<Status> mismatched(admitted.size());
  batch.build = [&](std::size_t k, RedisArgs& args, std::string& scratch) {
    const WriteOp& op = ops[admitted[k]];
    const uint64_t copied = EncodeValue(op.key, op.payload, scratch);
    if (mismatched[k].ok()) mismatched[k] = CheckWriterChecksum(name(), op.key, op.checksum, copied);
    if (!mismatched[k].ok()) {
      args.Add("EXISTS").Add(batch.keys[k]);
      return;
    }
    args.Add("SET").Add(batch.keys[k]).Add(scratch);
    if (options_.ttl_seconds > 0) args.Add("EX").Add(ttl);
  };
  batch.finish = [&](std::size_t k, Result<RedisReply> reply) {
    const WriteOp& op = ops[admitted[k]];
    Status& result = results[admitted[k]];
    if (!mismatched[k].ok()) {
      result = mismatched[k];
    } else if (!reply.ok()) {
      result = NodeUnavailable(reply.status().WithContext(name() + ": writing block " + op.key.ToHex()));
    } else if (!IsOkStatusReply(**reply)) {
      result = IsErrorReply(**reply) ? ErrorReplyStatus(**reply, name() + ": SET " + batch.keys[k])
                                     : Status::IoError(name() + ": SET " + batch.keys[k] + ": unexpected reply type " +
                                                       std::to_string((*reply)->type));
      if (result.code() == StatusCode::kUnavailable) unavailable_.fetch_add(1, std::memory_order_relaxed);
    } else {
      Commit(op.key, op.payload.size(), reservations[k]);
      counters_.writes.fetch_add(1, std::memory_order_relaxed);
      counters_.write_bytes.fetch_add(op.payload.size(), std::memory_order_relaxed);
      return;
    }
    Release(reservations[k]);
  };
  Run(batch);
  for (const Status& status : results) {
    if (!status.ok()) counters_.write_failures.fetch_add(1, std::memory_order_relaxed);
  }
  return results;
}

std::vector<Result<std::size_t>> RemoteTier::ReadBatch(std::span<const ReadOp> ops) {
  std::vector<Result<std::size_t>> results(ops.size(), Result<std::size_t>(Status::Internal("read not run")));
  std::vector<std::string> corrupt_values(ops.size());  // the bytes to compare-and-delete
  CommandBatch batch;
  for (const ReadOp& op : ops) {
    batch.keys.push_back(RedisKey(op.key));
    batch.payload_bytes += op.out.size();
  }
  auto miss = [&](std::size_t i, std::string why) {
    counters_.read_misses.fetch_add(1, std::memory_order_relaxed);
    results[i] = Status::NotFound(name() + ": block " + ops[i].key.ToHex() + " " + why);
  };
  batch.build = [&](std::size_t i, RedisArgs& args, std::string&) { args.Add("GET").Add(batch.keys[i]); };
  batch.finish = [&](std::size_t i, Result<RedisReply> reply) {
    const ReadOp& op = ops[i];
    if (!reply.ok()) {
      unavailable_.fetch_add(1, std::memory_order_relaxed);
      return miss(i, "is unreachable: " + reply.status().message());
    }
    const redisReply& value_reply = **reply;
    if (IsTakenStringReply(value_reply)) return;
    if (value_reply.type == REDIS_REPLY_NIL) {
      Forget(op.key);  // expired, evicted by the server, or lost with a restarted node
      return miss(i, "is not here");
    }
    if (value_reply.type != REDIS_REPLY_STRING) {
      Status status = IsErrorReply(value_reply) ? ErrorReplyStatus(value_reply, name() + ": GET " + batch.keys[i])
                                                : Status::IoError(name() + ": GET " + batch.keys[i] +
                                                                  ": unexpected reply type " +
                                                                  std::to_string(value_reply.type));
      if (status.code() == StatusCode::kUnavailable) {
        unavailable_.fetch_add(1, std::memory_order_relaxed);
        return miss(i, "is unreachable: " + status.message());
      }
      results[i] = std::move(status);
      return;
    }
    // A value: take_value has settled it as it was read.
  };
  batch.take_value = [&](std::size_t i, std::size_t size, RedisValueStream& value) {
    const ReadOp& op = ops[i];
    std::array<std::byte, kHeaderBytes> head{};
    const std::span<std::byte> head_read = std::span(head).first(std::min(size, head.size()));
    if (!value.Read(head_read).ok()) return;  // the connection failed: finish says so
    Result<ValueHeader> header = DecodeHeader(head_read, size, op.key);
    if (header.ok() && op.out.size() < header->size) {
      results[i] = Status::InvalidArgument(name() + ": a buffer of " + std::to_string(op.out.size()) +
                                           " bytes cannot hold block " + op.key.ToHex() + " of " +
                                           std::to_string(header->size));
      return;
    }
    // A corrupt value is kept whole, to compare-and-delete; a good one costs no copy.
    std::string& corrupt = corrupt_values[i];
    const auto keep_head = [&] { corrupt.assign(reinterpret_cast<const char*>(head_read.data()), head_read.size()); };
    if (header.ok()) {
      // The payload lands in the caller's buffer straight from the socket; its checksum is
      // computed there.
      const std::span<std::byte> payload = op.out.first(header->size);
      if (!value.Read(payload).ok()) return;
      if (PayloadChecksum(payload) == header->checksum) {
        counters_.reads.fetch_add(1, std::memory_order_relaxed);
        counters_.read_bytes.fetch_add(header->size, std::memory_order_relaxed);
        results[i] = static_cast<std::size_t>(header->size);
        if (op.checksum != nullptr) *op.checksum = header->checksum;
        return;
      }
      keep_head();
      corrupt.append(reinterpret_cast<const char*>(payload.data()), payload.size());
      std::fill(payload.begin(), payload.end(), std::byte{0});  // hand back none of the bytes that failed
      header = Status::Corruption("the payload fails its checksum");
    } else {
      keep_head();
      const std::size_t before = corrupt.size();
      corrupt.resize(size);
      if (!value.Read(std::as_writable_bytes(std::span(corrupt)).subspan(before)).ok()) return;
    }
    counters_.checksum_failures.fetch_add(1, std::memory_order_relaxed);
    results[i] = header.status().WithContext(name() + ": block " + op.key.ToHex() + " (" + batch.keys[i] +
                                             ") is corrupt and was dropped");
  };
  Run(batch);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (results[i].status().code() != StatusCode::kCorruption) continue;
    // A block written meanwhile is kept, and so is its accounting.
    if (DeleteIfUnchanged(batch.keys[i], corrupt_values[i])) Forget(ops[i].key);
  }
  return results;
}

bool RemoteTier::DeleteIfUnchanged(const std::string& redis_key, std::string_view value) const {
  bool deleted = false;
  CommandBatch batch;
  batch.keys.push_back(redis_key);
  batch.build = [&](std::size_t, RedisArgs& args, std::string&) {
    args.Add("EVAL").Add(kDeleteIfUnchangedScript).Add("1").Add(redis_key).Add(value);
  };
  batch.finish = [&](std::size_t, Result<RedisReply> reply) {  // best effort: the next Read checks again
    deleted = reply.ok() && (*reply)->type == REDIS_REPLY_INTEGER && (*reply)->integer > 0;
  };
  Run(batch);
  return deleted;
}

std::optional<std::size_t> RemoteTier::Size(const BlockKey& key) const {
  std::optional<std::size_t> size;
  CommandBatch batch;
  batch.keys.push_back(RedisKey(key));
  batch.build = [&](std::size_t, RedisArgs& args, std::string&) { args.Add("STRLEN").Add(batch.keys[0]); };
  batch.finish = [&](std::size_t, Result<RedisReply> reply) {
    if (!reply.ok()) {
      unavailable_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    // STRLEN is 0 for a missing key; a value too short for its header is not a block.
    if ((*reply)->type == REDIS_REPLY_INTEGER && (*reply)->integer > static_cast<long long>(kHeaderBytes)) {
      size = static_cast<std::size_t>((*reply)->integer) - kHeaderBytes;
    }
  };
  Run(batch);
  return size;
}

Status RemoteTier::Evict(const BlockKey& key) {
  if (options_.shared) {
    Forget(key);
    counters_.evictions.fetch_add(1, std::memory_order_relaxed);
    return Status::Ok();
  }
  Status result = Status::Internal("evict not run");
  CommandBatch batch;
  batch.keys.push_back(RedisKey(key));
  batch.build = [&](std::size_t, RedisArgs& args, std::string&) { args.Add("UNLINK").Add(batch.keys[0]); };
  batch.finish = [&](std::size_t, Result<RedisReply> reply) {
    if (!reply.ok()) {
      result = NodeUnavailable(reply.status().WithContext(name() + ": evicting block " + key.ToHex()));
    } else if ((*reply)->type != REDIS_REPLY_INTEGER) {
      result = IsErrorReply(**reply) ? ErrorReplyStatus(**reply, name() + ": UNLINK " + batch.keys[0])
                                     : Status::IoError(name() + ": UNLINK " + batch.keys[0] + ": unexpected reply type");
    } else {
      Forget(key);
      result = (*reply)->integer > 0 ? Status::Ok() : Status::NotFound(name() + ": block " + key.ToHex() + " is not here");
    }
  };
  Run(batch);
  if (result.ok()) counters_.evictions.fetch_add(1, std::memory_order_relaxed);
  return result;
}

TierStats RemoteTier::GetStats() const {
  TierStats stats;
  counters_.Fill(stats);
  stats.capacity_bytes = options_.capacity_bytes;
  stats.used_bytes = used_bytes_.load(std::memory_order_relaxed);
  stats.blocks = blocks_.load(std::memory_order_relaxed);
  return stats;
}

}  // namespace kvtier
