// libFuzzer target: any bytes given to the config.json reader must yield a ModelSpec or a
// clear error, never a crash, a hang or undefined behaviour. A spec that parses is sized
// under a few layouts too, since sizing arithmetic is where odd values would bite.
//
// Build and run: cmake --preset fuzz && cmake --build --preset fuzz --target config_fuzzer
//   ./build/fuzz/fuzz/config_fuzzer -max_len=8192 build/fuzz/corpus fuzz/corpus/config
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kvtier/capacity_plan.h"
#include "kvtier/model_spec.h"
#include "kvtier/sizing.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  kvtier::Result<kvtier::ModelSpec> spec = kvtier::ParseModelConfig(text, "fuzz.json");
  if (!spec.ok()) {
    if (spec.status().message().empty()) __builtin_trap();  // every error must say something
    return 0;
  }
  for (int64_t tp : {1, 2, 8}) {
    kvtier::SizingOptions options;
    options.parallel.tensor_parallel = tp;
    options.kv_dtype = tp == 2 ? "int4" : "auto";
    kvtier::Result<kvtier::KvSizing> sizing = kvtier::ComputeKvSizing(*spec, options);
    if (!sizing.ok()) continue;
    (void)sizing->BytesPerSequence(4096, 8192);
    kvtier::GpuMemoryOptions gpu;
    gpu.gpu_mem_gib = 80;
    gpu.context = 4096;
    (void)kvtier::PlanGpuMemory(*spec, *sizing, gpu);
  }
  return 0;
}
