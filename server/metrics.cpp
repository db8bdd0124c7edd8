#include "server/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace mt {

void StepHistogram::observe(uint64_t value) {  // declared in server/scheduler.h
  size_t b = 0;
  while (b < bounds.size() && value > bounds[b]) ++b;
  ++counts[b];
  sum += value;
}

}  // namespace mt

namespace mt::server {

namespace {

// Whole numbers (counters, byte totals) exactly; others to 9 significant digits.
std::string number(double v) {
  char buf[48];
  if (v == std::floor(v) && std::fabs(v) < 9e15) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  } else {
    std::snprintf(buf, sizeof buf, "%.9g", v);
  }
  return buf;
}

void header(std::string* out, std::string_view name, std::string_view type, std::string_view help) {
  *out += "# HELP ";
  *out += name;
  *out += ' ';
  *out += help;
  *out += "\n# TYPE ";
  *out += name;
  *out += ' ';
  *out += type;
  *out += '\n';
}

void sample(std::string* out, std::string_view name, std::string_view labels, double value) {
  *out += name;
  if (!labels.empty()) {
    *out += '{';
    *out += labels;
    *out += '}';
  }
  *out += ' ';
  *out += number(value);
  *out += '\n';
}

void single(std::string* out, std::string_view name, std::string_view type, std::string_view help, double value) {
  header(out, name, type, help);
  sample(out, name, "", value);
}

// Label values escape backslash, double quote and newline.
std::string label_value(std::string_view v) {
  std::string s;
  for (char c : v) {
    if (c == '\\' || c == '"') s += '\\';
    s += c == '\n' ? 'n' : c;
  }
  return s;
}

// 1 ms .. 60 s for time to first token (a long prompt or a long queue), 1 ms .. 10 s per token.
const std::vector<double> kTtftBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                         0.5,   1,      2.5,   5,    10,    20,   30,  60};
const std::vector<double> kTokenBounds = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08,
                                          0.1,   0.15,   0.2,   0.3,  0.5,  1,    2.5,  10};

// A per-step count (scheduler.h StepHistogram) as a Prometheus histogram.
void write_steps(std::string* out, std::string_view name, std::string_view help, const StepHistogram& h) {
  header(out, name, "histogram", help);
  const std::string bucket = std::string(name) + "_bucket";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.counts.size(); ++i) {
    cumulative += h.counts[i];
    const std::string le = i < h.bounds.size() ? std::to_string(h.bounds[i]) : "+Inf";
    sample(out, bucket, "le=\"" + le + "\"", static_cast<double>(cumulative));
  }
  sample(out, std::string(name) + "_sum", "", static_cast<double>(h.sum));
  sample(out, std::string(name) + "_count", "", static_cast<double>(cumulative));
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::observe(double value) {
  if (!(value >= 0)) value = 0;
  size_t b = 0;
  while (b < bounds_.size() && value > bounds_[b]) ++b;
  counts_[b].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(std::llround(std::min(value, 1e9) * 1e9)), std::memory_order_relaxed);
}

void Histogram::write(std::string* out, std::string_view name, std::string_view help) const {
  header(out, name, "histogram", help);
  const std::string bucket = std::string(name) + "_bucket";
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i].load(std::memory_order_relaxed);
    const std::string le = i < bounds_.size() ? number(bounds_[i]) : "+Inf";
    sample(out, bucket, "le=\"" + le + "\"", static_cast<double>(cumulative));
  }
  sample(out, std::string(name) + "_sum", "", static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) * 1e-9);
  sample(out, std::string(name) + "_count", "", static_cast<double>(cumulative));
}

ServerMetrics::ServerMetrics(std::vector<ExpertGroupLabel> expert_groups)
    : expert_groups_(std::move(expert_groups)), ttft_(kTtftBounds), token_latency_(kTokenBounds) {}

void ServerMetrics::count_request(std::string_view endpoint, int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{std::string(endpoint), status}];
}

