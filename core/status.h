// Status and StatusOr: how untrusted input reports failure.
//
// Invariant: code that parses or validates anything from outside the process (files,
// requests, command lines) returns a Status naming what was wrong and where; it never
// aborts and never throws. Broken *internal* invariants use MT_CHECK (core/check.h)
// instead, which aborts with file:line.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "core/check.h"

namespace mt {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // a bad value from the user (flag, request field)
  kDataLoss,         // a malformed or truncated file
  kUnimplemented,    // a valid but unsupported feature (type, architecture)
  kNotFound,         // a missing key, tensor or file
  kIoError,          // the operating system refused (open, mmap, write)
  kOutOfRange,       // a budget or size that cannot fit
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return {}; }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "data loss: tensor 'blk.0.ffn_up_exps.weight': offset 12 outside data section"
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status data_loss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }

// A value or the Status explaining why there is none.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    MT_CHECK_MSG(!status_.ok(), "StatusOr built from an ok Status without a value");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & {
    MT_CHECK_MSG(ok(), status_.to_string().c_str());
    return *value_;
  }
  const T& value() const& {
    MT_CHECK_MSG(ok(), status_.to_string().c_str());
    return *value_;
  }
  T&& value() && {
    MT_CHECK_MSG(ok(), status_.to_string().c_str());
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace mt

// Propagate a failed Status to the caller.
#define MT_RETURN_IF_ERROR(expr)            \
  do {                                      \
    ::mt::Status mt_status_ = (expr);       \
    if (!mt_status_.ok()) return mt_status_; \
  } while (0)

#define MT_CONCAT_INNER(a, b) a##b
#define MT_CONCAT(a, b) MT_CONCAT_INNER(a, b)
// Bind the value of a StatusOr or return its Status.
#define MT_ASSIGN_OR_RETURN(lhs, expr) MT_ASSIGN_OR_RETURN_IMPL(MT_CONCAT(mt_sor_, __LINE__), lhs, expr)
#define MT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
