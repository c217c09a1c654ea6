// The kvtier service: a TieredStore shared by the inference engines of a node (vLLM, SGLang,
// TensorRT-LLM run as separate processes, often several per node). Local engines connect
// over a Unix socket and pass block payloads through shared memory; remote ones over TCP
// with payloads inline. The wire protocol is protocol.h (docs/protocol.md); the daemon
// around this class is `kvtier serve` (docs/serve.md).
//
// Security: the Unix socket is created mode 0600 (the owner's engines only) and stays plain;
// TCP listens on loopback unless told otherwise and speaks TLS when given a certificate;
// binding TCP anywhere else requires TLS and an auth token. Tokens may expire.
// Tenants are namespaces: each connection names its tenant in Hello and its keys are mapped
// into that tenant's namespace (tenant_namespace.h), so a tenant can neither read nor probe
// another's blocks.
//
// Failure isolation: a few event loops wait on the connections (each on its share) and a
// small pool of workers serves complete requests (one at a time per connection, in order;
// connections in parallel; lookups that need no network are answered by the loop itself),
// so an idle, slow or stalled client costs no thread and delays only itself: a
// frame that stalls halfway waits in the loop, a reply its client does not take is kept
// (bounded) and finished later. A malformed frame gets an error reply and closes only its
// connection; a client that disconnects mid-transfer loses only its request, and its pins
// are released.
//
// Thread-safety: Start and Shutdown from one thread; the accessors from any.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/head_importance.h"
#include "kvtier/protocol.h"
#include "kvtier/status.h"
#include "kvtier/store.h"

namespace kvtier {

namespace server {
class ServiceMetrics;
}

// How a tenant's keys become the store's keys (server/tenant_namespace.h). Part of the stored
// format: every node of a shared pool, and every restart of a persistent store, must use one.
enum class TenantKeyMapping {
  kAesMmo,  // "aes_mmo", v2: AES-128 in Matyas-Meyer-Oseas, about 4 ns a key
  kSha256,  // "sha256", v1: SHA-256, about 60 ns a key; stores and pools written before v2
};

struct TenantOptions {
  std::string name;
  std::string auth_token;  // empty: the server's auth_token (if any) admits this tenant
  // When auth_token stops admitting anyone (a Hello with it is refused as expired).
  // Default: never
  std::optional<std::chrono::sys_seconds> expires;
};

// TLS on the TCP listener (TLS 1.2 at least, 1.3 preferred). The Unix socket stays plain:
// its file mode already admits only the owner, and shared memory never crosses TCP.
struct ServerTlsOptions {
  std::string cert_file;       // PEM certificate chain, the server's own first. Default: none, no TLS
  std::string key_file;        // PEM private key of cert_file. Default: none
  // PEM CAs whose client certificates are required. Default: none, no client certificates
  std::string client_ca_file;
  // A client must finish its handshake within this, or its connection closes. Default: 10 s
  int handshake_timeout_ms = 10000;

