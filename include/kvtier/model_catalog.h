// The built-in model catalog: real Hugging Face config.json files compiled into the
// binary (data/models/, sources in data/models/SOURCES.md), looked up by name.
//
// Thread-safety: read-only data; safe from any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kvtier/model_spec.h"
#include "kvtier/status.h"

namespace kvtier {

struct CatalogEntry {
  std::string name;  // lower-case file stem: "deepseek-v3", "llama-3-70b", "qwen2.5-72b"
  std::string file;  // "DeepSeek-V3.json"
};

// Sorted by name.
std::vector<CatalogEntry> ListCatalog();

// Names match case-insensitively and ignoring punctuation ("Qwen-2.5-72B" finds
// "qwen2.5-72b"). NotFound lists the catalog.
Result<ModelSpec> LoadCatalogModel(std::string_view name);

// The raw config.json text of a catalog model.
Result<std::string_view> CatalogConfigText(std::string_view name);

}  // namespace kvtier
