// The resource flags the model-running commands share, checked before anything is
// allocated so that a bad value is one line and exit 1, never an abort:
//   -t N      0 = every hardware thread; above the hardware threads a warning (the pool
//             oversubscribes the cores); above kMaxThreadsPerCore x them an error
//   -c N      0 = the command's default; above the training context a warning; a KV cache
//             (plus per-sequence state) larger than the host's available memory an error
//   -s/--seed N   -1 (llama.cpp's "random") or 0 = a random seed, else any uint64
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "quant/types.h"

namespace CLI {
class App;
}
namespace mt::gguf {
class GgufFile;
}

namespace mt::cli {

inline constexpr unsigned kMaxThreadsPerCore = 4;

// The machine's hardware threads (at least 1).
unsigned hardware_threads();

// -t: an error past kMaxThreadsPerCore x the hardware threads, a warning past them.
Status check_threads(int threads);

// -c: the context to use (requested, or fallback when 0) after the checks above. The KV
// cache's bytes are computed from the file's hyper-parameters; host_kv: the cache lives
// in host memory (the CPU backend), so its size is checked against available memory.
struct ContextCheck {
  uint32_t requested = 0;  // -c as given (0: fallback)
  uint32_t fallback = 0;
  QuantType kv_type = QuantType::F16;
  bool host_kv = true;
  const char* flag = "-c";
};
StatusOr<uint32_t> check_context(const gguf::GgufFile& file, const ContextCheck& c);

// -s,--seed on app, into *seed (0 = random): accepts -1 and 0 for random and any uint64.
void add_seed_option(CLI::App& app, uint64_t* seed, const std::string& help);

}  // namespace mt::cli
