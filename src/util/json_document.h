// Parsing of JSON documents written by other tools (Hugging Face config.json files), and
// typed access to their fields with errors that name the file and the field.
//
// Real config files are not always strict JSON: Python's json.dump writes NaN, Infinity
// and -Infinity. nlohmann::json rejects those, and no maintained C++ parser in Debian
// accepts them, so ParseLenientJson rewrites them (outside strings) into the strings
// "NaN", "Infinity", "-Infinity" before parsing. A numeric accessor that meets such a
// string reports a non-finite value instead of a type error.
//
// Thread-safety: JsonFields is an immutable view; safe to read from many threads.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvtier/status.h"

namespace kvtier {

// Parses `text`; `source` (a path or a name) prefixes every error message.
Result<nlohmann::json> ParseLenientJson(std::string_view text, std::string_view source);

// Reads a whole file; errors name the path and the OS reason.
Result<std::string> ReadTextFile(const std::string& path);

// Typed, alias-aware access to one JSON object. Each accessor takes the names a field may
// have (current first, legacy after: {"num_hidden_layers", "n_layer"}) and uses the first
// one present with a non-null value. `path` is the object's place in the document
// ("text_config") so that messages read "<source>: text_config.num_hidden_layers ...".
class JsonFields {
 public:
  JsonFields(const nlohmann::json& object, std::string source, std::string path = "");

  const nlohmann::json& object() const { return *object_; }
  const std::string& source() const { return source_; }

  // True when one of `names` is present with a non-null value.
  bool Has(std::initializer_list<std::string_view> names) const;
  // The nested object `name`, or nullopt when absent or null; an error when it is not an object.
  Result<std::optional<JsonFields>> Object(std::string_view name) const;

  // Integers must be integral numbers (4096 or 4096.0) in [min, max]. The default `max`,
  // 2^24, is far above any real model dimension and keeps products of a few of them exact.
  static constexpr int64_t kMaxDimension = int64_t{1} << 24;
  Result<int64_t> RequireInt(std::initializer_list<std::string_view> names, int64_t min,
                             int64_t max = kMaxDimension) const;
  Result<std::optional<int64_t>> OptionalInt(std::initializer_list<std::string_view> names,
                                             int64_t min, int64_t max = kMaxDimension) const;
  Result<std::optional<double>> OptionalNumber(std::initializer_list<std::string_view> names) const;
  Result<std::optional<bool>> OptionalBool(std::initializer_list<std::string_view> names) const;
  Result<std::optional<std::string>> OptionalString(std::initializer_list<std::string_view> names) const;
  Result<std::optional<std::vector<std::string>>> OptionalStringArray(
      std::initializer_list<std::string_view> names) const;
  Result<std::optional<std::vector<int64_t>>> OptionalIntArray(
      std::initializer_list<std::string_view> names, int64_t min, int64_t max = kMaxDimension) const;

  // "<source>: <path.>name <message>", as an InvalidArgument status.
  Status FieldError(std::string_view name, std::string_view message) const;

 private:
  // The first of `names` present and non-null, with its name.
  std::optional<std::pair<std::string_view, const nlohmann::json*>> Find(
      std::initializer_list<std::string_view> names) const;
  Result<int64_t> ToInt(std::string_view name, const nlohmann::json& value, int64_t min, int64_t max) const;

  const nlohmann::json* object_;
  std::string source_;
  std::string path_;
};

}  // namespace kvtier
