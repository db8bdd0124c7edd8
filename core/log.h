// Logging to stderr with a level, and a progress line for long work on a terminal.
//
// Machine-readable output goes to stdout; everything human goes to stderr, so
// `moetier inspect --json > x.json` stays clean. Progress is drawn only when stderr is
// a terminal and the caller has not asked for quiet output.
#pragma once

#include <cstdint>
#include <string>

namespace mt {

enum class LogLevel { kDebug = 0, kInfo, kWarn, kError };

void set_log_level(LogLevel level);
LogLevel log_level();
void log(LogLevel level, const std::string& message);
inline void log_debug(const std::string& m) { log(LogLevel::kDebug, m); }
inline void log_info(const std::string& m) { log(LogLevel::kInfo, m); }
inline void log_warn(const std::string& m) { log(LogLevel::kWarn, m); }
inline void log_error(const std::string& m) { log(LogLevel::kError, m); }

// "writing model.gguf  42% (1.2 GiB / 2.9 GiB)" redrawn in place; finish() ends the line.
// With a unit the counts are plain numbers: "bench pp512  50% (3 / 6 runs)". Off below the
// info level (--quiet).
class Progress {
 public:
  Progress(std::string label, uint64_t total, bool enabled, const char* unit = nullptr);
  void update(uint64_t done);
  void finish();

 private:
  std::string label_;
  uint64_t total_;
  bool enabled_;
  const char* unit_;  // null: bytes
  int last_percent_ = -1;
};

// "1.50 GiB", "812.00 MiB", "96 B"
std::string human_bytes(uint64_t bytes);

}  // namespace mt
