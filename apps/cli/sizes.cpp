#include "apps/cli/sizes.h"

#include <cctype>
#include <charconv>
#include <cmath>

namespace mt::cli {

StatusOr<uint64_t> parse_size(const std::string& text, const std::string& what) {
  const auto bad = [&](const std::string& why) {
    return invalid_argument(what + ": '" + text + "' is not a size (" + why + "; e.g. 8640MiB, 15GiB, 786432)");
  };
  double value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr == text.data()) return bad("no number");
  if (!(value >= 0) || !std::isfinite(value)) return bad("negative or not finite");
  std::string unit(ptr, end);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "k" || unit == "kib" || unit == "kb") scale = 1024.0;
  else if (unit == "m" || unit == "mib" || unit == "mb") scale = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib" || unit == "gb") scale = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib" || unit == "tb") scale = 1024.0 * 1024 * 1024 * 1024;
  else return bad("unknown unit '" + std::string(ptr, end) + "'");
  const double bytes = std::floor(value * scale);
  if (bytes >= 1.8e19) return bad("too large");
  return static_cast<uint64_t>(bytes);
}

StatusOr<uint64_t> parse_size_or_percent(const std::string& text, uint64_t whole, const std::string& what) {
  if (!text.empty() && text.back() == '%') {
    double pct = 0;
    const std::string num = text.substr(0, text.size() - 1);
    auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), pct);
    if (ec != std::errc() || ptr != num.data() + num.size() || num.empty() || !(pct >= 0) || pct > 100) {
      return invalid_argument(what + ": '" + text + "' is not a percentage from 0% to 100%");
    }
    return static_cast<uint64_t>(std::floor(static_cast<double>(whole) * pct / 100.0));
  }
  return parse_size(text, what);
}

}  // namespace mt::cli
