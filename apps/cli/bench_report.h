// What `moetier bench` measured and how it is written out: the flags a run was given, the
// model's facts, one TestResult per test (every repetition kept, the first apart from the
// steady state), and the forms llama-bench prints (markdown table, CSV, JSON / JSONL rows)
// plus moetier's own lines (every repetition, tiering, roofline, speculative counts).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "apps/cli/engine.h"
#include "apps/cli/spec_flags.h"
#include "apps/cli/tiering_flags.h"
#include "experts/stats.h"
#include "runtime/speculative.h"

namespace mt::cli {

struct BenchFlags {
  std::string model, output = "md";
  std::vector<int> n_prompt{512}, n_gen{128};  // llama-bench's lists: -p 512,4096 runs pp512 and pp4096
  int threads = 0, reps = 5;
  bool no_interleave = false;
  double membw_gbps = 0;  // 0: no roofline column (on CUDA: the device bandwidth)
  DeviceFlags device;
  TieringFlags tiering;    // --expert-cache ...: experts through the GPU cache or the simulated device
  BankFlags banks;
  std::string routing;     // --routing synth:...|trace:FILE
  std::vector<int> batch;  // --batch 1,2,4,8: batched decode tests instead of pp / tg
  SpecFlags spec;          // a drafter: tg tests decode greedily from a prompt with it
};

// tg with a drafter: the prompt each repetition decodes from (untimed prefill).
constexpr int kSpecPrompt = 32;

struct ModelFacts {
  std::string name;             // file name
  std::string arch;
  uint64_t model_bytes = 0;     // file size
  uint64_t n_params = 0;
  uint64_t active_bytes_per_token = 0;
};

struct TestResult {
  int n_prompt = 0, n_gen = 0;
  int n_batch = 0;  // > 0: a --batch test (n_prompt: each sequence's untimed prefill)
  std::vector<uint64_t> samples_ns;
  std::vector<double> samples_ts;
  double avg_ts = 0, stddev_ts = 0, avg_ns = 0;
  // The first timed repetition apart (a cold cache, pinning, page faults show there), the
  // rest as the steady state, and the spread: stddev / mean of every repetition.
  double first_ts = 0, steady_ts = 0, cv = 0;
  std::string tiering_json;  // with --expert-cache: experts/stats.h's JSON of this test
  std::string tiering_text;  // its overall line
  std::optional<TierRoofline> roofline;  // tiered tg: experts/stats.h's host memory + link roofline
  std::string spec_text;     // with a drafter: spec_summary over the timed repetitions
  std::string draft;         // the drafter's describe()
  SpecStats spec;
  // With a drafter: the same greedy text decoded without drafts, a repetition after each
  // drafted one in the same process (the same prompt, text, routing and cache warmth):
  // the baseline a drafted figure is compared with.
  std::vector<double> undrafted_ts;
  // With a drafter: the timed repetitions' steps by rows evaluated (index: the pending
  // token plus the guesses), their count and summed seconds: what a longer draft costs.
  struct StepTimes {
    uint64_t steps = 0;
    double seconds = 0;
    double mean_ms() const { return steps > 0 ? 1e3 * seconds / static_cast<double>(steps) : 0.0; }
  };
  std::vector<StepTimes> steps_by_rows;
  std::string name() const {
    if (n_batch > 0) {
      return "tg" + std::to_string(n_gen) + " x" + std::to_string(n_batch) +
             (n_prompt > 0 ? " @ pp" + std::to_string(n_prompt) : "");
    }
    return n_prompt > 0 ? "pp" + std::to_string(n_prompt) : "tg" + std::to_string(n_gen);
  }
  double step_ms() const { return n_gen > 0 ? avg_ns / n_gen / 1e6 : 0.0; }
  // avg_ns, avg_ts, stddev_ts, cv, first_ts and steady_ts from the samples.
  void summarize();
  int tokens() const { return n_batch > 0 ? n_batch * n_gen : n_prompt + n_gen; }  // timed tokens of a run
};

// One object per test: JSON's array elements, JSONL's lines and CSV's rows.
std::vector<nlohmann::ordered_json> result_rows(const ModelFacts& m, const BenchFlags& f, int threads,
                                                const std::vector<TestResult>& results);
// CSV as llama-bench writes it (the scalar fields of result_rows).
void print_csv(const std::vector<nlohmann::ordered_json>& rows);
// llama-bench's markdown table, then a line per test of every repetition and of its
// tiering, roofline and speculative figures.
void print_markdown(const ModelFacts& m, const BenchFlags& f, int threads, const std::vector<TestResult>& results);

}  // namespace mt::cli
