// What the kernel says about host memory, for the decisions that must not overcommit it:
// interleaved weight copies, the host KV cache, pinned expert banks (page-locked memory
// cannot be swapped out, so pinning past what is available ends in the OOM killer).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace mt {

// MemAvailable of /proc/meminfo in bytes; nullopt where it cannot be read.
std::optional<uint64_t> mem_available_bytes();
// The same from the text of a meminfo file (tests).
std::optional<uint64_t> mem_available_from(const std::string& meminfo_text);

}  // namespace mt
