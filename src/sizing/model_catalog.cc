#include "kvtier/model_catalog.h"

#include <algorithm>
#include <cctype>

#include "util/embedded_file.h"

namespace kvtier_catalog_data {
extern const kvtier::EmbeddedFile kFiles[];
extern const std::size_t kFileCount;
}  // namespace kvtier_catalog_data

namespace kvtier {
namespace {

std::string Stem(std::string_view file) {
  std::string stem(file.substr(0, file.rfind('.')));
  std::transform(stem.begin(), stem.end(), stem.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return stem;
}

std::string Canonical(std::string_view name) {
  std::string out;
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c))) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

const EmbeddedFile* Find(std::string_view name) {
  const std::string wanted = Canonical(name);
  for (std::size_t i = 0; i < kvtier_catalog_data::kFileCount; ++i) {
    const EmbeddedFile& file = kvtier_catalog_data::kFiles[i];
    if (Canonical(Stem(file.name)) == wanted) return &file;
  }
  return nullptr;
}

Status NotInCatalog(std::string_view name) {
  std::string names;
  for (const CatalogEntry& entry : ListCatalog()) names += (names.empty() ? "" : ", ") + entry.name;
  return Status::NotFound("model '" + std::string(name) + "' is not in the catalog (" + names +
                          "); pass a config.json with --config");
}

}  // namespace

std::vector<CatalogEntry> ListCatalog() {
  std::vector<CatalogEntry> out;
  for (std::size_t i = 0; i < kvtier_catalog_data::kFileCount; ++i) {
    const EmbeddedFile& file = kvtier_catalog_data::kFiles[i];
    out.push_back({Stem(file.name), std::string(file.name)});
  }
  std::sort(out.begin(), out.end(), [](const CatalogEntry& a, const CatalogEntry& b) { return a.name < b.name; });
  return out;
}

Result<std::string_view> CatalogConfigText(std::string_view name) {
  const EmbeddedFile* file = Find(name);
  if (file == nullptr) return NotInCatalog(name);
  return file->contents;
}

Result<ModelSpec> LoadCatalogModel(std::string_view name) {
  const EmbeddedFile* file = Find(name);
  if (file == nullptr) return NotInCatalog(name);
  const std::string stem = Stem(file->name);
  return ParseModelConfig(file->contents, "catalog:" + stem, stem);
}

}  // namespace kvtier
