// runtime/hw_measure.h: a quick measurement is a valid profile (it survives the JSON
// reader), measured with the threads asked for, every figure positive.
#include <gtest/gtest.h>

#include "runtime/hw_measure.h"

namespace mt {
namespace {

TEST(HwProfileMeasure, QuickMeasurementIsAValidProfile) {
  MeasureOptions o = quick_measure_options();
  o.threads = 2;
  o.read_bytes = 8ull << 20;
  o.expert_bytes = 4ull << 20;
  o.types = {QuantType::Q4_K, QuantType::Q8_0};
  int notes = 0;
  o.note = [&](const std::string&) { ++notes; };
  auto p = measure_hw_profile(o);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->source, "measured");
  EXPECT_EQ(p->threads, 2u);
  ASSERT_EQ(p->host_read.size(), 2u);  // 1 and 2 threads
  EXPECT_EQ(p->host_read[0].threads, 1u);
  EXPECT_EQ(p->host_read[1].threads, 2u);
  ASSERT_EQ(p->cpu_expert.size(), 2u);
  EXPECT_EQ(p->cpu_expert[1].type, QuantType::Q8_0);
  for (const CpuExpertSpeed& s : p->cpu_expert) {
    EXPECT_GT(s.decode_gbps, 0);
    EXPECT_GT(s.prefill_gflops, 0);
  }
  EXPECT_FALSE(p->has_gpu);
  EXPECT_EQ(notes, 4);
  EXPECT_TRUE(hw_profile_from_json(hw_profile_to_json(*p)).ok());
}

TEST(HwProfileMeasure, GpuMeasurerFillsTheGpuHalf) {
  MeasureOptions o = quick_measure_options();
  o.threads = 1;
  o.read_bytes = 1ull << 20;
  o.types = {};
  o.measure_gpu = [] {
    GpuProfile g;
    g.name = "fake";
    g.device_gbps = 1000;
    g.h2d = {{1 << 20, 10, 5}};
    return StatusOr<GpuProfile>(g);
  };
  auto p = measure_hw_profile(o);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_TRUE(p->has_gpu);
  EXPECT_EQ(p->gpu.name, "fake");
  o.measure_gpu = [] { return StatusOr<GpuProfile>(unimplemented("no device")); };
  EXPECT_FALSE(measure_hw_profile(o).ok());
  o.reps = 0;
  EXPECT_FALSE(measure_hw_profile(o).ok());
}

}  // namespace
}  // namespace mt
