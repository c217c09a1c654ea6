// libFuzzer target: any bytes given to a trace reader must yield requests or a clear error,
// never a crash, a hang or undefined behaviour; requests that parse are cut into replay
// blocks too. The first byte picks the format, the rest is the document.
//
// Build and run: cmake --preset fuzz && cmake --build --preset fuzz --target trace_fuzzer
//   ./build/fuzz/fuzz/trace_fuzzer -max_len=16384 build/fuzz/trace-corpus fuzz/corpus/trace
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kvtier/trace.h"
#include "replay/trace_blocks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  constexpr kvtier::TraceFormat kFormats[] = {
      kvtier::TraceFormat::kCanonical, kvtier::TraceFormat::kMooncake,  kvtier::TraceFormat::kShareGpt,
      kvtier::TraceFormat::kLmsys,     kvtier::TraceFormat::kTauBench,  kvtier::TraceFormat::kSweAgent,
      kvtier::TraceFormat::kToolBench, kvtier::TraceFormat::kAzure};
  const kvtier::TraceFormat format = kFormats[data[0] % (sizeof kFormats / sizeof kFormats[0])];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  kvtier::TraceReadOptions options;
  options.max_requests = 64;
  kvtier::Result<kvtier::Trace> trace = kvtier::ParseTraceText(text, "fuzz", format, options);
  if (!trace.ok()) {
    if (trace.status().message().empty()) __builtin_trap();  // every error must say something
    return 0;
  }
  (void)kvtier::TraceToReplayRequests(*trace);
  return 0;
}
