// /metrics' expert tiering counters: per geometry group, the sums over the group's layers
// of the scheduler's per-layer snapshot (serve --expert-cache); zero without one. The
// batch size per step (sequences, tokens) as histograms and the KV cache in use.
#include <gtest/gtest.h>

#include <string>

#include "server/metrics.h"
#include "server/scheduler.h"

namespace mt::server {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

TEST(ServerMetrics, ExpertCountersAreTheSumsOverEachGroupsLayers) {
  ServerMetrics metrics({{"0-1", "q4_K/q4_K/q6_K", {0, 1}}, {"2", "bf16/bf16/bf16", {2}}});
  SchedulerMetrics s;
  s.expert_layers = {{3, 5, 1, 1000, 4}, {7, 11, 2, 12345678901, 6}, {13, 17, 0, 500, 9}};
  const std::string text = metrics.render(s);
  const std::string g0 = "{group=\"0\",layers=\"0-1\",types=\"q4_K/q4_K/q6_K\"}";
  const std::string g1 = "{group=\"1\",layers=\"2\",types=\"bf16/bf16/bf16\"}";
  EXPECT_TRUE(has_line(text, "moetier_expert_cache_hits_total" + g0 + " 10")) << text;
  EXPECT_TRUE(has_line(text, "moetier_expert_cache_misses_total" + g0 + " 16"));
  EXPECT_TRUE(has_line(text, "moetier_expert_cache_evictions_total" + g0 + " 3"));
  EXPECT_TRUE(has_line(text, "moetier_expert_h2d_bytes_total" + g0 + " 12345679901"));  // exact digits
  EXPECT_TRUE(has_line(text, "moetier_expert_cpu_computed_total" + g0 + " 10"));
  EXPECT_TRUE(has_line(text, "moetier_expert_cache_hits_total" + g1 + " 13"));
  EXPECT_TRUE(has_line(text, "moetier_expert_cpu_computed_total" + g1 + " 9"));
  EXPECT_TRUE(has_line(text, "moetier_expert_split_cpu_bytes_per_second 0")) << "no split";
  s.expert_cpu_bytes_per_s = 8.5e10;
  s.expert_cpu_fixed_s = 2.5e-5;
  s.expert_cpu_learned = true;
  s.expert_dev_bytes_per_s = 4.0e10;
  const std::string learned = metrics.render(s);
  EXPECT_TRUE(has_line(learned, "moetier_expert_split_cpu_bytes_per_second 85000000000")) << learned;
  EXPECT_TRUE(has_line(learned, "moetier_expert_split_cpu_fixed_seconds 2.5e-05"));
  EXPECT_TRUE(has_line(learned, "moetier_expert_split_cpu_learned 1"));
  EXPECT_TRUE(has_line(learned, "moetier_expert_split_device_bytes_per_second 40000000000"));
  EXPECT_TRUE(has_line(learned, "moetier_expert_split_device_fixed_seconds 0"));
  // Without tiering (no snapshot) every group reads 0.
  const std::string idle = metrics.render(SchedulerMetrics{});
  EXPECT_TRUE(has_line(idle, "moetier_expert_cache_hits_total" + g0 + " 0")) << idle;
  EXPECT_TRUE(has_line(idle, "moetier_expert_h2d_bytes_total" + g1 + " 0"));
}

// The batch size per step as two cumulative histograms, and the KV cache in use.
TEST(ServerMetrics, StepHistogramsAndKvInUse) {
  ServerMetrics metrics({});
  SchedulerMetrics s;
  for (uint64_t v : {1, 1, 3, 8, 200}) s.step_sequences.observe(v);
  for (uint64_t v : {1, 17, 256, 5000}) s.step_tokens.observe(v);
  s.kv_tokens_used = 640;
  s.kv_tokens_filled = 300;
  s.kv_sequences = 3;
  s.kv_bytes_used = 123456789012;
  const std::string text = metrics.render(s);
  EXPECT_TRUE(has_line(text, "# TYPE moetier_batch_sequences_per_step histogram")) << text;
  EXPECT_TRUE(has_line(text, "moetier_batch_sequences_per_step_bucket{le=\"1\"} 2"));
  EXPECT_TRUE(has_line(text, "moetier_batch_sequences_per_step_bucket{le=\"2\"} 2"));
  EXPECT_TRUE(has_line(text, "moetier_batch_sequences_per_step_bucket{le=\"4\"} 3"));
  EXPECT_TRUE(has_line(text, "moetier_batch_sequences_per_step_bucket{le=\"8\"} 4"));
  EXPECT_TRUE(has_line(text, "moetier_batch_sequences_per_step_bucket{le=\"128\"} 4"));
  EXPECT_TRUE(has_line(text, "moetier_batch_sequences_per_step_bucket{le=\"+Inf\"} 5"));
  EXPECT_TRUE(has_line(text, "moetier_batch_sequences_per_step_sum 213"));
  EXPECT_TRUE(has_line(text, "moetier_batch_sequences_per_step_count 5"));
  EXPECT_TRUE(has_line(text, "moetier_batch_tokens_per_step_bucket{le=\"16\"} 1"));
  EXPECT_TRUE(has_line(text, "moetier_batch_tokens_per_step_bucket{le=\"32\"} 2"));
  EXPECT_TRUE(has_line(text, "moetier_batch_tokens_per_step_bucket{le=\"256\"} 3"));
  EXPECT_TRUE(has_line(text, "moetier_batch_tokens_per_step_bucket{le=\"4096\"} 3"));
  EXPECT_TRUE(has_line(text, "moetier_batch_tokens_per_step_bucket{le=\"+Inf\"} 4"));
  EXPECT_TRUE(has_line(text, "moetier_batch_tokens_per_step_sum 5274"));
  EXPECT_TRUE(has_line(text, "moetier_kv_cache_tokens_used 640"));
  EXPECT_TRUE(has_line(text, "moetier_kv_cache_tokens_filled 300"));
  EXPECT_TRUE(has_line(text, "moetier_kv_cache_sequences 3"));
  EXPECT_TRUE(has_line(text, "moetier_kv_cache_bytes_used 123456789012"));
  const std::string idle = metrics.render(SchedulerMetrics{});
  EXPECT_TRUE(has_line(idle, "moetier_batch_tokens_per_step_count 0")) << idle;
  EXPECT_TRUE(has_line(idle, "moetier_kv_cache_bytes_used 0"));
  EXPECT_TRUE(has_line(idle, "moetier_prefill_pacer_decode_step_seconds 0")) << "not measured yet";
}

// The pacer's measurements: its plain decode step and each chunk size's extra time.
TEST(ServerMetrics, PrefillPacerMeasurements) {
  ServerMetrics metrics({});
  SchedulerMetrics s;
  PrefillPacer pacer({.max_chunk = 64, .min_chunk = 16, .ratio = 2.0});
  pacer.observe(4, 0, 0.010);
  pacer.observe(4, 16, 0.0125);
  s.pacer_decode_step_s = pacer.decode_step_s();
  pacer.buckets(&s.pacer_chunks);
  const std::string text = metrics.render(s);
  EXPECT_TRUE(has_line(text, "moetier_prefill_pacer_decode_step_seconds 0.01")) << text;
  EXPECT_TRUE(has_line(text, "# TYPE moetier_prefill_pacer_chunk_extra_seconds gauge"));
  EXPECT_TRUE(has_line(text, "moetier_prefill_pacer_chunk_extra_seconds{tokens=\"16\"} 0.0025"));
  EXPECT_TRUE(has_line(text, "moetier_prefill_pacer_chunk_extra_seconds{tokens=\"32\"} 0"));
  EXPECT_TRUE(has_line(text, "moetier_prefill_pacer_chunk_extra_seconds{tokens=\"64\"} 0"));
}

}  // namespace
}  // namespace mt::server
