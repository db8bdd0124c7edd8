// Helpers shared by the unit tests: temporary files and test data paths.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "quant/types.h"

namespace mt::test {

// The bytes of one row of n values of a type n fits.
inline size_t bytes_of(QuantType type, int64_t n) { return static_cast<size_t>(*row_bytes(type, static_cast<uint64_t>(n))); }

inline std::string testdata(const std::string& rel) { return std::string(MOETIER_TESTDATA_DIR) + "/" + rel; }

// A path in a per-process scratch folder, removed with the folder at exit.
inline std::string temp_path(const std::string& name) {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("moetier-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  static struct Cleanup {
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup;
  return (dir / name).string();
}

}  // namespace mt::test
