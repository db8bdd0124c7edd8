// experts/host_store.h: views point at the exact bytes of an in-memory "file" whose
// layers each have their own strides (one of them a merged gate_up tensor, one ungated);
// pinning under an allocator limit pins exactly the layers whose allocation succeeds,
// records the refused ones and keeps trying later layers, and the pinned copies hold the
// same bytes, expert-major; the staging ring hands out its buffers round robin; and
// choose_pinned_layers never exceeds its budget, leaves no pageable layer that would still
// fit, partitions the layers, and reproduces seed 001's Ornith figures (15 GiB: compact
// sizing pins 33 of 40 layers where the padded sizing pinned 30).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <thread>

#include "experts/host_store.h"
#include "gguf/reader.h"
#include "synth/synth.h"
#include "test_util.h"

namespace mt {
namespace {

struct FakeFile {
  std::vector<uint8_t> bytes;
  ExpertGeometry geometry;
};

ProjGeometry proj(uint64_t bytes_per_expert, uint64_t offset, QuantType type) {
  ProjGeometry p;
  p.present = true;
  p.type = type;
  p.bytes_per_expert = bytes_per_expert;
  p.offset_in_file = offset;
  return p;
}

// Three MoE layers at blocks 1, 2 and 5 with different strides: block 1 separate gate, up
// and down; block 2 a merged gate_up tensor; block 5 ungated. Every byte of the file is
// distinct enough (a hash of its offset) that a wrong view shows.
FakeFile fake_file(uint32_t n_expert) {
  FakeFile f;
  uint64_t offset = 64;
  auto take = [&](uint64_t bytes) {
    const uint64_t at = offset;
    offset += bytes * n_expert + 32;
    return at;
  };
  LayerExpertGeometry a;
  a.layer = 1;
  a.proj[0] = proj(144, take(144), QuantType::Q4_K);
  a.proj[1] = proj(144, take(144), QuantType::Q4_K);
  a.proj[2] = proj(210, take(210), QuantType::Q6_K);
  LayerExpertGeometry b;
  b.layer = 2;
  b.merged_gate_up = true;
  const uint64_t merged = take(2 * 512);
  b.proj[0] = proj(512, merged, QuantType::BF16);
  b.proj[1] = proj(512, merged, QuantType::BF16);
  b.proj[2] = proj(512, take(512), QuantType::BF16);
  LayerExpertGeometry c;
  c.layer = 5;
  c.proj[1] = proj(34, take(34), QuantType::Q8_0);
  c.proj[2] = proj(68, take(68), QuantType::Q8_0);
  for (LayerExpertGeometry* l : {&a, &b, &c}) {
    l->n_expert = n_expert;
    f.geometry.layers.push_back(*l);
    f.geometry.compact_bytes += l->bank_bytes();
  }
  f.geometry.n_expert = n_expert;
  f.bytes.resize(offset);
  for (uint64_t i = 0; i < offset; ++i) f.bytes[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  return f;
}

TEST(HostStore, ViewsPointAtTheExactBytesOfEachLayer) {
  const FakeFile f = fake_file(7);
  const uint8_t* base = f.bytes.data();
  const HostExpertStore s = HostExpertStore::from_mapping(f.geometry, base);
  const LayerExpertGeometry& a = f.geometry.layers[0];
  const LayerExpertGeometry& b = f.geometry.layers[1];
  const LayerExpertGeometry& c = f.geometry.layers[2];
  for (uint32_t e = 0; e < 7; ++e) {
    EXPECT_EQ(s.expert_proj(1, e, ExpertProj::kGate), base + a.gate().offset_in_file + e * 144);
    EXPECT_EQ(s.expert_proj(1, e, ExpertProj::kUp), base + a.up().offset_in_file + e * 144);
    EXPECT_EQ(s.expert_proj(1, e, ExpertProj::kDown), base + a.down().offset_in_file + e * 210);
    // Merged: expert e's (n_in, 2 n_ff) matrix holds its gate rows, then its up rows.
    EXPECT_EQ(s.expert_proj(2, e, ExpertProj::kGate), base + b.gate().offset_in_file + e * 1024);
    EXPECT_EQ(s.expert_proj(2, e, ExpertProj::kUp), base + b.gate().offset_in_file + e * 1024 + 512);
    EXPECT_EQ(s.expert_proj(2, e, ExpertProj::kDown), base + b.down().offset_in_file + e * 512);
    EXPECT_EQ(s.expert_proj(5, e, ExpertProj::kGate), nullptr);
    EXPECT_EQ(s.expert_proj(5, e, ExpertProj::kUp), base + c.up().offset_in_file + e * 34);
    EXPECT_EQ(s.expert_proj(5, e, ExpertProj::kDown), base + c.down().offset_in_file + e * 68);
  }
  EXPECT_TRUE(s.is_moe_layer(1) && s.is_moe_layer(2) && s.is_moe_layer(5));
  EXPECT_FALSE(s.is_moe_layer(0) || s.is_moe_layer(3) || s.is_moe_layer(6));
  EXPECT_FALSE(s.pinned(1) || s.pinned(2) || s.pinned(5));
  EXPECT_EQ(s.pinned_bytes(), 0u);
}

TEST(HostStore, ResolverViewsWithPaddedStrides) {
  // A padded bank (every expert at 1000 bytes) through the resolver constructor.
  const FakeFile f = fake_file(4);
  std::vector<uint8_t> padded(3 * 4 * 1000 * 8);
  const HostExpertStore s(f.geometry, [&](uint32_t layer, ExpertProj p) {
    return ProjSource{padded.data() + (layer * 3 + static_cast<uint32_t>(p)) * 4000, 1000};
  });
  for (uint32_t e = 0; e < 4; ++e) {
    EXPECT_EQ(s.expert_proj(5, e, ExpertProj::kDown), padded.data() + (5 * 3 + 2) * 4000 + e * 1000);
    EXPECT_EQ(s.expert_proj(1, e, ExpertProj::kGate), padded.data() + 3 * 4000 + e * 1000);
  }
}

// The copies run on several threads (experts split between them) while the banks are
// page-locked on a thread of their own: 1, 3 and 16 threads give the source's bytes in
// every expert's run, and the timing says how many threads copied.
// A background pin: readers on another thread see every expert's exact bytes the whole
// time (each layer its source view, then its complete pinned copy), and after
// wait_pinning every layer is pinned with the source's bytes; the allocator refusing one
// layer leaves it pageable and recorded, as pin() does.
TEST(HostStore, BackgroundPinSwitchesLayersWhileReadersSeeExactBytes) {
  const FakeFile f = fake_file(257);
  const HostExpertStore view = HostExpertStore::from_mapping(f.geometry, f.bytes.data());
  const std::vector<uint32_t> order = {1, 2, 5};
  const LayerExpertGeometry& merged = f.geometry.layers[1];
  // A limit that refuses block 2's bank (the largest) but lets 1 and 5 through.
  const uint64_t limit = f.geometry.layers[0].bank_bytes() + f.geometry.layers[2].bank_bytes();
  ASSERT_LT(limit, merged.bank_bytes() + f.geometry.layers[0].bank_bytes());
  SimulatedPinnedAllocator alloc(limit);
  HostExpertStore s = HostExpertStore::from_mapping(f.geometry, f.bytes.data());
  std::atomic<bool> stop{false};
  std::atomic<int64_t> mismatches{0}, reads{0}, pinned_reads{0};
  std::thread reader([&] {
    while (!stop.load()) {
      for (uint32_t layer : order) {
        for (uint32_t e = 0; e < 257; e += 5) {
          for (int p = 0; p < kExpertProjCount; ++p) {
            const auto proj = static_cast<ExpertProj>(p);
            const uint64_t n = s.proj_bytes(layer, proj);
            if (n == 0) continue;
            const bool was_pinned = s.pinned(layer);
            if (std::memcmp(s.expert_proj(layer, e, proj), view.expert_proj(layer, e, proj), n) != 0) ++mismatches;
            ++reads;
            pinned_reads += was_pinned;
          }
        }
      }
    }
  });
  s.pin_in_background(order, alloc, 2);
  s.wait_pinning();
  EXPECT_FALSE(s.pinning());
  stop = true;
  reader.join();
  EXPECT_EQ(mismatches.load(), 0) << "of " << reads.load() << " reads (" << pinned_reads.load() << " pinned)";
  EXPECT_GT(reads.load(), 0);
  EXPECT_TRUE(s.pinned(1) && s.pinned(5));
  EXPECT_FALSE(s.pinned(2));
  ASSERT_EQ(s.pin_failures().size(), 1u);
  EXPECT_EQ(s.pin_failures()[0].layer, 2u);
  EXPECT_EQ(s.pinned_bytes(), limit);
  EXPECT_EQ(s.pin_timing().copy_threads, 2);
  for (uint32_t e = 0; e < 257; ++e) {
    for (int p = 0; p < kExpertProjCount; ++p) {
      const auto proj = static_cast<ExpertProj>(p);
      const uint64_t n = s.proj_bytes(5, proj);
      if (n == 0) continue;
      ASSERT_EQ(std::memcmp(s.expert_proj(5, e, proj), view.expert_proj(5, e, proj), n), 0);
      EXPECT_NE(s.expert_proj(5, e, proj), view.expert_proj(5, e, proj));  // the pinned copy, not the view
    }
  }
  // A store destroyed while its background pin runs waits for it (no use after free).
  {
    SimulatedPinnedAllocator alloc2;
    HostExpertStore t = HostExpertStore::from_mapping(f.geometry, f.bytes.data());
    t.pin_in_background(order, alloc2, 1);
  }
}

// An allocator that locks after the fill (as CudaPinnedAllocator's register mode does):
// reserve() hands out ordinary memory, lock_filled() records what it saw and refuses the
// call numbered `refuse_at` (0-based); `hold_first` makes the first lock wait for `release`.
class TwoStepAllocator final : public HostAllocator {
 public:
  std::function<void(void* p, uint64_t bytes)> on_lock;  // called before the verdict
  int refuse_at = -1;
  bool hold_first = false;
  std::atomic<bool> release{false};
  std::atomic<int> locks{0}, reserves{0};
  std::atomic<int64_t> outstanding{0};

  void* allocate_pinned(uint64_t bytes, std::string* why) override { return reserve(bytes, why); }
  void* reserve(uint64_t bytes, std::string*) override {
    ++reserves;
    outstanding += static_cast<int64_t>(bytes);
    return ::operator new(bytes);
  }
  void free_pinned(void* p, uint64_t bytes) override {
    outstanding -= static_cast<int64_t>(bytes);
    ::operator delete(p);
  }
  Status lock_filled(void* p, uint64_t bytes) override {
    const int n = locks++;
    if (hold_first && n == 0) {
      while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (on_lock) on_lock(p, bytes);
    if (n == refuse_at) return io_error("lock refused by the test");
    return {};
  }
  const char* name() const override { return "two-step"; }
};

TEST(HostStore, LockAfterFillSeesTheWholeBankAndARefusedLockKeepsTheLayerPageable) {
  const FakeFile f = fake_file(23);
  const HostExpertStore view = HostExpertStore::from_mapping(f.geometry, f.bytes.data());
  const std::vector<uint32_t> order = {1, 2, 5};
  TwoStepAllocator alloc;
  alloc.refuse_at = 1;  // block 2's bank
  {
    HostExpertStore s = HostExpertStore::from_mapping(f.geometry, f.bytes.data());
    int checked = 0;
    alloc.on_lock = [&](void* p, uint64_t bytes) {
      // At its lock a bank holds every expert's bytes and is not yet published.
      const uint32_t layer = order[static_cast<size_t>(checked++)];
      EXPECT_FALSE(s.pinned(layer)) << "layer " << layer << " published before its lock";
      const LayerExpertGeometry& g = f.geometry.layers[static_cast<size_t>(checked - 1)];
      ASSERT_EQ(bytes, g.bank_bytes());
      const auto* bank = static_cast<const uint8_t*>(p);
      for (uint32_t e = 0; e < 23; ++e) {
        for (int q = 0; q < kExpertProjCount; ++q) {
          const uint64_t n = view.proj_bytes(layer, static_cast<ExpertProj>(q));
          if (n == 0) continue;
          EXPECT_EQ(std::memcmp(bank, view.expert_proj(layer, e, static_cast<ExpertProj>(q)), n), 0)
              << "layer " << layer << " expert " << e << " proj " << q << " not filled at its lock";
          bank += n;
        }
      }
    };
    EXPECT_EQ(s.pin(order, alloc, false, 3), 2u);
    EXPECT_EQ(checked, 3);
    EXPECT_TRUE(s.pinned(1) && s.pinned(5));
    EXPECT_FALSE(s.pinned(2));
    ASSERT_EQ(s.pin_failures().size(), 1u);
    EXPECT_EQ(s.pin_failures()[0].layer, 2u);
    EXPECT_NE(s.pin_failures()[0].reason.find("lock refused"), std::string::npos) << s.pin_failures()[0].reason;
    EXPECT_EQ(s.pinned_bytes(), f.geometry.layers[0].bank_bytes() + f.geometry.layers[2].bank_bytes());
    EXPECT_EQ(alloc.outstanding.load(), static_cast<int64_t>(s.pinned_bytes()));  // the refused bank freed
    for (uint32_t e = 0; e < 23; ++e) {
      EXPECT_EQ(std::memcmp(s.pinned_expert(5, e), view.expert_proj(5, e, ExpertProj::kUp),
                            view.proj_bytes(5, ExpertProj::kUp)),
                0);
    }
  }
  EXPECT_EQ(alloc.outstanding.load(), 0);
}

TEST(HostStore, DestroyingAStoreStopsItsBackgroundPinAtTheNextLayer) {
  const FakeFile f = fake_file(31);
  TwoStepAllocator alloc;
  alloc.hold_first = true;  // the first lock waits until the store is being destroyed
  auto s = std::make_unique<HostExpertStore>(HostExpertStore::from_mapping(f.geometry, f.bytes.data()));
  s->pin_in_background({1, 2, 5}, alloc, 2);
  while (alloc.locks.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::atomic<bool> destroying{false};
  std::thread destroyer([&] {
    destroying = true;
    s.reset();  // its first act: the request to stop
  });
  while (!destroying.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  alloc.release = true;
  destroyer.join();
  EXPECT_LE(alloc.locks.load(), 2) << "the pin went on to the last layer after the store was destroyed";
  EXPECT_EQ(alloc.outstanding.load(), 0) << "banks reserved ahead were not freed";
}

TEST(HostStore, PinOnSeveralThreadsCopiesEveryExpertExactly) {
  const FakeFile f = fake_file(37);  // 37 experts: uneven shares for 3 and 16 threads
  const HostExpertStore view = HostExpertStore::from_mapping(f.geometry, f.bytes.data());
  const std::vector<uint32_t> order = {5, 1, 2};
  for (int threads : {1, 3, 16}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    SimulatedPinnedAllocator alloc;
    HostExpertStore s = HostExpertStore::from_mapping(f.geometry, f.bytes.data());
    ASSERT_EQ(s.pin(order, alloc, false, threads), 3u);
    EXPECT_EQ(s.pin_timing().copy_threads, threads);
    EXPECT_GE(s.pin_timing().wall_s, s.pin_timing().copy_s);
    EXPECT_NE(pin_timing_text(s.pin_timing()).find(std::to_string(threads) + " threads"), std::string::npos);
    for (uint32_t layer : order) {
      for (uint32_t e = 0; e < 37; ++e) {
        const uint8_t* run = s.pinned_expert(layer, e);
        for (int p = 0; p < kExpertProjCount; ++p) {
          const auto proj = static_cast<ExpertProj>(p);
          const uint64_t n = s.proj_bytes(layer, proj);
          if (n == 0) continue;
          ASSERT_EQ(std::memcmp(run, view.expert_proj(layer, e, proj), n), 0)
              << "layer " << layer << " expert " << e << " proj " << p;
          run += n;
        }
      }
    }
  }
}

TEST(HostStore, PinUnderALimitPinsWhatFitsAndRecordsTheRest) {
  const FakeFile f = fake_file(9);
  HostExpertStore s = HostExpertStore::from_mapping(f.geometry, f.bytes.data());
  const uint64_t bank1 = f.geometry.layers[0].bank_bytes();  // 9 x 498
  const uint64_t bank2 = f.geometry.layers[1].bank_bytes();  // 9 x 1536, refused
  const uint64_t bank5 = f.geometry.layers[2].bank_bytes();  // 9 x 102, still tried and pinned
  ASSERT_GT(bank2, bank5);
  SimulatedPinnedAllocator alloc(bank1 + bank5 + 100);
  const std::vector<uint32_t> order = {1, 2, 5};
  EXPECT_EQ(s.pin(order, alloc), 2u);
  EXPECT_TRUE(s.pinned(1));
  EXPECT_FALSE(s.pinned(2));
  EXPECT_TRUE(s.pinned(5));
  EXPECT_EQ(s.pinned_bytes(), bank1 + bank5);
  EXPECT_EQ(alloc.allocated_bytes(), bank1 + bank5);
  ASSERT_EQ(s.pin_failures().size(), 1u);
  EXPECT_EQ(s.pin_failures()[0].layer, 2u);
  EXPECT_EQ(s.pin_failures()[0].bytes, bank2);
  EXPECT_NE(s.pin_failures()[0].reason.find("limit"), std::string::npos) << s.pin_failures()[0].reason;

  // Pinned copies: the same bytes, each expert's gate | up | down contiguous; the pageable
  // layer still reads the file.
  const HostExpertStore view = HostExpertStore::from_mapping(f.geometry, f.bytes.data());
  for (uint32_t layer : order) {
    for (uint32_t e = 0; e < 9; ++e) {
      uint64_t offset = 0;
      for (int p = 0; p < kExpertProjCount; ++p) {
        const auto proj = static_cast<ExpertProj>(p);
        const uint64_t n = s.proj_bytes(layer, proj);
        const uint8_t* got = s.expert_proj(layer, e, proj);
        const uint8_t* want = view.expert_proj(layer, e, proj);
        if (n == 0) {
          EXPECT_EQ(got, nullptr);
          continue;
        }
        EXPECT_EQ(std::memcmp(got, want, n), 0) << "layer " << layer << " expert " << e << " proj " << p;
        if (layer == 2) {
          EXPECT_EQ(got, want);
        } else {
          EXPECT_NE(got, want);
          EXPECT_EQ(got, s.pinned_expert(layer, e) + offset);
        }
        offset += n;
      }
    }
  }
  // A second pin of the same layers: nothing new, the refused layer refused again.
  EXPECT_EQ(s.pin(order, alloc), 0u);
  EXPECT_EQ(s.pin_failures().size(), 2u);
  // Moving the store keeps the pinned copies; destroying it frees them.
  {
    HostExpertStore moved = std::move(s);
    EXPECT_TRUE(moved.pinned(5));
    EXPECT_EQ(moved.pinned_bytes(), bank1 + bank5);
  }
  EXPECT_EQ(alloc.allocated_bytes(), 0u);
}

TEST(HostStore, SimulatedAllocatorAlignsAndRefusesPastItsLimit) {
  SimulatedPinnedAllocator alloc(10000);
  std::string why;
  void* a = alloc.allocate_pinned(6000, &why);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % SimulatedPinnedAllocator::kAlignment, 0u);
  EXPECT_EQ(alloc.allocate_pinned(4001, &why), nullptr);
  EXPECT_FALSE(why.empty());
  void* b = alloc.allocate_pinned(4000, &why);
  EXPECT_NE(b, nullptr);
  alloc.free_pinned(a, 6000);
  alloc.free_pinned(b, 4000);
  EXPECT_EQ(alloc.allocated_bytes(), 0u);
}

TEST(HostStore, StagingRingHandsOutBuffersRoundRobin) {
  SimulatedPinnedAllocator alloc;
  auto ring = StagingRing::create(alloc, 3, 1 << 16);
  ASSERT_TRUE(ring.ok()) << ring.status().to_string();
  std::vector<uint8_t*> seen;
  for (uint32_t i = 0; i < 7; ++i) {
    const StagingRing::Buffer b = ring->acquire();
    EXPECT_EQ(b.slot, i % 3);
    EXPECT_EQ(b.bytes, 1u << 16);
    if (i < 3) {
      seen.push_back(b.data);
    } else {
      EXPECT_EQ(b.data, seen[i % 3]);
    }
  }
  EXPECT_NE(seen[0], seen[1]);
  EXPECT_NE(seen[1], seen[2]);
  EXPECT_EQ(alloc.allocated_bytes(), 3u << 16);

  SimulatedPinnedAllocator small((1 << 16) + 10);
  auto refused = StagingRing::create(small, 2, 1 << 16);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("staging buffer 1 of 2"), std::string::npos) << refused.status().to_string();
}

ExpertGeometry random_geometry(std::mt19937& rng) {
  ExpertGeometry g;
  g.n_expert = 1 + rng() % 64;
  const uint32_t n_layers = 1 + rng() % 48;
  uint32_t block = rng() % 3;
  for (uint32_t i = 0; i < n_layers; ++i) {
    LayerExpertGeometry l;
    l.layer = block;
    block += 1 + rng() % 2;
    l.n_expert = g.n_expert;
    const uint64_t kinds[] = {144 * 8, 210 * 8, 512 * 8, 34 * 8};
    for (int p = 0; p < kExpertProjCount; ++p) {
      l.proj[p].present = true;
      l.proj[p].bytes_per_expert = kinds[rng() % 4] * (1 + rng() % 3);
      g.max_bytes[p] = std::max(g.max_bytes[p], l.proj[p].bytes_per_expert);
    }
    g.compact_bytes += l.bank_bytes();
    g.layers.push_back(l);
  }
  return g;
}

void check_choice(const ExpertGeometry& g, const PinChoice& c, uint64_t budget) {
  EXPECT_LE(c.pinned_bytes, budget);
  std::vector<uint32_t> all;
  uint64_t sum = 0;
  for (const LayerExpertGeometry& l : g.layers) all.push_back(l.layer);
  for (uint32_t b : c.pinned) {
    sum += std::find_if(g.layers.begin(), g.layers.end(), [&](const auto& l) { return l.layer == b; })->bank_bytes();
  }
  EXPECT_EQ(sum, c.pinned_bytes);
  EXPECT_TRUE(std::is_sorted(c.pinned.begin(), c.pinned.end()));
  EXPECT_TRUE(std::is_sorted(c.pageable.begin(), c.pageable.end()));
  std::vector<uint32_t> both;
  std::merge(c.pinned.begin(), c.pinned.end(), c.pageable.begin(), c.pageable.end(), std::back_inserter(both));
  EXPECT_EQ(both, all);  // a partition: every layer once
  for (uint32_t b : c.pageable) {  // maximal: no pageable layer fits in what is left
    const auto& l = *std::find_if(g.layers.begin(), g.layers.end(), [&](const auto& x) { return x.layer == b; });
    EXPECT_GT(l.bank_bytes(), budget - c.pinned_bytes) << "layer " << b;
  }
  EXPECT_LE(c.padded_pinned_bytes, budget);
  EXPECT_LE(c.padded_pinned_layers, c.pinned.size());  // compact never pins fewer layers
}

TEST(HostStore, ChoosePinnedLayersOverRandomGeometries) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 500; ++trial) {
    const ExpertGeometry g = random_geometry(rng);
    const uint64_t budget = trial % 10 == 0 ? 0 : rng() % (g.compact_bytes + g.compact_bytes / 4 + 1);
    check_choice(g, choose_pinned_layers(g, budget), budget);
  }
  const ExpertGeometry g = random_geometry(rng);
  const PinChoice everything = choose_pinned_layers(g, ~uint64_t{0});
  EXPECT_EQ(everything.pinned.size(), g.layers.size());
  EXPECT_EQ(everything.pinned_bytes, g.compact_bytes);
}

TEST(HostStore, OrnithSeed001PinFigures) {
  auto c = synth::preset("ornith-35b");
  ASSERT_TRUE(c.ok());
  c->sparse = true;
  const std::string path = test::temp_path("host-store-ornith.gguf");
  ASSERT_TRUE(synth::write_model(*c, {path, false}).ok());
  auto f = gguf::GgufFile::open(path);
  ASSERT_TRUE(f.ok());
  auto g = read_expert_geometry(*f);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  ASSERT_EQ(g->layers.size(), 40u);
  const uint64_t budget = 15ull << 30;
  const PinChoice choice = choose_pinned_layers(*g, budget);
  check_choice(*g, choice, budget);
  // Seed 001: padded banks are 522,190,848 B per layer (Q6_K-sized down everywhere), so
  // 15 GiB pinned 30 layers; compact banks (20 layers at 452,984,832 B) pin 33.
  EXPECT_EQ(choice.padded_layer_bytes, 522190848u);
  EXPECT_EQ(choice.padded_pinned_layers, 30u);
  EXPECT_EQ(choice.pinned.size(), 33u);
  EXPECT_EQ(choice.pinned_bytes, 20ull * 452984832 + 13ull * 522190848);
}

}  // namespace
}  // namespace mt
