// The C++ client of `kvtier serve` (server.h): what engines' connectors, the tests, the load
// generator and the Python bindings use. One Client is one connection.
//
// Over the Unix socket the client creates a shared-memory segment (ClientOptions::
// shared_memory_bytes) and passes it with its Hello. Payloads that lie inside
// shared_memory() travel as references: the server copies straight between the segment and
// its tiers (one copy). Payloads anywhere else, and every payload over TCP, travel inline in
// the frame (bounded by the frame limit).
//
// Errors: the server's refusals come back as its Status (code and message); a broken
// connection is Unavailable, after which the client is unusable (connect a new one). A server
// certificate that does not verify is PermissionDenied at connect.
//
// End-to-end checksums (protocol version 2, the default): Put sends each payload's xxh3-64
// (PayloadChecksum, block.h), which the server's tier checks the bytes it stores against;
// Get checks each block it receives against the checksum the server sends with it. A block
// that fails is Corruption for the whole Get (its buffer zeroed, never returned as data) and
// counted (checksum_mismatches); the connection stays usable. Costs: one xxh3 pass over each
// payload put from shared memory and over each block read into it; inline payloads are
// hashed while they are copied.
//
// Thread-safety: all methods may be called from many threads; requests are serialized on the
// connection (use one client per thread for parallelism).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvtier/block.h"
#include "kvtier/protocol.h"
#include "kvtier/status.h"

namespace kvtier {

// TLS to a server's TCP listener (TLS 1.2 at least). Ignored on the Unix socket, which is
// always plain.
struct ClientTlsOptions {
  bool enabled = false;     // Default: plain TCP
  std::string ca_file;      // PEM CAs that sign the server's certificate. Default: the system's
  // The name the server's certificate must carry (also sent as SNI). Default: the host
  // connected to
  std::string server_name;
  std::string cert_file;    // PEM client certificate, for a server that asks for one. Default: none
  std::string key_file;     // its private key. Default: none
};

struct ClientOptions {
  std::string tenant;                  // Default: "" (the default tenant)
  std::string auth_token;              // Default: none
  uint64_t shared_memory_bytes = 64ull << 20;  // Default: 64 MiB (Unix socket only; 0: none)
  int io_timeout_ms = 30000;           // Default: 30 s for a frame to leave or a reply to arrive
  protocol::Limits limits;             // Default: protocol.h's
  ClientTlsOptions tls;                // Default: plain TCP
  // Default: true: protocol version 2 with end-to-end checksums. false speaks version 1
  // (no checksums), for a server older than this client.
  bool checksums = true;
};

// One block of a chain to put.
struct ClientBlock {
  BlockKey key;
  std::span<const std::byte> payload;
  uint32_t tokens = 0;
  BlockType type = BlockType::kUserContext;
  TransitionType transition = TransitionType::kSameToolRepeat;
};

class Client {
 public:
  static Result<std::unique_ptr<Client>> ConnectUnix(const std::string& socket_path, ClientOptions options = {});
  static Result<std::unique_ptr<Client>> ConnectTcp(const std::string& host, uint16_t port, ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // The segment shared with the server (empty over TCP). The caller lays payloads out in it.
  std::span<std::byte> shared_memory() const;
  uint32_t tier_count() const;

  // The longest stored prefix of each chain, with each block's tier and size.
  Result<std::vector<protocol::ChainLookup>> Lookup(const std::vector<std::vector<BlockKey>>& chains);
  // Stores a chain under `parent` (stored) or as a first block.
  Result<protocol::PutReply> Put(std::span<const ClientBlock> blocks, const std::optional<BlockKey>& parent = std::nullopt);
  // Reads the stored prefix of `keys` into `outs` (one buffer per key, each at least the
  // block's size); returns the sizes of the blocks read. `outs` must all lie inside
  // shared_memory() or all outside it.
  Result<std::vector<uint32_t>> Get(std::span<const BlockKey> keys, std::span<const std::span<std::byte>> outs,
                                    TransitionType transition = TransitionType::kSameToolRepeat);
  Status Prefetch(std::span<const BlockKey> keys);
  Result<protocol::PinReply> Pin(std::span<const BlockKey> keys);
  Status Unpin(uint64_t pin_id);
  // A queued request will read `keys` (its prompt's chain): the server keeps those blocks over
  // others until Unexpect or the connection closes (store.h TieredStore::Expect). Returns the
  // expectation's id.
  Result<uint64_t> Expect(std::span<const BlockKey> keys);
  Status Unexpect(uint64_t expect_id);
  Status UpdateTags(std::span<const protocol::TagUpdate> updates);
  Status ReportImportance(std::span<const protocol::ImportanceReport> reports);
  // The server's counters as JSON.
  Result<std::string> Stats();
  // Blocks a Get received whose bytes did not match their end-to-end checksum.
  uint64_t checksum_mismatches() const;

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier
