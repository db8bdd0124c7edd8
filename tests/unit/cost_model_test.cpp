// experts/cost_model.h: each mode's seconds per token equals the header's formula worked
// by hand, the bottleneck names the term that sets it, hybrid never loses to stream when
// the CPU reads faster than the link copies, and device_beats_cpu flips at the
// hand-computed batch size.
#include <gtest/gtest.h>

#include "experts/cost_model.h"

namespace mt {
namespace {

// cpu: Q4_K experts at 40 GB/s decode, 400 GFLOP/s prefill. gpu: 2000 GB/s; copies
// 1 MiB: 10 (pinned) / 5 (pageable) GB/s, 16 MiB: 25 / 10 GB/s.
HwProfile profile() {
  HwProfile p;
  p.threads = 16;
  p.host_read = {{16, 50}};
  p.cpu_expert = {{QuantType::Q4_K, 40, 400}};
  p.has_gpu = true;
  p.gpu.device_gbps = 2000;
  p.gpu.h2d = {{1ull << 20, 10, 5}, {16ull << 20, 25, 10}};
  return p;
}

DecodeTraffic traffic() {
  DecodeTraffic t;
  t.dense_bytes = 0.5e9;
  t.shared_bytes = 0.1e9;
  t.expert_bytes = 1.4e9;
  t.hit_bytes = 1.0e9;
  t.copied_bytes = 0.4e9;
  t.cpu_expert_bytes = 0.4e9;
  t.n_moe_layers = 48;
  return t;
}

TEST(CostModel, ModeNames) {
  EXPECT_STREQ(moe_mode_name(MoeMode::kCpu), "cpu");
  EXPECT_STREQ(moe_mode_name(MoeMode::kStream), "stream");
  EXPECT_STREQ(moe_mode_name(MoeMode::kHybrid), "hybrid");
}

TEST(CostModel, CpuReadsEverythingAtTheExpertDecodeRate) {
  const ModePrediction p = predict_decode(MoeMode::kCpu, traffic(), profile());
  EXPECT_EQ(p.mode, MoeMode::kCpu);
  EXPECT_DOUBLE_EQ(p.seconds_per_token, 2.0e9 / 40e9);  // (0.5 + 0.1 + 1.4) GB at 40 GB/s
  EXPECT_DOUBLE_EQ(p.tokens_per_s, 20);
  EXPECT_EQ(p.bottleneck, "cpu memory bandwidth");
  HwProfile no_gpu = profile();
  no_gpu.has_gpu = false;
  EXPECT_DOUBLE_EQ(predict_decode(MoeMode::kCpu, traffic(), no_gpu).tokens_per_s, 20);
}

TEST(CostModel, StreamAddsDeviceReadsCopiesAndSync) {
  DecodeTraffic t = traffic();
  ModePrediction p = predict_decode(MoeMode::kStream, t, profile());
  // 1.6 GB / 2000 GB/s + 0.4 GB / 25 GB/s (large copies) + 48 x 20 us
  EXPECT_DOUBLE_EQ(p.seconds_per_token, 0.0008 + 0.016 + 0.00096);
  EXPECT_DOUBLE_EQ(p.tokens_per_s, 1 / 0.01776);
  EXPECT_EQ(p.bottleneck, "host-to-device copies");
  t.copy_bytes = 4 << 20;  // log2 22, halfway from 1 MiB to 16 MiB: 17.5 pinned, 7.5 pageable
  EXPECT_DOUBLE_EQ(predict_decode(MoeMode::kStream, t, profile()).seconds_per_token, 0.0008 + 0.4e9 / 17.5e9 + 0.00096);
  t.pinned = false;
  EXPECT_DOUBLE_EQ(predict_decode(MoeMode::kStream, t, profile()).seconds_per_token, 0.0008 + 0.4e9 / 7.5e9 + 0.00096);

  t = traffic();
  t.copied_bytes = 0;  // all hits: 0.8 ms of reads against 0.96 ms of per-layer syncs
  p = predict_decode(MoeMode::kStream, t, profile());
  EXPECT_DOUBLE_EQ(p.seconds_per_token, 0.0008 + 0.00096);
  EXPECT_EQ(p.bottleneck, "per-layer synchronisation");
  t.n_moe_layers = 24;
  EXPECT_EQ(predict_decode(MoeMode::kStream, t, profile()).bottleneck, "gpu memory bandwidth");
}

TEST(CostModel, HybridOverlapsGpuCpuAndCopies) {
  DecodeTraffic t = traffic();
  t.copied_bytes = 0.1e9;
  // max(1.6 GB / 2000, 0.4 GB / 40, 0.1 GB / 25) + 48 x 20 us
  ModePrediction p = predict_decode(MoeMode::kHybrid, t, profile());
  EXPECT_DOUBLE_EQ(p.seconds_per_token, 0.01 + 0.00096);
  EXPECT_EQ(p.bottleneck, "cpu memory bandwidth");
  t.copied_bytes = 0.5e9;  // 20 ms of admissions
  p = predict_decode(MoeMode::kHybrid, t, profile());
  EXPECT_DOUBLE_EQ(p.seconds_per_token, 0.02 + 0.00096);
  EXPECT_EQ(p.bottleneck, "host-to-device copies");
  t.copied_bytes = 0;
  t.cpu_expert_bytes = 0;
  t.hit_bytes = 3.4e9;  // 2 ms of device reads
  p = predict_decode(MoeMode::kHybrid, t, profile());
  EXPECT_DOUBLE_EQ(p.seconds_per_token, 0.002 + 0.00096);
  EXPECT_EQ(p.bottleneck, "gpu memory bandwidth");
  t.hit_bytes = 0.4e9;  // 0.5 ms of reads, 0.96 ms of syncs
  EXPECT_EQ(predict_decode(MoeMode::kHybrid, t, profile()).bottleneck, "per-layer synchronisation");
}

TEST(CostModel, TheSplitSharesTheMissesBetweenTheCpuAndTheLink) {
  DecodeTraffic t = traffic();
  t.copied_bytes = 0;
  t.split_misses = true;
  // 0.4 GB of misses over 40 (CPU) + 25 (link, large copies) GB/s; host reads 50 GB/s
  // (8 ms) set the time: max(0.8 ms of device reads, 6.15 ms shared, 8 ms of host reads).
  ModePrediction p = predict_decode(MoeMode::kHybrid, t, profile());
  EXPECT_DOUBLE_EQ(p.seconds_per_token, 0.4e9 / 50e9 + 0.00096);
  EXPECT_EQ(p.bottleneck, "host memory bandwidth");
  HwProfile fast_host = profile();
  fast_host.host_read = {{16, 200}};
  p = predict_decode(MoeMode::kHybrid, t, fast_host);
  EXPECT_DOUBLE_EQ(p.seconds_per_token, 0.4e9 / 65e9 + 0.00096);
  EXPECT_EQ(p.bottleneck, "cpu + host-to-device copies");
  t.split_misses = false;  // the CPU alone: 10 ms
  EXPECT_DOUBLE_EQ(predict_decode(MoeMode::kHybrid, t, fast_host).seconds_per_token, 0.01 + 0.00096);
}

TEST(CostModel, HybridNoSlowerThanStreamWhenTheCpuOutrunsTheLink) {
  // The same misses either computed on the CPU (hybrid, 40 GB/s) or copied (stream, 25).
  for (double miss = 0; miss <= 2e9; miss += 0.125e9) {
    DecodeTraffic t = traffic();
    t.hit_bytes = t.expert_bytes - miss;
    t.copied_bytes = miss;
    t.cpu_expert_bytes = 0;
    const double stream = predict_decode(MoeMode::kStream, t, profile()).seconds_per_token;
    t.copied_bytes = 0;
    t.cpu_expert_bytes = miss;
    const double hybrid = predict_decode(MoeMode::kHybrid, t, profile()).seconds_per_token;
    EXPECT_LE(hybrid, stream) << miss;
  }
}

TEST(CostModel, GpuModesNeedAGpu) {
  HwProfile p = profile();
  p.has_gpu = false;
  for (MoeMode m : {MoeMode::kStream, MoeMode::kHybrid}) {
    const ModePrediction r = predict_decode(m, traffic(), p);
    EXPECT_EQ(r.mode, m);
    EXPECT_EQ(r.tokens_per_s, 0);
    EXPECT_EQ(r.bottleneck, "no gpu");
  }
  EXPECT_FALSE(device_beats_cpu(4 << 20, 1000, 10'000'000, QuantType::Q4_K, true, p));
}

TEST(CostModel, DeviceBeatsCpuFlipsAtTheHandComputedBatch) {
  // 4 MiB expert, 10 MFLOP per token. Device: 4 MiB / 17.5 GB/s + 4 MiB / 2000 GB/s =
  // 241.77 us (pinned); 4 MiB / 7.5 GB/s + ... = 561.34 us (pageable). CPU: max(4 MiB /
  // 40 GB/s = 104.86 us, n x 10 MFLOP / 400 GFLOP/s = n x 25 us): the device wins from
  // n = 10 (pinned) and n = 23 (pageable).
  const uint64_t bytes = 4 << 20, flops = 10'000'000;
  const HwProfile p = profile();
  EXPECT_FALSE(device_beats_cpu(bytes, 1, flops, QuantType::Q4_K, true, p));
  EXPECT_FALSE(device_beats_cpu(bytes, 9, flops, QuantType::Q4_K, true, p));
  EXPECT_TRUE(device_beats_cpu(bytes, 10, flops, QuantType::Q4_K, true, p));
  EXPECT_FALSE(device_beats_cpu(bytes, 22, flops, QuantType::Q4_K, false, p));
  EXPECT_TRUE(device_beats_cpu(bytes, 23, flops, QuantType::Q4_K, false, p));
  EXPECT_TRUE(device_beats_cpu(bytes, 512, flops, QuantType::Q6_K, true, p));  // unmeasured type: q4_K's figures
}

}  // namespace
}  // namespace mt
