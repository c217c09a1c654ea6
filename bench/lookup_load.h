// `kvtier bench serve`'s lookup load: many engine clients, each with one Lookup in flight at a
// time (as an engine's scheduler asks before a prefill), driven from a few threads. Each
// thread owns its share of the connections (TCP or the Unix socket), non-blocking, in one epoll loop, and speaks
// the wire protocol (protocol.h) itself: the Hello exchange, then Lookup frames encoded once
// per chain (the request id patched per request) and their replies decoded and checked.
//
// Nothing waits without a deadline: connections must connect and finish Hello within
// `connect_timeout_ms`, a reply must arrive within `request_timeout_ms`. A connection the
// server refuses (an Error frame, e.g. over its connection limit), closes or leaves waiting is
// counted in `errors` and dropped; the others keep going.
//
// Thread-safety: RunLookupLoad may be called from one thread at a time; it starts and joins
// its own threads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kvtier/block.h"
#include "kvtier/status.h"

namespace kvtier::bench {

struct LookupLoadOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::string unix_socket;         // when set, the connections go here instead of host:port
  int clients = 1;                 // connections, one lookup in flight each
  int threads = 2;                 // epoll loops driving them
  double seconds = 10;             // the measured window, after every connection said Hello
  int connect_timeout_ms = 20000;  // for all connections to connect and finish Hello
  int request_timeout_ms = 5000;   // for each reply
  uint64_t seed = 1;
  // Called once every connection said Hello (or failed), just before the window opens: where
  // the caller reads the server's counters, so that they leave out the connection setup.
  std::function<void()> at_window_start;
};

struct LookupLoadResult {
  double elapsed_s = 0;
  uint64_t lookups = 0;             // replies received in the window
  uint64_t misses = 0;              // replies whose stored prefix was shorter than the chain
  uint64_t errors = 0;              // connections refused, failed, closed or timed out
  std::string first_error;
  std::vector<float> latencies_us;  // per lookup, sorted
};

// Drives lookups of `chains` (each client picks one at random per request) for
// options.seconds. InvalidArgument for bad options or no chains; every failure of a
// connection is an error in the result, not a Status.
Result<LookupLoadResult> RunLookupLoad(const LookupLoadOptions& options, const std::vector<std::vector<BlockKey>>& chains);

}  // namespace kvtier::bench
