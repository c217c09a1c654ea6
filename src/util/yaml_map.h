// Checked reads of one YAML map of a configuration file: unknown keys are errors that name
// the place and the keys known there, and every value is parsed strictly (a typo must not
// fall back to a default). Shared by the tier configuration and `kvtier serve`'s.
//
// Thread-safety: a view of a node owned by the caller; one thread.
#pragma once

#include <cstdint>
#include <exception>
#include <set>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "kvtier/capacity_plan.h"
#include "kvtier/status.h"

namespace kvtier {

class YamlMap {
 public:
  YamlMap(const YAML::Node& node, std::string where) : node_(node), where_(std::move(where)) {}

  Status CheckKeys(const std::set<std::string>& allowed) const {
    for (const auto& entry : node_) {
      const std::string key = entry.first.as<std::string>();
      if (!allowed.count(key)) {
        std::string known;
        for (const std::string& k : allowed) known += (known.empty() ? "" : ", ") + k;
        return Status::InvalidArgument(where_ + ": unknown key '" + key + "' (known here: " + known + ")");
      }
    }
    return Status::Ok();
  }
  bool Has(const char* key) const { return static_cast<bool>(node_[key]); }

  Result<std::string> String(const char* key) const {
    if (!node_[key] || !node_[key].IsScalar()) return Status::InvalidArgument(where_ + ": '" + key + "' must be a string");
    return node_[key].as<std::string>();
  }
  Result<uint64_t> Bytes(const char* key) const {
    KVTIER_ASSIGN_OR_RETURN(std::string text, String(key));
    Result<uint64_t> bytes = ParseByteSize(text);
    if (!bytes.ok()) return bytes.status().WithContext(where_ + "." + key);
    return *bytes;
  }
  Result<int64_t> Int(const char* key, int64_t min, int64_t max) const {
    KVTIER_ASSIGN_OR_RETURN(std::string text, String(key));
    try {
      std::size_t used = 0;
      const long long value = std::stoll(text, &used);
      if (used == text.size() && value >= min && value <= max) return static_cast<int64_t>(value);
    } catch (const std::exception&) {
    }
    return Status::InvalidArgument(where_ + ": '" + key + "' must be an integer from " + std::to_string(min) + " to " +
                                   std::to_string(max) + ", got '" + text + "'");
  }
  // An int-typed option; the bounds keep it in range.
  Result<int> SmallInt(const char* key, int min, int max) const {
    KVTIER_ASSIGN_OR_RETURN(int64_t value, Int(key, min, max));
    return static_cast<int>(value);
  }
  Result<bool> Bool(const char* key) const {
    KVTIER_ASSIGN_OR_RETURN(std::string text, String(key));
    if (text == "true") return true;
    if (text == "false") return false;
    return Status::InvalidArgument(where_ + ": '" + key + "' must be true or false, got '" + text + "'");
  }
  Result<std::vector<std::string>> Strings(const char* key) const {
    if (!node_[key] || !node_[key].IsSequence() || node_[key].size() == 0) {
      return Status::InvalidArgument(where_ + ": '" + key + "' must be a non-empty list");
    }
    std::vector<std::string> out;
    for (const auto& item : node_[key]) {
      if (!item.IsScalar()) return Status::InvalidArgument(where_ + ": '" + key + "' must hold strings");
      out.push_back(item.as<std::string>());
    }
    return out;
  }
  Result<double> Double(const char* key, double min, double max) const {
    KVTIER_ASSIGN_OR_RETURN(std::string text, String(key));
    try {
      std::size_t used = 0;
      const double value = std::stod(text, &used);
      if (used == text.size() && value >= min && value <= max) return value;
    } catch (const std::exception&) {
    }
    return Status::InvalidArgument(where_ + ": '" + key + "' must be a number from " + std::to_string(min) + " to " +
                                   std::to_string(max) + ", got '" + text + "'");
  }
  const std::string& where() const { return where_; }

 private:
  const YAML::Node& node_;
  std::string where_;
};

}  // namespace kvtier
