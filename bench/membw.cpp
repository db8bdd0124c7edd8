// moetier_membw: host memory read bandwidth with T threads, the roofline that CPU decode
// is measured against (`moetier bench --membw GBPS`).
//
// A buffer several times larger than the last-level cache (default 1 GiB) is cut into T
// contiguous slices; each thread first-touches its own slice (so its pages are local),
// then every run all threads sum their slices at once, started and stopped together by a
// barrier. Bandwidth = buffer bytes / wall time of the run; the best of -r runs is
// reported (GB = 1e9 bytes, as llama.cpp and STREAM count).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/hw_measure.h"

namespace {

struct Flags {
  int threads = 0;          // 0: all hardware threads
  uint64_t size_mib = 1024;
  int runs = 5;
  std::string output = "text";
};

// Sum of a slice of 64-bit words: four independent accumulators over a plain loop that
// GCC and clang vectorize; cloned per ISA and picked at load time (one binary everywhere).
__attribute__((target_clones("avx512f", "avx2", "default"))) uint64_t sum_words(const uint64_t* p, size_t n) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += p[i];
    s1 += p[i + 1];
    s2 += p[i + 2];
    s3 += p[i + 3];
  }
  for (; i < n; ++i) s0 += p[i];
  return s0 + s1 + s2 + s3;
}

struct Words {
  void operator()(uint64_t* p) const { std::free(p); }
};

int run(const Flags& f) {
  const int threads = f.threads > 0 ? f.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (f.size_mib == 0 || f.runs < 1) {
    std::fprintf(stderr, "moetier_membw: --size-mib and -r must be >= 1\n");
    return 1;
  }
  const uint64_t bytes = f.size_mib << 20;
  const size_t n_words = bytes / sizeof(uint64_t);
  std::unique_ptr<uint64_t, Words> buf(static_cast<uint64_t*>(std::aligned_alloc(4096, bytes)));
  if (!buf) {
    std::fprintf(stderr, "moetier_membw: cannot allocate %llu MiB\n", static_cast<unsigned long long>(f.size_mib));
    return 1;
  }
  const uint64_t llc = mt::last_level_cache_bytes();
  if (llc > 0 && bytes < 4 * llc) {
    std::fprintf(stderr, "moetier_membw: warning: the buffer is less than 4x the last-level cache (%llu MiB)\n",
                 static_cast<unsigned long long>(llc >> 20));
  }

  // Slice t: words [t * n / T, (t + 1) * n / T).
  auto slice = [&](int t) { return std::pair{n_words * t / threads, n_words * (t + 1) / threads}; };
  std::barrier sync(threads + 1);
  std::vector<uint64_t> sums(static_cast<size_t>(threads), 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      auto [b, e] = slice(t);
      for (size_t i = b; i < e; ++i) buf.get()[i] = i;  // first touch: pages local to this thread
      sync.arrive_and_wait();
      for (int r = 0; r < f.runs; ++r) {
        sync.arrive_and_wait();  // start
        sums[static_cast<size_t>(t)] += sum_words(buf.get() + b, e - b);
        sync.arrive_and_wait();  // stop
      }
    });
  }
  sync.arrive_and_wait();  // buffer filled
  std::vector<double> gbps;
  for (int r = 0; r < f.runs; ++r) {
    sync.arrive_and_wait();
    const auto t0 = std::chrono::steady_clock::now();
    sync.arrive_and_wait();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    gbps.push_back(static_cast<double>(bytes) / s / 1e9);
  }
  for (std::thread& th : pool) th.join();
  uint64_t check = 0;
  for (uint64_t s : sums) check += s;
  // sum of 0..n-1, exact modulo 2^64 like the wrapping sums
  const uint64_t n = n_words;
  const uint64_t expect = static_cast<uint64_t>(f.runs) * (n % 2 == 0 ? n / 2 * (n - 1) : n * ((n - 1) / 2));
  if (check != expect) {
    std::fprintf(stderr, "moetier_membw: internal error: checksum mismatch\n");
    return 1;
  }

  const double best = *std::max_element(gbps.begin(), gbps.end());
  if (f.output == "json") {
    nlohmann::ordered_json j;
    j["threads"] = threads;
    j["buffer_bytes"] = bytes;
    j["llc_bytes"] = llc;
    j["runs"] = f.runs;
    j["best_gb_per_s"] = best;
    j["samples_gb_per_s"] = gbps;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("memory read bandwidth: %.2f GB/s (%d threads, %llu MiB buffer, best of %d)\n", best, threads,
                static_cast<unsigned long long>(f.size_mib), f.runs);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"moetier_membw: host memory read bandwidth with T threads"};
  Flags f;
  app.add_option("-t,--threads", f.threads, "threads (default: all)");
  app.add_option("--size-mib", f.size_mib, "buffer size in MiB (default 1024)");
  app.add_option("-r,--runs", f.runs, "runs; the best is reported (default 5)");
  app.add_option("-o,--output", f.output, "text (default) or json")->check(CLI::IsMember({"text", "json"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return run(f);
}
