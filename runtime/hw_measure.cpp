#include "runtime/hw_measure.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <memory>
#include <thread>

#include "core/malloc_ptr.h"
#include "cpu/kernels.h"

namespace mt {
namespace {

// Sum of a slice of 64-bit words: four independent accumulators over a plain loop that
// the compiler vectorizes; cloned per ISA and picked at load time (bench/membw.cpp's).
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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Words [begin, end) of chunk c of n_chunks over n_words.
std::pair<size_t, size_t> chunk(size_t n_words, int64_t c, int64_t n_chunks) {
  const auto n = static_cast<unsigned __int128>(n_words);
  return {static_cast<size_t>(n * c / n_chunks), static_cast<size_t>(n * (c + 1) / n_chunks)};
}

// GB/s of summing n_words words at buf (buf[i] = i) with pool's threads: one warm-up
// pass, then the median of `reps`. The sum is checked, so no pass can be optimized away.
double host_read_gbps(const uint64_t* buf, size_t n_words, int reps, ThreadPool& pool) {
  const int64_t n_chunks = 4 * static_cast<int64_t>(pool.size());  // claimed: a slow thread takes fewer
  std::vector<uint64_t> sums(static_cast<size_t>(n_chunks));
  const uint64_t n = n_words;
  const uint64_t expect = n % 2 == 0 ? n / 2 * (n - 1) : n * ((n - 1) / 2);  // sum of 0..n-1 mod 2^64
  std::vector<double> gbps;
  for (int r = -1; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(
        n_chunks,
        [&](int64_t c0, int64_t c1) {
          for (int64_t c = c0; c < c1; ++c) {
            const auto [b, e] = chunk(n_words, c, n_chunks);
            sums[static_cast<size_t>(c)] = sum_words(buf + b, e - b);
          }
        },
        1);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    uint64_t total = 0;
    for (uint64_t x : sums) total += x;
    MT_CHECK(total == expect);
    if (r >= 0) gbps.push_back(static_cast<double>(n_words * sizeof(uint64_t)) / s / 1e9);
  }
  return median(gbps);
}

// 1, 2, 4, ... below max_threads, then max_threads.
std::vector<int> thread_points(int max_threads) {
  std::vector<int> points;
  for (int n = 1; n < max_threads; n *= 2) points.push_back(n);
  points.push_back(max_threads);
  return points;
}

StatusOr<std::vector<HostReadPoint>> measure_host_read(const MeasureOptions& o, int max_threads) {
  const uint64_t bytes = (std::max<uint64_t>(o.read_bytes, 1) + 4095) / 4096 * 4096;
  MallocPtr<uint64_t> buf(static_cast<uint64_t*>(std::aligned_alloc(4096, bytes)));
  if (!buf) return out_of_range("cannot allocate " + std::to_string(bytes >> 20) + " MiB to measure memory bandwidth");
  const size_t n_words = bytes / sizeof(uint64_t);
  {
    ThreadPool pool(max_threads);  // first touch by every thread, pages spread as the reads will be
    pool.parallel_for(static_cast<int64_t>(n_words / 512), [&](int64_t p0, int64_t p1) {
      for (size_t i = static_cast<size_t>(p0) * 512; i < static_cast<size_t>(p1) * 512; ++i) buf.get()[i] = i;
    });
  }
  std::vector<HostReadPoint> points;
  for (int n : thread_points(max_threads)) {
    if (o.note) o.note("host memory read, " + std::to_string(n) + " thread" + (n > 1 ? "s" : ""));
    ThreadPool pool(n);
    points.push_back({static_cast<uint32_t>(n), host_read_gbps(buf.get(), n_words, o.reps, pool)});
  }
  return points;
}

// "model name" of /proc/cpuinfo's first processor; "unknown" without one.
std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    const size_t first = line.find_first_not_of(" \t", colon + 1);
    return first == std::string::npos ? "unknown" : line.substr(first);
  }
  return "unknown";
}

// "2025-01-31T12:34:56Z"
std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

}  // namespace

uint64_t last_level_cache_bytes() {
  uint64_t best = 0;
  for (int idx = 0; idx < 8; ++idx) {
    std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(idx) + "/size");
    std::string s;
    if (!(in >> s) || s.empty()) continue;
    uint64_t v = std::strtoull(s.c_str(), nullptr, 10);
    if (s.back() == 'K') v <<= 10;
    if (s.back() == 'M') v <<= 20;
    best = std::max(best, v);
  }
  return best;
}

MeasureOptions quick_measure_options() {
  MeasureOptions o;
  o.read_bytes = 32ull << 20;
  o.expert_bytes = 16ull << 20;
  o.prefill_experts = 1;
  o.reps = 2;
  return o;
}

StatusOr<HwProfile> measure_hw_profile(const MeasureOptions& options) {
  if (options.reps < 1) return invalid_argument("reps must be >= 1");
  if (options.threads < 0 || options.threads > kMaxThreads) {
    return invalid_argument("threads must be in 0.." + std::to_string(kMaxThreads));
  }
  MeasureOptions o = options;
  const int max_threads =
      o.threads > 0 ? o.threads : std::min(kMaxThreads, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  const uint64_t llc4 = 4 * last_level_cache_bytes();
  if (o.read_bytes == 0) o.read_bytes = std::max<uint64_t>(512ull << 20, llc4);
  if (o.expert_bytes == 0) o.expert_bytes = std::max<uint64_t>(256ull << 20, llc4);

  HwProfile p;
  p.source = "measured";
  p.date = utc_now();
  p.cpu = cpu_model_name();
  p.threads = static_cast<uint32_t>(max_threads);
  MT_ASSIGN_OR_RETURN(p.host_read, measure_host_read(o, max_threads));
  ThreadPool pool(max_threads);
  const cpu::KernelTable& k = cpu::kernels();
  for (QuantType type : o.types) {
    if (k.vec_dot[static_cast<uint32_t>(type)] == nullptr) continue;  // no CPU kernel: never run on the CPU
    if (o.note) o.note(std::string("cpu experts, ") + type_name(type));
    MT_ASSIGN_OR_RETURN(CpuExpertSpeed s, measure_cpu_expert(type, o, pool));
    p.cpu_expert.push_back(s);
  }
  if (o.measure_gpu) {
    if (o.note) o.note("gpu");
    MT_ASSIGN_OR_RETURN(p.gpu, o.measure_gpu());
    p.has_gpu = true;
  }
  return p;
}

}  // namespace mt
