#include "util/json_document.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

namespace kvtier {
namespace {

bool IsIdentifierChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// Rewrites the bare literals NaN, Infinity and -Infinity outside strings into strings.
std::string QuoteNonFiniteLiterals(std::string_view text) {
  static constexpr std::string_view kLiterals[] = {"-Infinity", "Infinity", "NaN"};
  std::string out;
  out.reserve(text.size() + 16);
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) {
        out += text[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      continue;
    }
    bool replaced = false;
    for (std::string_view literal : kLiterals) {
      const bool at_token_start = i == 0 || !IsIdentifierChar(text[i - 1]);
      const std::size_t end = i + literal.size();
      if (at_token_start && text.substr(i, literal.size()) == literal &&
          (end == text.size() || !IsIdentifierChar(text[end]))) {
        out += '"';
        out += literal;
        out += '"';
        i = end - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

std::string JoinNames(std::initializer_list<std::string_view> names) {
  std::string out;
  for (std::string_view name : names) {
    if (!out.empty()) out += "' or '";
    out += name;
  }
  return out;
}

std::string Describe(const nlohmann::json& value) {
  std::string dumped = value.dump();
  if (dumped.size() > 60) dumped = dumped.substr(0, 57) + "...";
  return std::string(value.type_name()) + " " + dumped;
}

}  // namespace

Result<nlohmann::json> ParseLenientJson(std::string_view text, std::string_view source) {
  try {
    return nlohmann::json::parse(QuoteNonFiniteLiterals(text));
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(std::string(source) + ": not valid JSON (" + e.what() + ")");
  }
}

Result<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound(path + ": no such file");
    return Status::IoError(path + ": cannot open (" + std::strerror(err) + ")");
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return Status::IoError(path + ": read failed");
  return contents.str();
}

JsonFields::JsonFields(const nlohmann::json& object, std::string source, std::string path)
    : object_(&object), source_(std::move(source)), path_(std::move(path)) {}

Status JsonFields::FieldError(std::string_view name, std::string_view message) const {
  std::string full = source_ + ": field '";
  if (!path_.empty()) full += path_ + ".";
  full += std::string(name) + "' " + std::string(message);
  return Status::InvalidArgument(std::move(full));
}

std::optional<std::pair<std::string_view, const nlohmann::json*>> JsonFields::Find(
    std::initializer_list<std::string_view> names) const {
  if (!object_->is_object()) return std::nullopt;
  for (std::string_view name : names) {
    auto it = object_->find(std::string(name));
    if (it != object_->end() && !it->is_null()) return std::make_pair(name, &*it);
  }
  return std::nullopt;
}

bool JsonFields::Has(std::initializer_list<std::string_view> names) const {
  return Find(names).has_value();
}

Result<std::optional<JsonFields>> JsonFields::Object(std::string_view name) const {
  auto found = Find({name});
  if (!found) return std::optional<JsonFields>();
  if (!found->second->is_object()) {
    return FieldError(name, "must be an object, got " + Describe(*found->second));
  }
  std::string nested = path_.empty() ? std::string(name) : path_ + "." + std::string(name);
  return std::optional<JsonFields>(JsonFields(*found->second, source_, std::move(nested)));
}

Result<int64_t> JsonFields::ToInt(std::string_view name, const nlohmann::json& value, int64_t min,
                                  int64_t max) const {
  int64_t out = 0;
  if (value.is_number_integer()) {
    if (value.is_number_unsigned() &&
        value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return FieldError(name, "is too large: " + value.dump());
    }
    out = value.get<int64_t>();
  } else if (value.is_number_float()) {
    const double d = value.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15) {
      return FieldError(name, "must be an integer, got " + value.dump());
    }
    out = static_cast<int64_t>(d);
  } else if (value.is_string() &&
             (value == "NaN" || value == "Infinity" || value == "-Infinity")) {
    return FieldError(name, "must be a finite integer, got " + value.get<std::string>());
  } else {
    return FieldError(name, "must be an integer, got " + Describe(value));
  }
  if (out < min) {
    return FieldError(name, "must be >= " + std::to_string(min) + ", got " + std::to_string(out));
  }
  if (out > max) {
    return FieldError(name, "must be <= " + std::to_string(max) + ", got " + std::to_string(out));
  }
  return out;
}

Result<int64_t> JsonFields::RequireInt(std::initializer_list<std::string_view> names, int64_t min,
                                       int64_t max) const {
  auto found = Find(names);
  if (!found) {
    return FieldError(JoinNames(names), "is missing (or null); it is required to size the KV cache");
  }
  return ToInt(found->first, *found->second, min, max);
}

Result<std::optional<int64_t>> JsonFields::OptionalInt(std::initializer_list<std::string_view> names,
                                                       int64_t min, int64_t max) const {
  auto found = Find(names);
  if (!found) return std::optional<int64_t>();
  KVTIER_ASSIGN_OR_RETURN(int64_t value, ToInt(found->first, *found->second, min, max));
  return std::optional<int64_t>(value);
}

Result<std::optional<double>> JsonFields::OptionalNumber(
    std::initializer_list<std::string_view> names) const {
  auto found = Find(names);
  if (!found) return std::optional<double>();
  const nlohmann::json& value = *found->second;
  if (value.is_number()) return std::optional<double>(value.get<double>());
  if (value == "NaN") return std::optional<double>(std::numeric_limits<double>::quiet_NaN());
  if (value == "Infinity") return std::optional<double>(std::numeric_limits<double>::infinity());
  if (value == "-Infinity") return std::optional<double>(-std::numeric_limits<double>::infinity());
  return FieldError(found->first, "must be a number, got " + Describe(value));
}

Result<std::optional<bool>> JsonFields::OptionalBool(std::initializer_list<std::string_view> names) const {
  auto found = Find(names);
  if (!found) return std::optional<bool>();
  if (!found->second->is_boolean()) {
    return FieldError(found->first, "must be true or false, got " + Describe(*found->second));
  }
  return std::optional<bool>(found->second->get<bool>());
}

Result<std::optional<std::string>> JsonFields::OptionalString(
    std::initializer_list<std::string_view> names) const {
  auto found = Find(names);
  if (!found) return std::optional<std::string>();
  if (!found->second->is_string()) {
    return FieldError(found->first, "must be a string, got " + Describe(*found->second));
  }
  return std::optional<std::string>(found->second->get<std::string>());
}

Result<std::optional<std::vector<std::string>>> JsonFields::OptionalStringArray(
    std::initializer_list<std::string_view> names) const {
  auto found = Find(names);
  if (!found) return std::optional<std::vector<std::string>>();
  const nlohmann::json& value = *found->second;
  if (!value.is_array()) return FieldError(found->first, "must be an array of strings, got " + Describe(value));
  std::vector<std::string> out;
  out.reserve(value.size());
  for (std::size_t i = 0; i < value.size(); ++i) {
    if (!value[i].is_string()) {
      return FieldError(found->first, "must hold only strings; element " + std::to_string(i) +
                                          " is " + Describe(value[i]));
    }
    out.push_back(value[i].get<std::string>());
  }
  return std::optional<std::vector<std::string>>(std::move(out));
}

Result<std::optional<std::vector<int64_t>>> JsonFields::OptionalIntArray(
    std::initializer_list<std::string_view> names, int64_t min, int64_t max) const {
  auto found = Find(names);
  if (!found) return std::optional<std::vector<int64_t>>();
  const nlohmann::json& value = *found->second;
  if (!value.is_array()) return FieldError(found->first, "must be an array of integers, got " + Describe(value));
  std::vector<int64_t> out;
  out.reserve(value.size());
  for (const nlohmann::json& element : value) {
    KVTIER_ASSIGN_OR_RETURN(int64_t v, ToInt(found->first, element, min, max));
    out.push_back(v);
  }
  return std::optional<std::vector<int64_t>>(std::move(out));
}

}  // namespace kvtier
