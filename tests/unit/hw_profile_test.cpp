// experts/hw_profile.h: the JSON round trip is exact, every kind of bad field is rejected
// with a message naming it (and no prefix of a valid file crashes the reader), the
// lookups match hand-computed figures, and the default profile says it is assumed.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <functional>

#include "experts/hw_profile.h"
#include "test_util.h"

namespace mt {
namespace {

using Json = nlohmann::json;

HwProfile sample() {
  HwProfile p;
  p.source = "measured";
  p.date = "2025-01-31T12:34:56Z";
  p.cpu = "Test CPU \"x\" @ 3.0GHz";
  p.threads = 8;
  p.host_read = {{1, 10}, {2, 18}, {4, 30}, {8, 28}};
  p.cpu_expert = {{QuantType::Q4_K, 40, 400}, {QuantType::Q8_0, 30, 300.25}, {QuantType::BF16, 0.1 + 0.2, 1e-3}};
  p.has_gpu = true;
  p.gpu.name = "Test GPU";
  p.gpu.device_gbps = 3350.5;
  p.gpu.h2d = {{1ull << 20, 10, 4}, {4ull << 20, 20, 8}, {16ull << 20, 24, 10}};
  return p;
}

TEST(HwProfile, JsonRoundTripExact) {
  for (bool gpu : {true, false}) {
    HwProfile p = sample();
    p.has_gpu = gpu;
    if (!gpu) p.gpu = {};
    const std::string text = hw_profile_to_json(p);
    auto q = hw_profile_from_json(text);
    ASSERT_TRUE(q.ok()) << q.status().to_string();
    EXPECT_EQ(hw_profile_to_json(*q), text);
    EXPECT_EQ(q->source, p.source);
    EXPECT_EQ(q->date, p.date);
    EXPECT_EQ(q->cpu, p.cpu);
    EXPECT_EQ(q->threads, p.threads);
    ASSERT_EQ(q->host_read.size(), p.host_read.size());
    for (size_t i = 0; i < p.host_read.size(); ++i) {
      EXPECT_EQ(q->host_read[i].threads, p.host_read[i].threads);
      EXPECT_EQ(q->host_read[i].gbps, p.host_read[i].gbps);
    }
    ASSERT_EQ(q->cpu_expert.size(), p.cpu_expert.size());
    for (size_t i = 0; i < p.cpu_expert.size(); ++i) {
      EXPECT_EQ(q->cpu_expert[i].type, p.cpu_expert[i].type);
      EXPECT_EQ(q->cpu_expert[i].decode_gbps, p.cpu_expert[i].decode_gbps);  // exact: 0.1 + 0.2 too
      EXPECT_EQ(q->cpu_expert[i].prefill_gflops, p.cpu_expert[i].prefill_gflops);
    }
    EXPECT_EQ(q->has_gpu, gpu);
    EXPECT_EQ(q->gpu.name, p.gpu.name);
    EXPECT_EQ(q->gpu.device_gbps, p.gpu.device_gbps);
    ASSERT_EQ(q->gpu.h2d.size(), p.gpu.h2d.size());
    for (size_t i = 0; i < p.gpu.h2d.size(); ++i) {
      EXPECT_EQ(q->gpu.h2d[i].bytes, p.gpu.h2d[i].bytes);
      EXPECT_EQ(q->gpu.h2d[i].pinned_gbps, p.gpu.h2d[i].pinned_gbps);
      EXPECT_EQ(q->gpu.h2d[i].pageable_gbps, p.gpu.h2d[i].pageable_gbps);
    }
  }
}

TEST(HwProfile, JsonSpellsTheHeaderFormat) {
  const Json j = Json::parse(hw_profile_to_json(sample()));
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["cpu_expert"][0]["type"], "q4_K");
  EXPECT_EQ(j["host_read_gbps"][2]["threads"], 4);
  EXPECT_EQ(j["gpu"]["h2d"][1]["bytes"], 4u << 20);
  HwProfile p = sample();
  p.has_gpu = false;
  EXPECT_TRUE(Json::parse(hw_profile_to_json(p))["gpu"].is_null());
}

struct BadCase {
  const char* expect;  // in the message
  std::function<void(Json&)> edit;
};

TEST(HwProfile, RejectsEachBadField) {
  const std::vector<BadCase> cases = {
      {"(top level): not an object", [](Json& j) { j = Json::array(); }},
      {"version: must be 1", [](Json& j) { j["version"] = 2; }},
      {"version: missing", [](Json& j) { j.erase("version"); }},
      {"source: missing", [](Json& j) { j.erase("source"); }},
      {"source: must be", [](Json& j) { j["source"] = "guessed"; }},
      {"date: not a string", [](Json& j) { j["date"] = 20250131; }},
      {"cpu: not a string", [](Json& j) { j["cpu"] = nullptr; }},
      {"threads: must be in 1..", [](Json& j) { j["threads"] = 0; }},
      {"threads: must be > 0", [](Json& j) { j["threads"] = -4; }},
      {"threads: not an integer", [](Json& j) { j["threads"] = 1.5; }},
      {"threads: must be in 1..", [](Json& j) { j["threads"] = 1ull << 40; }},
      {"host_read_gbps: not an array", [](Json& j) { j["host_read_gbps"] = 12.5; }},
      {"host_read_gbps: no points", [](Json& j) { j["host_read_gbps"] = Json::array(); }},
      {"host_read_gbps[1]: not an object", [](Json& j) { j["host_read_gbps"][1] = 3; }},
      {"host_read_gbps[2].threads: not ascending", [](Json& j) { j["host_read_gbps"][2]["threads"] = 2; }},
      {"host_read_gbps[0].gbps: must be > 0", [](Json& j) { j["host_read_gbps"][0]["gbps"] = -1; }},
      {"host_read_gbps[3].gbps: not a number", [](Json& j) { j["host_read_gbps"][3]["gbps"] = "fast"; }},
      {"host_read_gbps[0].threads: missing", [](Json& j) { j["host_read_gbps"][0].erase("threads"); }},
      {"cpu_expert: missing", [](Json& j) { j.erase("cpu_expert"); }},
      {"cpu_expert[0].type: unknown quant type 'q9_K'", [](Json& j) { j["cpu_expert"][0]["type"] = "q9_K"; }},
      {"cpu_expert[1].type: 'q4_k' listed twice", [](Json& j) { j["cpu_expert"][1]["type"] = "q4_k"; }},
      {"cpu_expert[0].type: not a string", [](Json& j) { j["cpu_expert"][0]["type"] = 12; }},
      {"cpu_expert[1].decode_gbps: must be > 0", [](Json& j) { j["cpu_expert"][1]["decode_gbps"] = 0; }},
      {"cpu_expert[2].prefill_gflops: missing", [](Json& j) { j["cpu_expert"][2].erase("prefill_gflops"); }},
      {"gpu: missing", [](Json& j) { j.erase("gpu"); }},
      {"gpu: neither null nor an object", [](Json& j) { j["gpu"] = "H200"; }},
      {"gpu.name: missing", [](Json& j) { j["gpu"].erase("name"); }},
      {"gpu.device_gbps: must be > 0", [](Json& j) { j["gpu"]["device_gbps"] = 0.0; }},
      {"gpu.h2d: not an array", [](Json& j) { j["gpu"]["h2d"] = Json::object(); }},
      {"gpu.h2d: no points", [](Json& j) { j["gpu"]["h2d"] = Json::array(); }},
      {"gpu.h2d[1].bytes: not ascending", [](Json& j) { j["gpu"]["h2d"][1]["bytes"] = 1u << 20; }},
      {"gpu.h2d[0].bytes: must be in 1..", [](Json& j) { j["gpu"]["h2d"][0]["bytes"] = 0; }},
      {"gpu.h2d[2].pinned_gbps: must be > 0", [](Json& j) { j["gpu"]["h2d"][2]["pinned_gbps"] = -24; }},
      {"gpu.h2d[0].pageable_gbps: not a number", [](Json& j) { j["gpu"]["h2d"][0]["pageable_gbps"] = true; }},
  };
  const Json good = Json::parse(hw_profile_to_json(sample()));
  for (const BadCase& c : cases) {
    Json j = good;
    c.edit(j);
    auto p = hw_profile_from_json(j.dump());
    ASSERT_FALSE(p.ok()) << c.expect;
    EXPECT_NE(p.status().message().find(c.expect), std::string::npos) << p.status().message();
    EXPECT_EQ(p.status().code(), StatusCode::kDataLoss);
  }
}

TEST(HwProfile, RejectsTextThatIsNotJson) {
  const std::string text = hw_profile_to_json(sample());
  auto p = hw_profile_from_json("{\"version\": 1,");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("not valid JSON"), std::string::npos) << p.status().message();
  // Every proper prefix is rejected with a status, none crashes.
  for (size_t n = 0; n < text.size(); ++n) {
    EXPECT_FALSE(hw_profile_from_json(text.substr(0, n)).ok()) << n;
  }
}

