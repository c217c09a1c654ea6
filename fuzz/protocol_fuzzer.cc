// libFuzzer target: the service's frame decoder (protocol.h) on any bytes. A frame either
// decodes or is a clear error, never a crash, a hang or undefined behaviour; a frame that
// decodes encodes again to a frame that decodes.
//
// Build and run: cmake --preset fuzz && cmake --build --preset fuzz --target protocol_fuzzer
//   ./build/fuzz/fuzz/protocol_fuzzer -max_len=4096 build/fuzz/protocol-corpus fuzz/corpus/protocol
#include <cstddef>
#include <cstdint>
#include <span>

#include "kvtier/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvtier::protocol;
  const Limits limits{.max_payload_bytes = 1u << 20, .max_batch = 1024, .max_string_bytes = 256};
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  kvtier::Result<FrameHeader> header = DecodeHeader(bytes, limits);
  if (!header.ok()) {
    if (header.status().message().empty()) __builtin_trap();
    return 0;
  }
  if (bytes.size() - kHeaderBytes < header->payload_bytes) return 0;  // the rest has not arrived
  kvtier::Result<Message> message = DecodePayload(*header, bytes.subspan(kHeaderBytes, header->payload_bytes), limits);
  if (!message.ok()) {
    if (message.status().message().empty()) __builtin_trap();
    return 0;
  }
  std::vector<std::byte> again;
  if (!EncodeFrame(*message, header->request_id, header->type, limits, again, header->version).ok()) __builtin_trap();
  kvtier::Result<FrameHeader> again_header = DecodeHeader(again, limits);
  if (!again_header.ok()) __builtin_trap();
  if (!DecodePayload(*again_header, std::span(again).subspan(kHeaderBytes), limits).ok()) __builtin_trap();
  return 0;
}
