// The chaos benchmark's clients (chaos_benchmark.h): one thread each, with its own
// connection, putting, reading and looking up chains of its own and checking every byte
// against chaos_model.h; and the check after a daemon restart that the acknowledged blocks
// that must have survived are back.
//
// Thread-safety: RunChaosClient runs on its own thread per client; VerifyDurable while the
// gate is closed.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "chaos_model.h"
#include "kvtier/status.h"

namespace kvtier::bench::chaos {

struct ClientEnv {
  uint64_t run = 0;        // keys' run tag (chaos_model.h ChainBlockKey)
  uint64_t seed = 0;       // the workload's seed
  std::string unix_socket;
  uint16_t tcp_port = 0;
  uint64_t window = 0;     // chaos_model.h DurableWindow
  Gate* gate = nullptr;
  Tally* tally = nullptr;
  const std::atomic<bool>* stop = nullptr;
};

// Client `index` (even: Unix socket and shared memory; odd: TCP) until *env.stop.
void RunChaosClient(const ClientEnv& env, int index, ClientModel& model);

struct VerifyResult {
  uint64_t checked = 0;   // acknowledged blocks that had to be back
  uint64_t missing = 0;   // of those, not back
  uint64_t wrong = 0;     // of those, back with other bytes
  uint64_t recovery_dropped = 0;  // what the daemon's recovery dropped (its Stats)
};

// Reads back every acknowledged block of a fresh chain of `models` (chaos_model.h), over a
// new Unix connection. Chains found short are marked acknowledged only as far as they are
// back, so that the next restart does not count their loss again.
Result<VerifyResult> VerifyDurable(const ClientEnv& env, const std::vector<std::unique_ptr<ClientModel>>& models);

// Puts chain `chain` of client `index` over a new Unix connection: Ok when the daemon
// acknowledged all of it, else why not (its error, or ResourceExhausted for a refused tail).
Status ProbePut(const ClientEnv& env, int index, uint64_t chain);

// The daemon's store counter `name` from its Stats, over a fresh connection.
Result<uint64_t> DaemonCounter(const std::string& unix_socket, const std::string& name);

}  // namespace kvtier::bench::chaos
