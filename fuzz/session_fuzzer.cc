// libFuzzer target: the service's request handling (src/server/session.h) behind the frame
// decoder, on any bytes. The input is a sequence of frames; each one that decodes is served
// by one session (after a Hello) against a real store. Every request must end in a reply or
// an error with a message, never a crash, a hang or undefined behaviour, whatever keys,
// references, lengths, pins or tags it names.
//
// Build and run: cmake --preset fuzz && cmake --build --preset fuzz --target session_fuzzer
//   ./build/fuzz/fuzz/session_fuzzer -max_len=4096 build/fuzz/session-corpus fuzz/corpus/protocol
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <variant>

#include "kvtier/protocol.h"
#include "kvtier/server.h"
#include "kvtier/store.h"
#include "kvtier/tiers.h"
#include "server/session.h"

namespace {

kvtier::TieredStore& Store() {
  static std::unique_ptr<kvtier::TieredStore> store = [] {
    std::vector<std::unique_ptr<kvtier::Tier>> tiers;
    tiers.push_back(kvtier::NewDramTier(
                        {.capacity_bytes = 8u << 20, .lock_memory = false, .huge_pages = false, .pin_for_gpu = false})
                        .value());
    tiers.push_back(kvtier::NewDramTier({.name = "slow", .capacity_bytes = 8u << 20, .lock_memory = false,
                                         .huge_pages = false, .pin_for_gpu = false})
                        .value());
    kvtier::StoreOptions options;
    options.synchronous_moves = true;  // deterministic: no mover threads between inputs
    return kvtier::TieredStore::Open(std::move(tiers), std::move(options)).value();
  }();
  return *store;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvtier::protocol;
  static const kvtier::ServerOptions options = [] {
    kvtier::ServerOptions o;
    o.unix_socket_path = "unused";
    o.limits = Limits{.max_payload_bytes = 1u << 20, .max_batch = 1024, .max_string_bytes = 256};
    o.max_pins_per_client = 64;
    return o;
  }();
  kvtier::server::Session session(Store(), options, /*tcp=*/false);
  std::vector<kvtier::ScopedFd> no_fds;
  kvtier::server::Reply hello =
      session.Handle(Hello{.tenant = "fuzz", .auth_token = "", .segment_bytes = {}}, kVersion, no_fds);
  if (std::holds_alternative<ErrorReply>(hello.message)) __builtin_trap();

  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  while (bytes.size() >= kHeaderBytes) {
    kvtier::Result<FrameHeader> header = DecodeHeader(bytes, options.limits);
    if (!header.ok() || bytes.size() - kHeaderBytes < header->payload_bytes) break;
    kvtier::Result<Message> request =
        DecodePayload(*header, bytes.subspan(kHeaderBytes, header->payload_bytes), options.limits);
    bytes = bytes.subspan(kHeaderBytes + header->payload_bytes);
    if (!request.ok() || header->reply) continue;
    kvtier::server::Reply reply = session.Handle(*request, header->version, no_fds);
    if (const auto* error = std::get_if<ErrorReply>(&reply.message); error != nullptr && error->message.empty()) {
      __builtin_trap();
    }
    std::vector<std::byte> frame;
    (void)EncodeFrame(reply.message, header->request_id, header->type, options.limits, frame, header->version);
    if (reply.close) break;
  }
  return 0;
}
