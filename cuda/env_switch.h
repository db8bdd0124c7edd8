// An experiment's environment switch: `name`=1 turns it on (or, default_on, anything but
// `name`=0 leaves it on), read at its first use; set() overrides it for the process (tests,
// A/B runs). One class for every MOETIER_CUDA_* switch the kernels' launchers read.
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

}  // namespace mt::cuda
