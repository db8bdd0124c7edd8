#include "apps/cli/bench_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "apps/cli/sizes.h"
#include "core/log.h"

namespace mt::cli {
namespace {

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

// Sample standard deviation (n - 1), as llama-bench reports it; 0 for one sample.
double stddev(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean(v);
  double sq = 0;
  for (double x : v) sq += (x - m) * (x - m);
  return std::sqrt(sq / static_cast<double>(v.size() - 1));
}

// The mean of every sample but the first (the first alone when it is the only one).
double steady_of(const std::vector<double>& v) {
  if (v.empty()) return 0;
  return v.size() > 1 ? mean(std::vector<double>(v.begin() + 1, v.end())) : v.front();
}

double gb_per_s(const ModelFacts& m, const TestResult& r) {
  return static_cast<double>(m.active_bytes_per_token) * r.avg_ts / 1e9;
}

std::string fixed2(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

}  // namespace

void TestResult::summarize() {
  avg_ns = 0;
  for (uint64_t ns : samples_ns) avg_ns += static_cast<double>(ns) / static_cast<double>(samples_ns.size());
  avg_ts = mean(samples_ts);
  stddev_ts = stddev(samples_ts);
  cv = avg_ts > 0 ? stddev_ts / avg_ts : 0.0;
  first_ts = samples_ts.empty() ? 0 : samples_ts.front();
  steady_ts = steady_of(samples_ts);
}

std::vector<nlohmann::ordered_json> result_rows(const ModelFacts& m, const BenchFlags& f, int threads,
                                                const std::vector<TestResult>& results) {
  std::vector<nlohmann::ordered_json> out;
  for (const TestResult& r : results) {
    nlohmann::ordered_json j;
    j["model_filename"] = f.model;
    j["model_type"] = m.arch;
    j["model_bytes"] = m.model_bytes;
    j["model_n_params"] = m.n_params;
    j["active_bytes_per_token"] = m.active_bytes_per_token;
    j["n_threads"] = threads;
    j["device"] = f.device.device == "cuda" || f.device.ngl > 0 ? "cuda" : "cpu";
    j["routing"] = f.routing.empty() ? "router" : f.routing;
    j["test"] = r.name();
    j["n_prompt"] = r.n_prompt;
    j["n_gen"] = r.n_gen;
    if (r.n_batch > 0) {
      j["n_batch"] = r.n_batch;
      j["step_ms"] = r.step_ms();
    }
    j["avg_ns"] = static_cast<uint64_t>(r.avg_ns);
    j["avg_ts"] = r.avg_ts;
    j["stddev_ts"] = r.stddev_ts;
    j["samples_ns"] = r.samples_ns;
    j["samples_ts"] = r.samples_ts;
    j["first_ts"] = r.first_ts;
    j["steady_ts"] = r.steady_ts;
    j["cv"] = r.cv;
    if (!r.tiering_json.empty()) j["tiering"] = nlohmann::ordered_json::parse(r.tiering_json);
    if (r.roofline) j["roofline"] = nlohmann::ordered_json::parse(tier_roofline_json(*r.roofline, r.steady_ts));
    if (!r.spec_text.empty()) {
      j["draft"] = r.draft;
      j["draft_steps"] = r.spec.steps;
      j["draft_tokens"] = r.spec.drafted;
      j["draft_accepted"] = r.spec.accepted;
      j["acceptance"] = r.spec.acceptance();
      j["tokens_per_step"] = r.spec.tokens_per_step();
      j["undrafted_samples_ts"] = r.undrafted_ts;
      j["draft_backed_off_steps"] = r.spec.backed_off;
      j["draft_held_picks"] = r.spec.held;
      nlohmann::ordered_json by_rows = nlohmann::ordered_json::object();
      for (size_t rows = 1; rows < r.steps_by_rows.size(); ++rows) {
        const TestResult::StepTimes& t = r.steps_by_rows[rows];
        if (t.steps > 0) by_rows[std::to_string(rows)] = {{"steps", t.steps}, {"mean_ms", t.mean_ms()}};
      }
      j["steps_by_rows"] = by_rows;
    }
    if (r.n_gen > 0 && r.n_batch <= 1) {
      j["gb_per_s"] = gb_per_s(m, r);
      if (f.membw_gbps > 0) {
        j["membw_gb_per_s"] = f.membw_gbps;
        j["roofline_fraction"] = gb_per_s(m, r) / f.membw_gbps;
      }
    }
    out.push_back(std::move(j));
  }
  return out;
}

// CSV as llama-bench writes it: a header row, then one row per test of the scalar fields
// (the samples joined by spaces; tiering stays in the JSON forms); strings quoted, quotes doubled.
void print_csv(const std::vector<nlohmann::ordered_json>& rows) {
  static const char* const kColumns[] = {"model_filename", "model_type", "model_bytes", "model_n_params",
                                         "active_bytes_per_token", "n_threads", "device", "routing", "test", "n_prompt", "n_gen",
                                         "n_batch", "step_ms", "avg_ns", "avg_ts", "stddev_ts", "first_ts", "steady_ts", "cv",
                                         "gb_per_s", "samples_ns", "samples_ts"};
  std::string line;
  for (const char* c : kColumns) line += std::string(line.empty() ? "" : ",") + c;
  std::printf("%s\n", line.c_str());
  for (const nlohmann::ordered_json& r : rows) {
    line.clear();
    for (const char* c : kColumns) {
      std::string cell;
      if (r.contains(c) && r[c].is_string()) {
        for (char ch : r[c].get<std::string>()) cell += ch == '"' ? std::string("\"\"") : std::string(1, ch);
        cell = "\"" + cell + "\"";
      } else if (r.contains(c) && r[c].is_array()) {
        for (const auto& v : r[c]) cell += (cell.empty() ? "" : " ") + v.dump();
        cell = "\"" + cell + "\"";
      } else if (r.contains(c)) {
        cell = r[c].dump();
      }
      line += (c == kColumns[0] ? "" : ",") + cell;
    }
    std::printf("%s\n", line.c_str());
  }
}


void print_markdown(const ModelFacts& m, const BenchFlags& f, int threads, const std::vector<TestResult>& results) {
  const bool roof = f.membw_gbps > 0;
  std::printf("| model | size | params | active/token | threads | test | t/s | GB/s |%s\n", roof ? " roofline |" : "");
  std::printf("| ----- | ---: | -----: | -----------: | ------: | ---: | --: | ---: |%s\n", roof ? " -------: |" : "");
  for (const TestResult& r : results) {
    std::string gbs = "-", frac = "-";
    if (r.n_gen > 0 && r.n_batch <= 1) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.2f", gb_per_s(m, r));
      gbs = buf;
      std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * gb_per_s(m, r) / std::max(f.membw_gbps, 1e-12));
      frac = buf;
    }
    const double params = static_cast<double>(m.n_params);
    std::printf("| %s %s | %s | %.2f %s | %s | %d | %s | %.2f ± %.2f | %s |%s\n", m.name.c_str(), m.arch.c_str(),
                human_bytes(m.model_bytes).c_str(), params < 1e9 ? params / 1e6 : params / 1e9, params < 1e9 ? "M" : "B",
                human_bytes(m.active_bytes_per_token).c_str(), threads, r.name().c_str(), r.avg_ts, r.stddev_ts,
                gbs.c_str(), roof ? (" " + frac + " |").c_str() : "");
  }
  for (const TestResult& r : results) {
    if (r.samples_ts.size() < 2) continue;
    std::string each;
    for (double ts : r.samples_ts) each += (each.empty() ? "" : ", ") + fixed2(ts);
    std::printf("%s t/s, every repetition: %s; first %s, steady %s, cv %.1f%%", r.name().c_str(), each.c_str(),
                fixed2(r.first_ts).c_str(), fixed2(r.steady_ts).c_str(), 100.0 * r.cv);
    if (r.n_batch > 0) {
      std::string ms;
      for (uint64_t ns : r.samples_ns) ms += (ms.empty() ? "" : ", ") + fixed2(static_cast<double>(ns) / r.n_gen / 1e6);
      std::printf("; step ms: %s", ms.c_str());
    }
    std::printf("\n");
  }
  for (const TestResult& r : results) {
    if (!r.tiering_text.empty()) std::printf("%s tiering: %s\n", r.name().c_str(), r.tiering_text.c_str());
    if (r.roofline) std::printf("%s %s\n", r.name().c_str(), tier_roofline_text(*r.roofline, r.steady_ts).c_str());
    if (!r.spec_text.empty()) std::printf("%s %s (greedy from a %d-token prompt)\n", r.name().c_str(), r.spec_text.c_str(), kSpecPrompt);
    if (!r.undrafted_ts.empty()) {
      std::string each;
      for (double ts : r.undrafted_ts) each += (each.empty() ? "" : ", ") + fixed2(ts);
      const double steady = steady_of(r.undrafted_ts);
      std::printf("%s the same text without drafts (a run after each drafted one, same process) t/s: %s; steady %s; "
                  "drafted / undrafted %.2fx\n",
                  r.name().c_str(), each.c_str(), fixed2(steady).c_str(), steady > 0 ? r.steady_ts / steady : 0.0);
    }
    std::string by_rows;
    for (size_t rows = 1; rows < r.steps_by_rows.size(); ++rows) {
      const TestResult::StepTimes& t = r.steps_by_rows[rows];
      if (t.steps == 0) continue;
      by_rows += (by_rows.empty() ? "" : ", ") + std::to_string(rows) + " rows " + std::to_string(t.steps) + " x " +
                 fixed2(t.mean_ms()) + " ms";
    }
    if (!by_rows.empty()) std::printf("%s drafted steps by rows (timed repetitions; mean step): %s\n", r.name().c_str(), by_rows.c_str());
  }
}

}  // namespace mt::cli
