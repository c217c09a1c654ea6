// A fresh directory under /tmp for one benchmark phase's daemon or store, removed with
// everything in it when the TempDir goes.
//
// Thread-safety: none needed; one owner.
#pragma once

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include "kvtier/status.h"

namespace kvtier::bench {

class TempDir {
 public:
  static Result<TempDir> Create() {
    char pattern[] = "/tmp/kvtier-bench-serve-XXXXXX";
    if (::mkdtemp(pattern) == nullptr) return Status::IoError(std::string("mkdtemp in /tmp: ") + std::strerror(errno));
    return TempDir(pattern);
  }
  TempDir(TempDir&& other) noexcept : path_(std::exchange(other.path_, {})) {}
  TempDir& operator=(TempDir&&) = delete;
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace kvtier::bench
