// An experiment's environment switch: `name`=1 turns it on (or, default_on, anything but
// `name`=0 leaves it on), read at its first use; set() overrides it for the process (tests,
// A/B runs). One class for every MOETIER_CUDA_* switch the kernels' launchers read (EnvInt
// for the numeric ones).
#pragma once

#include <atomic>
#include <cstdlib>
#include <string>

namespace mt::cuda {

class EnvSwitch {
 public:
  explicit EnvSwitch(const char* name, bool default_on = false) : name_(name), default_on_(default_on) {}
  bool on() {
    if (on_.load(std::memory_order_relaxed) < 0) {
      const char* env = std::getenv(name_);
      const bool v = env == nullptr ? default_on_ : default_on_ ? std::string(env) != "0" : std::string(env) == "1";
      on_.store(v ? 1 : 0, std::memory_order_relaxed);
    }
    return on_.load(std::memory_order_relaxed) == 1;
  }
  void set(bool on) { on_.store(on ? 1 : 0, std::memory_order_relaxed); }

 private:
  const char* name_;
  bool default_on_;
  std::atomic<int> on_{-1};  // -1: not read from the environment yet
};

// A numeric switch: `name`=N (a non-negative integer) sets it, anything else leaves the
// default; read at its first use; set() overrides it for the process.
class EnvInt {
 public:
  EnvInt(const char* name, int default_value) : name_(name), default_(default_value) {}
  int value() {
    if (v_.load(std::memory_order_relaxed) < 0) {
      const char* env = std::getenv(name_);
      int v = default_;
      if (env != nullptr && *env != '\0') {
        char* end = nullptr;
        const long n = std::strtol(env, &end, 10);
        if (*end == '\0' && n >= 0 && n < (1L << 30)) v = static_cast<int>(n);
      }
      v_.store(v, std::memory_order_relaxed);
    }
    return v_.load(std::memory_order_relaxed);
  }
  void set(int v) { v_.store(v < 0 ? 0 : v, std::memory_order_relaxed); }

 private:
  const char* name_;
  int default_;
  std::atomic<int> v_{-1};  // -1: not read from the environment yet
};

}  // namespace mt::cuda