TEST(HwProfile, ReadsAFileAndNamesItInErrors) {
  const std::string path = test::temp_path("hw.json");
  std::ofstream(path) << hw_profile_to_json(sample());
  auto p = read_hw_profile(path);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->threads, 8u);
  const std::string bad = test::temp_path("bad-hw.json");
  std::ofstream(bad) << "{\"version\": 3}";
  auto q = read_hw_profile(bad);
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().message().rfind(bad + ": ", 0), 0u) << q.status().message();
  auto missing = read_hw_profile(test::temp_path("missing.json"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kIoError);
}

TEST(HwProfile, HostReadIsTheBestAtOrBelowTheThreads) {
  const HwProfile p = sample();  // 1: 10, 2: 18, 4: 30, 8: 28
  EXPECT_EQ(p.host_read_gbps(1), 10);
  EXPECT_EQ(p.host_read_gbps(3), 18);
  EXPECT_EQ(p.host_read_gbps(4), 30);
  EXPECT_EQ(p.host_read_gbps(8), 30);   // 8 threads read slower than 4: use 4
  EXPECT_EQ(p.host_read_gbps(64), 30);
  EXPECT_EQ(p.host_read_gbps(0), 10);   // below every point: the smallest
  EXPECT_EQ(HwProfile{}.host_read_gbps(4), 0);
}

