// Helpers shared by the unit tests: temporary files and test data paths.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace mt::test {

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
