// Links the installed library and uses it: the KV bytes per token of a catalog model.
#include <cstdio>

#include "kvtier/model_catalog.h"
#include "kvtier/sizing.h"

int main() {
  kvtier::Result<kvtier::ModelSpec> model = kvtier::LoadCatalogModel("llama-3-8b");
  if (!model.ok()) {
    std::fprintf(stderr, "consumer: %s\n", model.status().ToString().c_str());
    return 1;
  }
  kvtier::Result<kvtier::KvSizing> sizing = kvtier::ComputeKvSizing(*model, {.block_size = 16});
  if (!sizing.ok()) {
    std::fprintf(stderr, "consumer: %s\n", sizing.status().ToString().c_str());
    return 1;
  }
  std::printf("llama-3-8b: %llu KV bytes per token\n", static_cast<unsigned long long>(sizing->kv_bytes_per_token));
  return sizing->kv_bytes_per_token == 131072 ? 0 : 1;
}