  bool enabled() const { return !cert_file.empty() || !key_file.empty(); }
};

struct ServerOptions {
  std::string unix_socket_path;         // Default: none; an existing socket file is replaced
  bool tcp = false;                     // Default: no TCP listener
  std::string tcp_host = "127.0.0.1";   // Default: loopback
  uint16_t tcp_port = 0;                // Default: 0, an ephemeral port (see Server::tcp_port)
  ServerTlsOptions tls;                 // Default: plain TCP; required when TCP binds off loopback
  // Required of every client when set; required to be set when TCP binds off loopback.
  std::string auth_token;
  std::optional<std::chrono::sys_seconds> auth_token_expires;  // Default: never
  // Known tenants. Default: none, every tenant name is accepted (still isolated from others).
  std::vector<TenantOptions> tenants;
  TenantKeyMapping tenant_keys = TenantKeyMapping::kAesMmo;  // Default: aes_mmo
  protocol::Limits limits;                // Default: protocol.h's
  // Connections open at once; more are refused with an error. Each costs the daemon one
  // descriptor (the daemon raises its RLIMIT_NOFILE to fit), no thread. Default: 4,096
  uint32_t max_connections = 4096;
  // Threads that serve requests; connections are many more, waiting in the event loops. A
  // request blocks its worker on tier I/O (an NVMe read, a Redis round trip, a write-through
  // sync), so the pool is wider than the cores. Default: 0, four per hardware thread, 8 to 64
  uint32_t workers = 0;
  // What the pool may grow to while workers wait on that I/O: a spare thread starts when a
  // request waits and fewer than `workers` threads are not waiting on I/O, and ends after 2 s
  // without a request (task_pool.h, "Blocking tasks"). So slow I/O does not starve requests
  // that need none, and idle spares cost nothing. Default: 0, 256 (never fewer than `workers`)
  uint32_t max_workers = 0;
  // Event loops, each with its own thread and its share of the connections (given in turn).
  // A loop reads every request of its connections and answers lookups itself when no tier is
  // shared (a hand-off to a worker costs more than the lookup); so one loop is a serial
  // section, and a large host needs several. Default: 0, one per four hardware threads, 1 to 16
  uint32_t event_loops = 0;
  uint32_t max_segments_per_client = 8;   // Default: 8 shared-memory segments
  uint64_t max_shared_bytes_per_client = 16ull << 30;  // Default: 16 GiB mapped per client
  uint32_t max_pins_per_client = 65536;   // Default: 65,536 live pins
  // Live expectations (Expect: a queued request's chain) per client. Default: 65,536
  uint32_t max_expectations_per_client = 65536;
  int io_timeout_ms = 30000;  // Default: 30 s for a frame to arrive whole or a reply to leave
  // Bytes of request frames the daemon holds at once, all connections together: a frame's
  // buffer from its header's arrival until a worker has served it. Each event loop gets an
  // equal share; a connection does not start a new frame while its loop holds its share, so
  // many clients sending large inline puts wait in their sockets, not in the daemon's memory.
  // Default: 0, two frames of `limits.max_payload_bytes` per worker (`worker_threads()`):
  // enough to keep every worker busy with the largest frames while as many more arrive.
  uint64_t max_request_memory = 0;
  // Where engines' head-importance reports go (the store's head_importance). Default: none,
  // Importance requests are refused.
  std::shared_ptr<HeadImportance> head_importance;
  server::ServiceMetrics* metrics = nullptr;  // Default: none; not owned

  Status Validate() const;
  // `workers`, or what its default 0 stands for.
  uint32_t worker_threads() const;
  // `max_workers`, or what its default 0 stands for.
  uint32_t max_worker_threads() const;
  // `event_loops`, or what its default 0 stands for.
  uint32_t event_loop_threads() const;
  // `max_request_memory`, or what its default 0 stands for.
  uint64_t request_memory_bytes() const;
  // The loops `event_loops` = 0 stands for on a host with `hardware_threads`: one per four,
  // 1 to 16 (`kvtier bench serve` projects a larger host's loops with it).
  static uint32_t DefaultEventLoops(uint32_t hardware_threads);
};

class Server {
 public:
  // Binds the listeners and starts serving `store`, which must outlive the server.
  // InvalidArgument for bad options (a TLS certificate or key that does not load, or a key
  // that is not the certificate's); IoError / Unavailable when a listener cannot bind.
  static Result<std::unique_ptr<Server>> Start(TieredStore& store, ServerOptions options);
  ~Server();  // Shutdown()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  const std::string& unix_socket_path() const;
  uint16_t tcp_port() const;  // the bound port; 0 without TCP
  uint32_t connections() const;

  // Stops accepting, lets every request in progress finish and send its reply (requests
  // received and not yet started are dropped), closes the connections and joins the loop and
  // the workers. Idempotent.
  void Shutdown();

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier
