#include "chaos_clients.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "kvtier/client.h"

namespace kvtier::bench::chaos {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t kAreaBytes = kChainBlocks * kMaxBlockBytes;

// One client's connection and the buffers its requests use: in the shared segment over the
// Unix socket (payloads by reference), in its own memory over TCP (inline).
class Conn {
 public:
  Conn(const ClientEnv& env, bool tcp) : env_(env), tcp_(tcp) {
    if (tcp) own_.resize(2 * kAreaBytes);
  }
  // Connects when not connected; false when the daemon is not there.
  bool Ready() {
    if (client_ != nullptr) return true;
    Result<std::unique_ptr<Client>> c =
        tcp_ ? Client::ConnectTcp("127.0.0.1", env_.tcp_port, {.shared_memory_bytes = 0, .io_timeout_ms = 5000})
             : Client::ConnectUnix(env_.unix_socket, {.shared_memory_bytes = 2 * kAreaBytes, .io_timeout_ms = 5000});
    if (!c.ok()) return false;
    client_ = std::move(*c);
    return true;
  }
  Client& client() { return *client_; }
  std::span<std::byte> put_area() { return buffer().first(kAreaBytes); }
  std::span<std::byte> get_area() { return buffer().subspan(kAreaBytes, kAreaBytes); }
  // Counts a failed request; a broken connection is dropped (the next request reconnects).
  void Failed(const Status& status, Tally& tally) {
    tally.Error(std::string(StatusCodeName(status.code())), status.message());
    if (status.code() == StatusCode::kUnavailable) client_.reset();
  }

 private:
  std::span<std::byte> buffer() { return tcp_ ? std::span<std::byte>(own_) : client_->shared_memory(); }

  const ClientEnv& env_;
  bool tcp_;
  std::unique_ptr<Client> client_;
  std::vector<std::byte> own_;
};

std::vector<BlockKey> Keys(const ClientEnv& env, int index, uint64_t chain, uint64_t blocks) {
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < blocks; ++i) keys.push_back(ChainBlockKey(env.run, static_cast<uint64_t>(index), chain, i));
  return keys;
}

// Checks the blocks a get returned; counts and describes the wrong ones.
// The bytes read count as traffic unless `fresh` (chaos_model.h).
void CheckGot(std::span<const BlockKey> keys, std::span<const std::span<std::byte>> outs, const std::vector<uint32_t>& sizes,
              bool fresh, Tally& tally, const char* who) {
  if (sizes.size() > keys.size()) {
    tally.wrong_bytes.fetch_add(1);
    tally.Wrong(std::string(who) + ": a get of " + std::to_string(keys.size()) + " keys returned " +
                std::to_string(sizes.size()) + " blocks");
    return;
  }
  uint64_t bytes = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    bytes += sizes[i];
    if (sizes[i] > outs[i].size() || !BlockMatches(outs[i].first(sizes[i]), keys[i])) {
      tally.wrong_bytes.fetch_add(1);
      tally.Wrong(std::string(who) + ": block " + keys[i].ToHex() + " came back with " + std::to_string(sizes[i]) +
                  " bytes that are not the ones put (" + std::to_string(BlockBytes(keys[i])) + " bytes)");
    }
  }
  if (sizes.size() < keys.size()) tally.misses.fetch_add(1);
  if (!fresh) tally.traffic.fetch_add(bytes);
}

// Records that a put acknowledged the first `acked` blocks of chain `id`, begun at `mark`.
void Acknowledge(ClientModel& model, uint64_t id, uint64_t acked, uint64_t mark, Tally& tally) {
  std::lock_guard lock(model.mu);
  for (Chain& c : model.live) {
    if (c.id != id || acked <= c.acked) continue;
    tally.acked_blocks.fetch_add(acked - c.acked);
    // The chain's blocks count as durable from the put that first stored them (a later put
    // that finds them present does not move them in the persist tier's LRU order).
    if (c.acked == 0) c.mark = mark;
    c.acked = acked;
  }
}

void PutChain(const ClientEnv& env, int index, ClientModel& model, Conn& conn, uint64_t id) {
  const std::vector<BlockKey> keys = Keys(env, index, id, kChainBlocks);
  std::vector<ClientBlock> blocks;
  uint64_t bytes = 0;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const std::span<std::byte> payload = conn.put_area().subspan(i * kMaxBlockBytes, BlockBytes(keys[i]));
    FillBlock(payload, keys[i]);
    blocks.push_back({.key = keys[i], .payload = payload, .tokens = 16});
    bytes += payload.size();
  }
  const uint64_t mark = env.tally->traffic.fetch_add(bytes);
  Result<protocol::PutReply> reply = conn.client().Put(blocks);
  if (!reply.ok()) return conn.Failed(reply.status(), *env.tally);
  const uint64_t acked = std::min<uint64_t>(kChainBlocks, uint64_t{reply->new_blocks} + reply->present_blocks);
  if (acked < kChainBlocks) env.tally->short_puts.fetch_add(1);
  Acknowledge(model, id, acked, mark, *env.tally);
}

void GetChain(const ClientEnv& env, int index, Conn& conn, const Chain& chain) {
  const std::vector<BlockKey> keys = Keys(env, index, chain.id, kChainBlocks);
  const bool fresh = chain.Fresh(env.tally->traffic.load(), env.window);
  std::vector<std::span<std::byte>> outs;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    outs.push_back(conn.get_area().subspan(i * kMaxBlockBytes, kMaxBlockBytes));
    std::memset(outs.back().data(), 0xa5, 8);  // a block claimed but never written fails the check
  }
  Result<std::vector<uint32_t>> sizes = conn.client().Get(keys, outs);
  if (!sizes.ok()) return conn.Failed(sizes.status(), *env.tally);
  CheckGot(keys, outs, *sizes, fresh, *env.tally, "get");
}

void LookupChain(const ClientEnv& env, int index, Conn& conn, uint64_t id) {
  const std::vector<BlockKey> keys = Keys(env, index, id, kChainBlocks);
  Result<std::vector<protocol::ChainLookup>> found = conn.client().Lookup({keys});
  if (!found.ok()) return conn.Failed(found.status(), *env.tally);
  const bool shape = found->size() == 1 && (*found)[0].prefix_blocks <= keys.size() &&
                     (*found)[0].bytes.size() == (*found)[0].prefix_blocks;
  for (std::size_t i = 0; shape && i < (*found)[0].prefix_blocks; ++i) {
    if ((*found)[0].bytes[i] == BlockBytes(keys[i])) continue;
    env.tally->wrong_sizes.fetch_add(1);
    env.tally->Wrong("lookup: block " + keys[i].ToHex() + " listed with " + std::to_string((*found)[0].bytes[i]) +
                     " bytes, put with " + std::to_string(BlockBytes(keys[i])));
  }
  if (!shape) {
    env.tally->wrong_sizes.fetch_add(1);
    env.tally->Wrong("lookup: a reply of the wrong shape");
  }
}

// A new chain id, its predecessors shifted out of the live ring into the retired one.
uint64_t NewChain(ClientModel& model) {
  std::lock_guard lock(model.mu);
  model.live.push_back({.id = model.next_chain++});
  if (model.live.size() > kLiveChains) {
    model.retired.push_back(model.live.front().id);
    model.live.pop_front();
    if (model.retired.size() > kRetiredChains) model.retired.pop_front();
  }
  return model.live.back().id;
}

// A chain to read: mostly a live one, at times a retired one (which Redis may hold).
std::optional<Chain> PickChain(ClientModel& model, std::mt19937_64& rng, bool retired_ok) {
  std::lock_guard lock(model.mu);
  if (retired_ok && !model.retired.empty() && rng() % 4 == 0) return Chain{.id = model.retired[rng() % model.retired.size()]};
  if (model.live.empty()) return std::nullopt;
  return model.live[rng() % model.live.size()];
}

}  // namespace

