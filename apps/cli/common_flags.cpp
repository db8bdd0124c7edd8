#include "apps/cli/common_flags.h"

#include <CLI/CLI.hpp>

#include <charconv>
#include <thread>

#include "apps/cli/model_sizes.h"
#include "core/log.h"
#include "core/meminfo.h"
#include "gguf/reader.h"

namespace mt::cli {

unsigned hardware_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

Status check_threads(int threads) {
  const unsigned hw = hardware_threads();
  if (threads < 0) return invalid_argument("-t " + std::to_string(threads) + ": must be >= 0 (0 = all " + std::to_string(hw) + " hardware threads)");
  const auto t = static_cast<unsigned>(threads);
  if (t > kMaxThreadsPerCore * hw) {
    return invalid_argument("-t " + std::to_string(threads) + ": this machine has " + std::to_string(hw) +
                            " hardware threads; more than " + std::to_string(kMaxThreadsPerCore * hw) +
                            " would only slow every step (give -t 0 for all of them)");
  }
  if (t > hw) {
    log_warn("-t " + std::to_string(threads) + " is more than the " + std::to_string(hw) +
             " hardware threads: the threads share cores and every step waits for the slowest (expect it slower than -t " +
             std::to_string(hw) + ")");
  }
  return {};
}

StatusOr<uint32_t> check_context(const gguf::GgufFile& file, const ContextCheck& c) {
  MT_ASSIGN_OR_RETURN(ModelSizes m, read_model_sizes(file));
  const uint32_t n_ctx = c.requested ? c.requested : c.fallback;
  const std::string flag = std::string(c.flag) + " " + std::to_string(n_ctx);
  if (n_ctx == 0) return invalid_argument(std::string(c.flag) + ": the model names no training context; give " + c.flag + " N");
  // The cache's elements per token, at the cache type's bytes per element.
  const TypeTraits& t = type_traits(c.kv_type);
  const unsigned __int128 elements = m.kv_bytes_per_token_f16 / 2;
  const unsigned __int128 kv = elements * n_ctx * t.block_bytes / t.block_elems + m.state_bytes_per_seq;
  const uint64_t avail = mem_available_bytes().value_or(0);  // 0: unknown
  if (c.host_kv && avail > 0 && kv > avail) {
    const uint64_t fits = avail / std::max<uint64_t>(1, m.kv_bytes_per_token_f16 / 2 * t.block_bytes / t.block_elems);
    const std::string size = kv >> 64 ? std::string("more than 16 EiB") : human_bytes(static_cast<uint64_t>(kv));
    return out_of_range(flag + ": the KV cache would take " + size + " (" + type_name(c.kv_type) + "), more than the " +
                              human_bytes(avail) + " of memory available (about " + std::to_string(fits) +
                              " tokens fit; the training context is " + std::to_string(m.context_length) + ")");
  }
  if (c.requested && m.context_length > 0 && c.requested > m.context_length) {
    log_warn(flag + " is above the model's training context (" + std::to_string(m.context_length) +
             "): positions past it were never trained and the output may degrade");
  }
  return n_ctx;
}

void add_seed_option(CLI::App& app, uint64_t* seed, const std::string& help) {
  app.add_option_function<std::string>(
         "-s,--seed",
         [seed](const std::string& v) {
           if (v == "-1") {
             *seed = 0;
             return;
           }
           uint64_t x = 0;
           auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
           if (ec != std::errc{} || end != v.data() + v.size()) {
             throw CLI::ValidationError("--seed", "'" + v + "' is not -1 (random) or a number 0..18446744073709551615");
           }
           *seed = x;
         },
         help)
      ->type_name("N")
      ->allow_extra_args(false);
}

}  // namespace mt::cli
