// Byte sizes on the command line: "8640MiB", "15GiB", "0.75MiB", "24G" (= GiB), "512M",
// "786432" (bytes), "2KiB"; binary units throughout (K/M/G/T = KiB/MiB/GiB/TiB). An
// optional percentage form ("25%") is resolved against a whole by parse_size_or_percent.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace mt::cli {

// `what` names the flag in the error ("--expert-cache: '12XB' is not a size").
StatusOr<uint64_t> parse_size(const std::string& text, const std::string& what);
// "N%" of `whole` (rounded down), else parse_size.
StatusOr<uint64_t> parse_size_or_percent(const std::string& text, uint64_t whole, const std::string& what);

}  // namespace mt::cli