void RunChaosClient(const ClientEnv& env, int index, ClientModel& model) {
  std::mt19937_64 rng(Mix(env.seed * 7919 + static_cast<uint64_t>(index)));
  Conn conn(env, index % 2 == 1);
  while (!env.stop->load()) {
    env.gate->Enter();
    if (!conn.Ready()) {
      env.gate->Leave();
      std::this_thread::sleep_for(50ms);
      continue;
    }
    const uint64_t dice = rng() % 100;
    if (dice < 25) {
      PutChain(env, index, model, conn, NewChain(model));
    } else if (std::optional<Chain> chain = PickChain(model, rng, dice >= 35 && dice < 80)) {
      if (dice < 35) PutChain(env, index, model, conn, chain->id);
      else if (dice < 80) GetChain(env, index, conn, *chain);
      else LookupChain(env, index, conn, chain->id);
    }
    env.tally->ops.fetch_add(1);
    env.gate->Leave();
  }
}

Status ProbePut(const ClientEnv& env, int index, uint64_t chain) {
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
                          Client::ConnectUnix(env.unix_socket, {.shared_memory_bytes = kAreaBytes, .io_timeout_ms = 5000}));
  const std::vector<BlockKey> keys = Keys(env, index, chain, kChainBlocks);
  std::vector<ClientBlock> blocks;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const std::span<std::byte> payload = client->shared_memory().subspan(i * kMaxBlockBytes, BlockBytes(keys[i]));
    FillBlock(payload, keys[i]);
    blocks.push_back({.key = keys[i], .payload = payload, .tokens = 16});
  }
  KVTIER_ASSIGN_OR_RETURN(protocol::PutReply reply, client->Put(blocks));
  if (reply.new_blocks + reply.present_blocks == keys.size()) return Status::Ok();
  return Status::ResourceExhausted("the daemon refused " + std::to_string(reply.refused_blocks) + " of " +
                                   std::to_string(keys.size()) + " blocks");
}

Result<uint64_t> DaemonCounter(const std::string& unix_socket, const std::string& name) {
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
                          Client::ConnectUnix(unix_socket, {.shared_memory_bytes = 0, .io_timeout_ms = 5000}));
  KVTIER_ASSIGN_OR_RETURN(std::string json, client->Stats());
  const nlohmann::json stats = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!stats.is_object() || !stats.contains(name) || !stats[name].is_number_unsigned()) {
    return Status::Internal("kvtier serve's stats have no counter '" + name + "'");
  }
  return stats[name].get<uint64_t>();
}

Result<VerifyResult> VerifyDurable(const ClientEnv& env, const std::vector<std::unique_ptr<ClientModel>>& models) {
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
                          Client::ConnectUnix(env.unix_socket, {.shared_memory_bytes = kAreaBytes, .io_timeout_ms = 30000}));
  VerifyResult r;
  KVTIER_ASSIGN_OR_RETURN(r.recovery_dropped, DaemonCounter(env.unix_socket, "recovery_dropped_blocks"));
  const uint64_t now = env.tally->traffic.load();
  std::vector<std::span<std::byte>> outs;
  for (std::size_t i = 0; i < kChainBlocks; ++i) outs.push_back(client->shared_memory().subspan(i * kMaxBlockBytes, kMaxBlockBytes));
  for (std::size_t index = 0; index < models.size(); ++index) {
    std::lock_guard lock(models[index]->mu);
    for (Chain& c : models[index]->live) {
      if (!c.Fresh(now, env.window)) continue;
      const std::vector<BlockKey> keys = Keys(env, static_cast<int>(index), c.id, c.acked);
      KVTIER_ASSIGN_OR_RETURN(std::vector<uint32_t> sizes, client->Get(keys, std::span(outs).first(keys.size())));
      const uint64_t wrong_before = env.tally->wrong_bytes.load();
      CheckGot(keys, std::span(outs).first(keys.size()), sizes, /*fresh=*/true, *env.tally, "after a restart");
      const uint64_t wrong = env.tally->wrong_bytes.load() - wrong_before;
      r.checked += keys.size();
      r.missing += keys.size() - std::min(keys.size(), sizes.size());
      r.wrong += wrong;
      if (sizes.size() < keys.size() || wrong > 0) c.acked = wrong > 0 ? 0 : sizes.size();
    }
  }
  return r;
}

}  // namespace kvtier::bench::chaos
