// Status and Result<T>: the one way kvtier reports errors.
//
// Every fallible function returns a Status (no value) or a Result<T> (a value or a
// Status). Both are [[nodiscard]]. Messages name what was wrong and, where a user can act,
// how to fix it ("<file>: field 'num_attention_heads' must be a positive integer, got -3").
// No exceptions cross kvtier's public interfaces.
//
// Thread-safety: values; safe to copy and read from many threads, not to mutate from many.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kvtier {

// On the wire and in the Python package: do not renumber. Codes 1-15 are generic;
// later subsystems take new numbers from 16 upward, never reusing one.
enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,  // the caller's input is malformed or out of range
  kNotFound = 2,         // a named thing (file, model, key) does not exist
  kIoError = 3,          // the OS refused or failed an I/O operation
  kCorruption = 4,       // stored data failed a check (checksum, format)
  kUnsupported = 5,      // valid input that this build or platform cannot handle
  kResourceExhausted = 6,// capacity, memory or quota ran out
  kUnavailable = 7,      // a dependency (device, server) is not reachable now
  kInternal = 8,         // a kvtier bug: please report it
  kFailedPrecondition = 9,  // the operation is valid but not in the current state (pinned, not a leaf)
  kAlreadyExists = 10,   // a key is taken (by different content: a hash collision)
  kPermissionDenied = 11,// the caller is not allowed (a wrong auth token, an unknown tenant)
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK

  static Status Ok() { return {}; }
  static Status InvalidArgument(std::string message) { return {StatusCode::kInvalidArgument, std::move(message)}; }
  static Status NotFound(std::string message) { return {StatusCode::kNotFound, std::move(message)}; }
  static Status IoError(std::string message) { return {StatusCode::kIoError, std::move(message)}; }
  static Status Corruption(std::string message) { return {StatusCode::kCorruption, std::move(message)}; }
  static Status Unsupported(std::string message) { return {StatusCode::kUnsupported, std::move(message)}; }
  static Status ResourceExhausted(std::string message) { return {StatusCode::kResourceExhausted, std::move(message)}; }
  static Status Unavailable(std::string message) { return {StatusCode::kUnavailable, std::move(message)}; }
  static Status Internal(std::string message) { return {StatusCode::kInternal, std::move(message)}; }
  static Status FailedPrecondition(std::string message) { return {StatusCode::kFailedPrecondition, std::move(message)}; }
  static Status AlreadyExists(std::string message) { return {StatusCode::kAlreadyExists, std::move(message)}; }
  static Status PermissionDenied(std::string message) { return {StatusCode::kPermissionDenied, std::move(message)}; }
  // A status with a code received from elsewhere (a server's error reply); an OK code with a
  // message is not an error, so it becomes Internal.
  static Status FromCode(StatusCode code, std::string message) {
    return {code == StatusCode::kOk && !message.empty() ? StatusCode::kInternal : code, std::move(message)};
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "InvalidArgument: <message>", or "OK".
  std::string ToString() const;

  // The same error with "<context>: " in front of the message; OK stays OK.
  Status WithContext(std::string_view context) const;

 private:
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value or an error. Access to value() on an error is a programming bug and aborts.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (status_.ok()) status_ = Status::Internal("Result constructed from an OK status without a value");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  const T& value() const& { CheckOk(); return *value_; }
  T& value() & { CheckOk(); return *value_; }
  T&& value() && { CheckOk(); return std::move(*value_); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  void CheckOk() const;

  std::optional<T> value_;
  Status status_;
};

[[noreturn]] void AbortOnBadResultAccess(const Status& status);

template <typename T>
void Result<T>::CheckOk() const {
  if (!value_.has_value()) AbortOnBadResultAccess(status_);
}

}  // namespace kvtier

#define KVTIER_CONCAT_INNER(a, b) a##b
#define KVTIER_CONCAT(a, b) KVTIER_CONCAT_INNER(a, b)

// Returns the Status of `expr` from the enclosing function when it is not OK.
#define KVTIER_RETURN_IF_ERROR(expr)                  \
  do {                                                \
    ::kvtier::Status kvtier_status_ = (expr);         \
    if (!kvtier_status_.ok()) return kvtier_status_;  \
  } while (false)

// `lhs = value of rexpr`, or returns its Status from the enclosing function.
#define KVTIER_ASSIGN_OR_RETURN(lhs, rexpr) \
  KVTIER_ASSIGN_OR_RETURN_IMPL(KVTIER_CONCAT(kvtier_result_, __LINE__), lhs, rexpr)
#define KVTIER_ASSIGN_OR_RETURN_IMPL(result, lhs, rexpr) \
  auto result = (rexpr);                                 \
  if (!result.ok()) return result.status();              \
  lhs = std::move(result).value()
