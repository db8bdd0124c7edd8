#include "core/log.h"

#include <unistd.h>

#include <cstdio>

namespace mt {
namespace {
LogLevel g_level = LogLevel::kInfo;
}

void set_log_level(LogLevel level) { g_level = level; }
LogLevel log_level() { return g_level; }

void log(LogLevel level, const std::string& message) {
  if (level < g_level) return;
  static const char* const kNames[] = {"debug", "info", "warning", "error"};
  std::fprintf(stderr, "moetier %s: %s\n", kNames[static_cast<int>(level)], message.c_str());
}

Progress::Progress(std::string label, uint64_t total, bool enabled, const char* unit)
    : label_(std::move(label)),
      total_(total),
      enabled_(enabled && g_level <= LogLevel::kInfo && isatty(STDERR_FILENO) != 0),
      unit_(unit) {}

void Progress::update(uint64_t done) {
  if (!enabled_ || total_ == 0) return;
  int percent = static_cast<int>(done * 100 / total_);
  if (percent == last_percent_) return;
  last_percent_ = percent;
  if (unit_ != nullptr) {
    std::fprintf(stderr, "\r%s %3d%% (%llu / %llu %s)", label_.c_str(), percent, static_cast<unsigned long long>(done),
                 static_cast<unsigned long long>(total_), unit_);
  } else {
    std::fprintf(stderr, "\r%s %3d%% (%s / %s)", label_.c_str(), percent, human_bytes(done).c_str(),
                 human_bytes(total_).c_str());
  }
  std::fflush(stderr);
}

void Progress::finish() {
  if (!enabled_ || last_percent_ < 0) return;
  update(total_);
  std::fprintf(stderr, "\n");
}

std::string human_bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024.0 && unit < 4) {
    v /= 1024.0;
    ++unit;
  }
  char buf[64];
  if (unit == 0) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[unit]);
  return buf;
}

}  // namespace mt