TEST(HwProfile, CpuExpertFallsBackToTheSlowestType) {
  const HwProfile p = sample();  // q4_K 40 / 400, q8_0 30 / 300.25, bf16 0.3 / 0.001
  EXPECT_EQ(p.cpu_decode_gbps(QuantType::Q4_K), 40);
  EXPECT_EQ(p.cpu_prefill_gflops(QuantType::Q8_0), 300.25);
  EXPECT_EQ(p.cpu_decode_gbps(QuantType::Q6_K), 0.1 + 0.2);
  EXPECT_EQ(p.cpu_prefill_gflops(QuantType::Q6_K), 1e-3);
  HwProfile none = sample();
  none.cpu_expert.clear();  // host read at 8 threads (30) x 0.8; prefill 25 per thread
  EXPECT_DOUBLE_EQ(none.cpu_decode_gbps(QuantType::Q4_K), 24.0);
  EXPECT_DOUBLE_EQ(none.cpu_prefill_gflops(QuantType::Q4_K), 200.0);
}

TEST(HwProfile, HostToDeviceInterpolatesInLog2Bytes) {
  const HwProfile p = sample();  // 1 MiB: 10 / 4, 4 MiB: 20 / 8, 16 MiB: 24 / 10
  EXPECT_EQ(p.h2d_gbps(1024, true), 10);            // clamped below
  EXPECT_EQ(p.h2d_gbps(1ull << 20, false), 4);
  EXPECT_DOUBLE_EQ(p.h2d_gbps(2ull << 20, true), 15);   // log2 21: halfway from 20 to 22
  EXPECT_DOUBLE_EQ(p.h2d_gbps(8ull << 20, false), 9);   // halfway from 22 to 24
  EXPECT_NEAR(p.h2d_gbps(3ull << 20, true), 17.924812503605781, 1e-12);  // 10 + 10 * log2(3) / 2
  EXPECT_EQ(p.h2d_gbps(4ull << 20, true), 20);
  EXPECT_EQ(p.h2d_gbps(1ull << 40, true), 24);      // clamped above
  EXPECT_EQ(p.h2d_gbps(1ull << 40, false), 10);
  EXPECT_EQ(p.device_gbps(), 3350.5);
  HwProfile cpu_only = sample();
  cpu_only.has_gpu = false;
  EXPECT_EQ(cpu_only.h2d_gbps(4ull << 20, true), 0);
  EXPECT_EQ(cpu_only.device_gbps(), 0);
}

TEST(HwProfile, DefaultIsAssumedAndValid) {
  const HwProfile p = default_hw_profile();
  EXPECT_EQ(p.source, "assumed");
  EXPECT_EQ(p.threads, 16u);
  EXPECT_EQ(p.host_read_gbps(16), 60);
  EXPECT_DOUBLE_EQ(p.cpu_decode_gbps(QuantType::Q4_K), 48);
  EXPECT_TRUE(p.has_gpu);
  EXPECT_EQ(p.h2d_gbps(64ull << 20, true), 24);
  EXPECT_EQ(p.h2d_gbps(4ull << 20, false), 10);
  EXPECT_LT(p.h2d_gbps(256ull << 10, true), 24);
  EXPECT_EQ(p.device_gbps(), 3000);
  auto q = hw_profile_from_json(hw_profile_to_json(p));
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  EXPECT_EQ(q->source, "assumed");
}

}  // namespace
}  // namespace mt