std::string ServerMetrics::render(const SchedulerMetrics& s) const {
  std::string out;
  header(&out, "moetier_http_requests_total", "counter", "HTTP requests answered, by endpoint and status code.");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [key, count] : requests_) {
      sample(&out, "moetier_http_requests_total",
             "endpoint=\"" + label_value(key.first) + "\",code=\"" + std::to_string(key.second) + "\"",
             static_cast<double>(count));
    }
  }
  header(&out, "moetier_generation_requests_total", "counter",
         "Generation requests by outcome: submitted, finished, cancelled (client gone) and failed.");
  sample(&out, "moetier_generation_requests_total", "outcome=\"submitted\"", static_cast<double>(s.requests_total));
  sample(&out, "moetier_generation_requests_total", "outcome=\"finished\"", static_cast<double>(s.requests_finished));
  sample(&out, "moetier_generation_requests_total", "outcome=\"cancelled\"", static_cast<double>(s.requests_cancelled));
  sample(&out, "moetier_generation_requests_total", "outcome=\"failed\"", static_cast<double>(s.requests_failed));
  single(&out, "moetier_prompt_tokens_total", "counter", "Prompt tokens processed.",
         static_cast<double>(s.prompt_tokens));
  single(&out, "moetier_completion_tokens_total", "counter", "Tokens generated.",
         static_cast<double>(s.completion_tokens));
  single(&out, "moetier_scheduler_steps_total", "counter", "Forward passes (decode steps and prefill chunks together).",
         static_cast<double>(s.steps));
  single(&out, "moetier_scheduler_eval_seconds_total", "counter",
         "Seconds of the steps spent in the backend's forward pass (logits on the host included).", s.eval_seconds);
  single(&out, "moetier_scheduler_host_seconds_total", "counter",
         "Seconds of the steps spent around the forward pass: building the batch, sampling, text, bookkeeping.",
         s.host_seconds);
  ttft_.write(&out, "moetier_time_to_first_token_seconds",
              "From the request's arrival to its first generated text (queueing and prefill included).");
  token_latency_.write(&out, "moetier_time_per_output_token_seconds",
                       "Time between consecutive pieces of generated text of one request.");
  single(&out, "moetier_requests_queued", "gauge", "Requests waiting for admission (KV budget or --max-running).",
         s.queued);
  single(&out, "moetier_requests_running", "gauge", "Requests being decoded together.", s.running);
  single(&out, "moetier_kv_cache_tokens_used", "gauge", "KV cache tokens held by running requests.",
         static_cast<double>(s.kv_tokens_used));
  single(&out, "moetier_kv_cache_tokens_budget", "gauge", "KV cache tokens all running requests may hold together.",
         static_cast<double>(s.kv_tokens_budget));
  single(&out, "moetier_kv_cache_usage_ratio", "gauge",
         "moetier_kv_cache_tokens_used / moetier_kv_cache_tokens_budget.",
         s.kv_tokens_budget ? static_cast<double>(s.kv_tokens_used) / static_cast<double>(s.kv_tokens_budget) : 0.0);
  single(&out, "moetier_kv_cache_tokens_filled", "gauge",
         "Positions written in the KV caches of running requests (after the last step).",
         static_cast<double>(s.kv_tokens_filled));
  single(&out, "moetier_kv_cache_sequences", "gauge",
         "Sequences holding a KV cache (a request with n choices holds n once its prompt is in).", s.kv_sequences);
  single(&out, "moetier_kv_cache_bytes_used", "gauge",
         "Bytes of KV cache (and recurrent state) reserved by running requests: the reserved tokens times the "
         "bytes per token of the KV type.",
         static_cast<double>(s.kv_bytes_used));
  single(&out, "moetier_speculative_draft_tokens_total", "counter",
         "Speculative guesses evaluated (serve --lookup or --mtp).", static_cast<double>(s.draft_tokens));
  single(&out, "moetier_speculative_accepted_tokens_total", "counter",
         "Speculative guesses kept: the sampling agreed with them (serve --lookup or --mtp).", static_cast<double>(s.draft_accepted));
  write_steps(&out, "moetier_batch_sequences_per_step", "Sequences evaluated together in one forward pass.",
              s.step_sequences);
  write_steps(&out, "moetier_batch_tokens_per_step",
              "Tokens evaluated in one forward pass (decode tokens and prefill chunks together).", s.step_tokens);
  single(&out, "moetier_prefill_pacer_decode_step_seconds", "gauge",
         "The chunked-prefill pacer's moving average of a step without prompt tokens (0: not measured yet).",
         s.pacer_decode_step_s);
  header(&out, "moetier_prefill_pacer_chunk_extra_seconds", "gauge",
         "What a prompt chunk of this many tokens adds to a step beside decoding requests, as the pacer measured it "
         "(moving average; 0: not measured yet).");
  for (const PrefillPacer::Bucket& b : s.pacer_chunks) {
    sample(&out, "moetier_prefill_pacer_chunk_extra_seconds", "tokens=\"" + std::to_string(b.tokens) + "\"", b.extra_s);
  }

  single(&out, "moetier_expert_split_cpu_bytes_per_second", "gauge",
         "The CPU's expert speed the split of misses uses now (0: no split).", s.expert_cpu_bytes_per_s);
  single(&out, "moetier_expert_split_cpu_fixed_seconds", "gauge",
         "The CPU's fixed cost per layer-step the split of misses uses now.", s.expert_cpu_fixed_s);
  single(&out, "moetier_expert_split_device_bytes_per_second", "gauge",
         "The device's speed for its share of the misses (copies and products), learned (0: not yet, or no split).",
         s.expert_dev_bytes_per_s);
  single(&out, "moetier_expert_split_device_fixed_seconds", "gauge",
         "The device's learned fixed time per layer-step (its hits' products).", s.expert_dev_fixed_s);
  single(&out, "moetier_expert_split_cpu_learned", "gauge",
         "1: those two are learned from the measured layer-steps (--split-learn); 0: the hardware profile's.",
         s.expert_cpu_learned ? 1.0 : 0.0);

  // Expert tiering, per geometry group: the sums over the group's layers of the scheduler's
  // snapshot (serve --expert-cache: the simulated device today); 0 without tiering.
  struct Counter {
    const char* name;
    const char* help;
    uint64_t ExpertLayerCounters::*field;
  };
  const Counter counters[] = {
      {"moetier_expert_cache_hits_total", "Expert lookups found in the expert cache.", &ExpertLayerCounters::hits},
      {"moetier_expert_cache_misses_total", "Expert lookups not in the expert cache.", &ExpertLayerCounters::misses},
      {"moetier_expert_cache_evictions_total", "Experts evicted from the expert cache.",
       &ExpertLayerCounters::evictions},
      {"moetier_expert_h2d_bytes_total", "Expert bytes copied host to device (admissions and staging).",
       &ExpertLayerCounters::h2d_bytes},
      {"moetier_expert_cpu_computed_total", "Experts computed on the CPU instead of the device.",
       &ExpertLayerCounters::cpu_experts},
  };
  for (const Counter& c : counters) {
    header(&out, c.name, "counter",
           std::string(c.help) + " Per geometry group; 0 unless serve runs with --expert-cache.");
    for (size_t g = 0; g < expert_groups_.size(); ++g) {
      uint64_t total = 0;
      for (uint32_t l : expert_groups_[g].layer_ids) {
        if (l < s.expert_layers.size()) total += s.expert_layers[l].*c.field;
      }
      sample(&out, c.name,
             "group=\"" + std::to_string(g) + "\",layers=\"" + label_value(expert_groups_[g].layers) + "\",types=\"" +
                 label_value(expert_groups_[g].types) + "\"",
             static_cast<double>(total));
    }
  }
  return out;
}

std::string layer_ranges(const std::vector<uint32_t>& layers) {
  std::string out;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(layers[i]);
    if (j > i) out += '-' + std::to_string(layers[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace mt::server
