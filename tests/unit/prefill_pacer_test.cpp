// PrefillPacer (server/prefill_pacer.h): the prompt budget beside decoders settles on the
// largest chunk whose measured extra time keeps a step within `ratio` x a decode step, and
// on the cheapest chunk per token when a fixed cost puts every chunk over (MoE prefill).
#include "server/prefill_pacer.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <vector>

namespace mt {
namespace {

// Runs `steps` prompt steps beside decoders (each followed by a plain decode step of d
// seconds) with a chunk's extra time extra(n); returns how often each budget was given in
// the last half.
std::map<uint32_t, int> settle(PrefillPacer& p, double d, const std::function<double(uint32_t)>& extra, int steps) {
  std::map<uint32_t, int> seen;
  p.observe(8, 0, d);
  for (int s = 0; s < steps; ++s) {
    const uint32_t n = p.budget(8, 1);
    if (s >= steps / 2) ++seen[n];
    p.observe(8, n, d + extra(n));
    p.observe(8, 0, d);
  }
  return seen;
}

uint32_t most_given(const std::map<uint32_t, int>& seen) {
  uint32_t best = 0;
  int count = -1;
  for (const auto& [n, c] : seen) {
    if (c > count) best = n, count = c;
  }
  return best;
}

// The options of the settling tests below: 16..256 tokens, target 2x, a probe every 32.
PrefillPacer::Options two_x() { return {.max_chunk = 256, .min_chunk = 16, .ratio = 2.0, .alpha = 0.25, .reprobe = 32}; }

// Settled on `most`; the bucket above, `probed`, only tried now and then (at most
// `probes` times in the last half); `never` not given.
void expect_settled(const std::map<uint32_t, int>& seen, uint32_t most, uint32_t probed, int probes, uint32_t never) {
  EXPECT_EQ(most_given(seen), most);
  EXPECT_LE(seen.count(probed) ? seen.at(probed) : 0, probes);
  EXPECT_EQ(seen.count(never), 0u);
}

TEST(PrefillPacer, FullChunkWithoutDecodersAPlainStepFirstThenMinChunkUntilMeasured) {
  PrefillPacer p({.max_chunk = 256, .min_chunk = 16, .ratio = 2.0});
  EXPECT_EQ(p.budget(0, 1), 256u);
  EXPECT_EQ(p.budget(8, 1), 0u);  // d unknown: a plain decode step measures it
  p.observe(0, 64, 0.050);        // a prompt-only step tells nothing of the extra time
  EXPECT_EQ(p.budget(8, 1), 0u);
  p.observe(4, 0, 0.010);
  EXPECT_EQ(p.budget(8, 1), 16u);
  EXPECT_EQ(p.chunk_extra_s(16), 0);
  p.observe(4, 16, 0.012);  // 2 ms for 16 tokens: within 10 ms; 32 is tried next
  EXPECT_NEAR(p.chunk_extra_s(16), 0.002, 1e-9);
  EXPECT_EQ(p.budget(8, 1), 32u);
  EXPECT_EQ(p.budget(0, 1), 256u);
}

// A crowd arriving together (the first two prompts in, 30 waiting): every step would carry
// prompt tokens, so without a plain step d stays unknown and the crowd goes in 16 tokens
// a step. One plain step, then the chunks grow to what the ratio allows; after `reprobe`
// prompt steps in a row another plain step refreshes d.
TEST(PrefillPacer, PromptStepsInARowTakeAPlainStepToMeasureTheDecodeStep) {
  PrefillPacer p({.max_chunk = 256, .min_chunk = 16, .ratio = 2.0, .alpha = 0.5, .reprobe = 8});
  const auto step = [](uint32_t n) { return 0.005 + (n > 0 ? 0.004 + 0.00002 * n : 0.0); };
  std::vector<uint32_t> given;
  for (int s = 0; s < 20; ++s) {
    const uint32_t n = p.budget(2, 30);
    given.push_back(n);
    p.observe(2, n, step(n));
  }
  ASSERT_EQ(given[0], 0u);  // the plain step
  EXPECT_NEAR(p.decode_step_s(), 0.005, 1e-9);
  EXPECT_EQ(given[1], 16u);
  EXPECT_EQ(given[2], 32u);  // each unmeasured bucket up once
  EXPECT_EQ(given[5], 256u);
  int plain = 0;
  for (size_t s = 1; s < given.size(); ++s) plain += given[s] == 0;
  EXPECT_EQ(plain, 2);                 // after 8 and 16 prompt steps in a row
  EXPECT_EQ(given[9], 0u);
  EXPECT_EQ(given[19], 256u);          // 8x allowance: 40 ms, 256 tokens add 9.1 ms
}

// Linear with a small fixed part: 1 ms + 40 us per token beside a 5 ms decode step. Within
// (2 - 1) * 5 ms: 64 tokens (3.56 ms); 128 (6.12 ms) is over, tried again now and then.
TEST(PrefillPacer, SettlesOnTheLargestChunkWithinTheRatio) {
  PrefillPacer p({.max_chunk = 256, .min_chunk = 16, .ratio = 2.0, .alpha = 0.5, .reprobe = 16});
  const auto seen = settle(p, 0.005, [](uint32_t n) { return 0.001 + 0.00004 * n; }, 200);
  expect_settled(seen, 64, 128, 100 / 16 + 1, 256);
}

// MoE prefill beside a 14.5 ms decode step (the H100's 8 streams): any chunk reads most
// experts, 18 ms + 30 us per token. No chunk fits 2x (14.5 ms extra); the fallback (1.5x
// 16 tokens' 18.5 ms) is capped at 2.75 steps (25.4 ms extra): 128 tokens (21.8 ms), and
// 256 (25.7 ms) never probed, since 128 already fills the limit.
TEST(PrefillPacer, AFixedCostOverTheTargetTakesTheLargestChunkWithinTheStallCap) {
  PrefillPacer p(two_x());
  const auto seen = settle(p, 0.0145, [](uint32_t n) { return 0.018 + 0.00003 * n; }, 128);
  EXPECT_EQ(most_given(seen), 128u);
  EXPECT_EQ(seen.size(), 1u);
}

// The same fixed cost with twice the per-token part beside a 10.5 ms step: even 16 tokens
// (19 ms) are over the cap (18.4 ms): the smallest chunk, no probe of a bigger one.
TEST(PrefillPacer, AFixedCostOverTheCapKeepsTheSmallestChunkAndProbesNothing) {
  PrefillPacer p(two_x());
  const auto seen = settle(p, 0.0105, [](uint32_t n) { return 0.018 + 0.00006 * n; }, 128);
  EXPECT_EQ(most_given(seen), 16u);
  EXPECT_EQ(seen.size(), 1u);
}

// A CPU: 1.5 ms decode steps, 0.1 ms + 0.5 ms per prompt token. Every chunk is over 2x;
// 32 tokens (16.1 ms) are over 1.5x 16's 8.1 ms: 16 tokens, the smallest stall.
TEST(PrefillPacer, ALinearCostOverTheTargetKeepsSmallChunks) {
  PrefillPacer p(two_x());
  const auto seen = settle(p, 0.0015, [](uint32_t n) { return 0.0001 + 0.0005 * n; }, 128);
  expect_settled(seen, 16, 32, 64 / 32 + 1, 64);
  EXPECT_EQ(seen.count(256), 0u);
}

// 18 ms + 200 us per prompt token (16 tokens 21.2 ms, 64 tokens 30.8, 128 tokens 43.6)
// beside a 10.5 ms step: with one request waiting, 16 tokens (every chunk is over the
// 2.75-step cap); with 40 waiting beside 8 decoding the allowance is 5x (52.5 ms), so 128
// tokens go in at once.
TEST(PrefillPacer, ManyWaitingRequestsWidenTheAllowance) {
  PrefillPacer p(two_x());
  p.observe(8, 0, 0.0105);
  for (int s = 0; s < 40; ++s) {
    const uint32_t n = p.budget(8, 40);
    p.observe(8, n, 0.0105 + 0.018 + 0.0002 * n);
    p.observe(8, 0, 0.0105);
  }
  EXPECT_EQ(p.budget(8, 40), 128u);
  EXPECT_EQ(p.budget(8, 1), 16u);
  EXPECT_EQ(p.budget(1, 100), 256u);  // the scale is capped (8x) but 256 fits anyway
  EXPECT_EQ(p.budget(0, 5), 256u);    // nothing decodes: the whole chunk
}

TEST(PrefillPacer, NothingDecodingGivesTheIdleChunk) {
  PrefillPacer p({.max_chunk = 256, .idle_chunk = 2048, .min_chunk = 16, .ratio = 2.0});
  EXPECT_EQ(p.budget(0, 8), 2048u);
  EXPECT_EQ(p.budget(2, 6), 0u);  // beside decoders the paced budget (d unknown: a plain step)
  p.observe(2, 0, 0.010);
  EXPECT_EQ(p.budget(2, 6), 16u);
  PrefillPacer off({.max_chunk = 128, .idle_chunk = 1024, .min_chunk = 16, .ratio = 0});
  EXPECT_EQ(off.budget(0, 1), 1024u);
  EXPECT_EQ(off.budget(3, 1), 128u);
  PrefillPacer same({.max_chunk = 128, .min_chunk = 16, .ratio = 2.0});  // idle_chunk 0: max_chunk
  EXPECT_EQ(same.budget(0, 1), 128u);
}

TEST(PrefillPacer, BucketsAreTheChunkSizesWithTheirMeasuredExtraTime) {
  PrefillPacer p({.max_chunk = 100, .min_chunk = 16, .ratio = 2.0});
  p.observe(2, 0, 0.010);
  p.observe(2, 40, 0.013);  // the 32 bucket
  std::vector<PrefillPacer::Bucket> b;
  p.buckets(&b);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0].tokens, 16u);
  EXPECT_EQ(b[1].tokens, 32u);
  EXPECT_EQ(b[2].tokens, 64u);
  EXPECT_EQ(b[3].tokens, 100u);
  EXPECT_EQ(b[0].extra_s, 0);
  EXPECT_NEAR(b[1].extra_s, 0.003, 1e-12);
  EXPECT_EQ(b[3].extra_s, 0);
}

TEST(PrefillPacer, OffAndBadReadings) {
  PrefillPacer off({.max_chunk = 128, .min_chunk = 16, .ratio = 0});
  off.observe(2, 0, 0.010);
  off.observe(2, 128, 1.0);
  EXPECT_EQ(off.budget(8, 1), 128u);
  PrefillPacer p({.max_chunk = 100, .min_chunk = 16, .ratio = 3.0});  // buckets 16, 32, 64, 100
  p.observe(2, 0, 0.010);
  p.observe(2, 16, -1.0);  // a bad clock reading is ignored
  EXPECT_EQ(p.chunk_extra_s(16), 0);
  const auto seen = settle(p, 0.010, [](uint32_t n) { return 0.0001 * n; }, 40);  // all within 20 ms
  EXPECT_EQ(most_given(seen), 100u);
}

}  // namespace
}  // namespace mt
