#include "core/meminfo.h"

#include <fstream>
#include <sstream>

namespace mt {

std::optional<uint64_t> mem_available_from(const std::string& meminfo_text) {
  std::istringstream in(meminfo_text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key, unit;
    uint64_t kib = 0;
    if (!(fields >> key >> kib)) continue;
    if (key == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

std::optional<uint64_t> mem_available_bytes() {
  std::ifstream in("/proc/meminfo");
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return mem_available_from(text.str());
}

}  // namespace mt
