// MT_CHECK: broken internal invariants abort with file:line.
//
// Only for conditions that cannot be caused by input (a programming error). Anything a
// user or a file can trigger goes through Status (core/status.h) instead.
#pragma once

namespace mt {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const char* msg);
}  // namespace mt

#define MT_CHECK(cond) \
  ((cond) ? (void)0 : ::mt::check_failed(__FILE__, __LINE__, #cond, nullptr))
#define MT_CHECK_MSG(cond, msg) \
  ((cond) ? (void)0 : ::mt::check_failed(__FILE__, __LINE__, #cond, (msg)))
