// core/meminfo.h: MemAvailable read from a meminfo text (kB to bytes; other keys, odd
// lines and a missing key), and from this machine (a positive figure where /proc exists).
// experts/tiering.h pin_budget_cap: the pin budget capped at what the host can spare.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/meminfo.h"
#include "experts/tiering.h"

namespace mt {
namespace {

TEST(Meminfo, MemAvailableFromTheText) {
  const std::string text =
      "MemTotal:       131072000 kB\n"
      "MemFree:         2048000 kB\n"
      "garbage line\n"
      "MemAvailable:   98304000 kB\n"
      "Buffers:          100 kB\n";
  ASSERT_TRUE(mem_available_from(text).has_value());
  EXPECT_EQ(*mem_available_from(text), 98304000ull * 1024);
  EXPECT_FALSE(mem_available_from("MemTotal: 1 kB\nMemFree: 1 kB\n").has_value());
  EXPECT_FALSE(mem_available_from("").has_value());
  if (std::filesystem::exists("/proc/meminfo")) {
    ASSERT_TRUE(mem_available_bytes().has_value());
    EXPECT_GT(*mem_available_bytes(), 0u);
  }
}

TEST(PinBudgetCap, PinsNoMoreThanTheHostCanSpare) {
  constexpr uint64_t GiB = 1ull << 30;
  std::string why;
  // 100 GiB available: a reserve of 12.5 GiB, 87.5 GiB may be pinned.
  EXPECT_EQ(pin_budget_cap(~uint64_t{0}, 100 * GiB, &why), 100 * GiB - 100 * GiB / 8);
  EXPECT_NE(why.find("capped"), std::string::npos) << why;
  EXPECT_EQ(why.find("--pin-budget"), std::string::npos) << why;  // the default budget: no flag to blame
  why.clear();
  EXPECT_EQ(pin_budget_cap(50 * GiB, 100 * GiB, &why), 50 * GiB);  // fits: unchanged, no note
  EXPECT_TRUE(why.empty()) << why;
  EXPECT_EQ(pin_budget_cap(95 * GiB, 100 * GiB, &why), 100 * GiB - 100 * GiB / 8);
  EXPECT_NE(why.find("--pin-budget asked 95"), std::string::npos) << why;
  // A small host keeps at least 2 GiB; below the reserve nothing is pinned.
  EXPECT_EQ(pin_budget_cap(~uint64_t{0}, 10 * GiB, &why), 8 * GiB);
  EXPECT_EQ(pin_budget_cap(~uint64_t{0}, GiB, &why), 0u);
  // Unknown memory: the budget as asked.
  why.clear();
  EXPECT_EQ(pin_budget_cap(~uint64_t{0}, 0, &why), ~uint64_t{0});
  EXPECT_TRUE(why.empty());
}

}  // namespace
}  // namespace mt
