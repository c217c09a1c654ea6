// A file compiled into the binary by cmake/EmbedFiles.cmake.
#pragma once

#include <string_view>

namespace kvtier {

struct EmbeddedFile {
  std::string_view name;      // base name, e.g. "DeepSeek-V3.json"
  std::string_view contents;  // the file's bytes
};

}  // namespace kvtier
