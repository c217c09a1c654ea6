// Checked reads of one YAML map of a configuration file: unknown keys are errors that name
// the place and the keys known there, and every value is parsed strictly (a typo must not
// fall back to a default). Shared by the tier configuration and `kvtier serve`'s.
//
// Thread-safety: a view of a node owned by the caller; one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
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
    if (!node_[key] || !node_[key].IsScalar()) return Status::InvalidArgument(where_ + ": '" + key + "' must be true or false");
    const std::string text = node_[key].as<std::string>();
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
  // Unix seconds, or a UTC time as RFC 3339 ("2027-01-31T00:00:00Z") or a date ("2027-01-31",
  // its midnight). Other offsets than Z are refused rather than guessed at.
  Result<std::chrono::sys_seconds> UtcTime(const char* key) const {
    KVTIER_ASSIGN_OR_RETURN(std::string text, String(key));
    if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos) {
      KVTIER_ASSIGN_OR_RETURN(int64_t seconds, Int(key, 0, int64_t{1} << 40));
      return std::chrono::sys_seconds(std::chrono::seconds(seconds));
    }
    int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0, used = 0;
    bool ok = std::sscanf(text.c_str(), "%4d-%2d-%2d%n", &y, &mo, &d, &used) == 3 && used == 10;
    if (ok && text.size() > 10) {
      used = 0;
      ok = std::sscanf(text.c_str() + 10, "T%2d:%2d:%2dZ%n", &h, &mi, &sec, &used) == 3 &&
           static_cast<std::size_t>(used) == text.size() - 10 && h < 24 && mi < 60 && sec < 60;
    }
    const std::chrono::year_month_day day{std::chrono::year(y), std::chrono::month(static_cast<unsigned>(mo)),
                                          std::chrono::day(static_cast<unsigned>(d))};
    if (!ok || !day.ok() || h < 0 || mi < 0 || sec < 0) {
      return Status::InvalidArgument(where_ + ": '" + key + "' must be Unix seconds or a UTC time like " +
                                     "2027-01-31T00:00:00Z, got '" + text + "'");
    }
    return std::chrono::sys_days(day) + std::chrono::hours(h) + std::chrono::minutes(mi) + std::chrono::seconds(sec);
  }
  const std::string& where() const { return where_; }

 private:
  const YAML::Node& node_;
  std::string where_;
};

}  // namespace kvtier
