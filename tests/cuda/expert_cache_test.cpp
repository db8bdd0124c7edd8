// cuda/expert_cache.h on a synthetic store of four MoE layers in three geometry groups
// (separate Q8_0 gate/up/down twice, an ungated F16 layer, a layer whose gate and up
// differ in type) with padded host strides, two layers pinned and two pageable: admitted
// experts read back from their slots byte-equal to the host's gate | up | down (read on a
// compute stream ordered only by wait_layer), the slot views name the right bytes and
// shapes, staged layers (two buffers, seven calls, both staging forms) read back as every
// expert of the layer, and a plan beyond device memory or slots that disagree with the
// store are errors.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "cuda/expert_cache.h"
#include "cuda/host_memory.h"
#include "cuda_test_util.h"
#include "experts/cache.h"
#include "experts/pools.h"
#include "quant/types.h"

namespace mt::cuda {
namespace {

constexpr uint32_t kBlocks = 6, kExperts = 6;
constexpr uint32_t kMoeBlocks[] = {1, 2, 3, 5};  // blocks 0 and 4 are dense
constexpr uint64_t kPad = 48;                     // host stride = expert bytes + kPad

ProjGeometry proj(QuantType type, uint64_t n_in, uint64_t n_out) {
  ProjGeometry p;
  p.present = true;
  p.type = type;
  p.n_in = n_in;
  p.n_out = n_out;
  p.bytes_per_expert = *row_bytes(type, n_in) * n_out;
  return p;
}

// Totals and groups as read_expert_geometry() derives them.
void finish(ExpertGeometry& g) {
  g.groups.clear();
  g.compact_bytes = 0;
  for (const LayerExpertGeometry& l : g.layers) {
    g.n_expert = l.n_expert;
    g.compact_bytes += l.bank_bytes();
    GeometryGroup* group = nullptr;
    for (GeometryGroup& gr : g.groups) {
      if (std::equal(gr.bytes, gr.bytes + kExpertProjCount, l.proj, l.proj + kExpertProjCount,
                     [](uint64_t b, const ProjGeometry& p) { return b == p.bytes_per_expert; })) {
        group = &gr;
      }
    }
    if (group == nullptr) {
      group = &g.groups.emplace_back();
      for (int p = 0; p < kExpertProjCount; ++p) group->bytes[p] = l.proj[p].bytes_per_expert;
    }
    group->layers.push_back(l.layer);
  }
  std::stable_sort(g.groups.begin(), g.groups.end(), [](const GeometryGroup& a, const GeometryGroup& b) {
    return a.bytes_per_expert() > b.bytes_per_expert();
  });
}

ExpertGeometry synth_geometry() {
  const uint64_t n_embd = 64, n_ff = 32;
  ExpertGeometry g;
  auto add = [&](uint32_t block, ProjGeometry gate, ProjGeometry up, ProjGeometry down) {
    LayerExpertGeometry l;
    l.layer = block;
    l.n_expert = kExperts;
    l.proj[0] = gate;
    l.proj[1] = up;
    l.proj[2] = down;
    g.layers.push_back(l);
  };
  const ProjGeometry q8_in = proj(QuantType::Q8_0, n_embd, n_ff), q8_down = proj(QuantType::Q8_0, n_ff, n_embd);
  add(1, q8_in, q8_in, q8_down);  // gate_up shared
  add(2, q8_in, q8_in, q8_down);  // the same group as block 1
  add(3, ProjGeometry{}, proj(QuantType::F16, n_embd, n_ff), proj(QuantType::F16, n_ff, n_embd));  // ungated
  add(5, proj(QuantType::F32, n_embd, n_ff), proj(QuantType::F16, n_embd, n_ff), q8_down);  // gate, up differ
  finish(g);
  return g;
}

// Host bytes of every (block, projection): (n_expert, bytes + kPad) uint8, each byte a hash
// of where it is.
struct SynthBanks {
  ExpertGeometry geometry = synth_geometry();
  std::vector<std::vector<uint8_t>> bank = std::vector<std::vector<uint8_t>>(kBlocks * kExpertProjCount);

  SynthBanks() {
    for (const LayerExpertGeometry& l : geometry.layers) {
      for (int p = 0; p < kExpertProjCount; ++p) {
        if (!l.proj[p].present) continue;
        std::vector<uint8_t>& v = bank[l.layer * kExpertProjCount + p];
        v.resize(kExperts * (l.proj[p].bytes_per_expert + kPad));
        for (size_t i = 0; i < v.size(); ++i) {
          v[i] = static_cast<uint8_t>(((i + 1) * 2654435761u + l.layer * 97 + static_cast<uint64_t>(p) * 31) >> 11);
        }
      }
    }
  }
  const LayerExpertGeometry& layer(uint32_t block) const {
    return *std::find_if(geometry.layers.begin(), geometry.layers.end(),
                         [&](const LayerExpertGeometry& l) { return l.layer == block; });
  }
  ProjResolver resolver() const {
    return [this](uint32_t block, ExpertProj p) {
      const int pi = static_cast<int>(p);
      return ProjSource{bank[block * kExpertProjCount + pi].data(), layer(block).proj[pi].bytes_per_expert + kPad};
    };
  }
  // Expert e of the block as a slot holds it: gate | up | down.
  std::vector<uint8_t> expert(uint32_t block, uint32_t e) const {
    std::vector<uint8_t> out;
    for (int p = 0; p < kExpertProjCount; ++p) {
      const ProjGeometry& pg = layer(block).proj[p];
      if (!pg.present) continue;
      const uint8_t* at = bank[block * kExpertProjCount + p].data() + e * (pg.bytes_per_expert + kPad);
      out.insert(out.end(), at, at + pg.bytes_per_expert);
    }
    return out;
  }
};

// Three slots per layer: fewer than its experts, so admissions evict.
PoolPlan three_slots_per_layer(const ExpertGeometry& g) {
  uint64_t round = 0;
  for (const LayerExpertGeometry& l : g.layers) round += l.bytes_per_expert();
  return plan_pools(g, 3 * round);
}

const uint8_t* slot_base(const ExpertViews& v) { return v.gate.data != nullptr ? v.gate.data : v.up.data; }

// CudaPinnedAllocator's two modes: register mode reserves ordinary memory, the caller
// fills it, lock_filled page-locks it (the driver then reports it as registered host
// memory and a copy from it round-trips); alloc mode's reserve is already locked; both
// honour the limit and free what they gave.
TEST(CudaPinnedAllocator, RegisterModeLocksTheFilledBankAndAllocModeIsLockedAtOnce) {
  MT_SKIP_WITHOUT_DEVICE();
  constexpr uint64_t kBytes = (8ull << 20) + 4096;
  for (PinMode mode : {PinMode::kRegister, PinMode::kAlloc}) {
    SCOPED_TRACE(mode == PinMode::kRegister ? "register" : "alloc");
    CudaPinnedAllocator pins(2 * kBytes, mode);
    std::string why;
    auto* p = static_cast<uint8_t*>(pins.reserve(kBytes, &why));
    ASSERT_NE(p, nullptr) << why;
    for (uint64_t i = 0; i < kBytes; ++i) p[i] = static_cast<uint8_t>((i * 2654435761u) >> 11);
    ASSERT_TRUE(pins.lock_filled(p, kBytes).ok());
    cudaPointerAttributes attr{};
    ASSERT_EQ(cudaPointerGetAttributes(&attr, p), cudaSuccess);
    EXPECT_EQ(attr.type, cudaMemoryTypeHost) << "not page-locked after lock_filled";
    DeviceBuffer d(kBytes);
    ASSERT_EQ(cudaMemcpy(d.get(), p, kBytes, cudaMemcpyHostToDevice), cudaSuccess);
    std::vector<uint8_t> back(kBytes);
    ASSERT_EQ(cudaMemcpy(back.data(), d.get(), kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(std::memcmp(back.data(), p, kBytes), 0);
    EXPECT_EQ(pins.allocated_bytes(), kBytes);
    EXPECT_EQ(pins.reserve(2 * kBytes, &why), nullptr);  // past the limit
    EXPECT_NE(why.find("limit"), std::string::npos) << why;
    auto* staging = static_cast<uint8_t*>(pins.allocate_pinned(kBytes, &why));  // locked at once in both modes
    ASSERT_NE(staging, nullptr) << why;
    ASSERT_EQ(cudaPointerGetAttributes(&attr, staging), cudaSuccess);
    EXPECT_EQ(attr.type, cudaMemoryTypeHost);
    pins.free_pinned(staging, kBytes);
    pins.free_pinned(p, kBytes);
    EXPECT_EQ(pins.allocated_bytes(), 0u);
  }
}

TEST(CudaExpertCache, SlotViewsNameTheSlotBytesAndShapes) {
  MT_SKIP_WITHOUT_DEVICE();
  CudaPinnedAllocator pins;
  SynthBanks s;
  HostExpertStore store(s.geometry, s.resolver());
  const PoolPlan plan = three_slots_per_layer(s.geometry);
  ExpertCache cache(plan, kBlocks, kExperts, {});
  auto made = DeviceExpertCache::create(plan, cache, store, pins, 0);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  const std::unique_ptr<DeviceExpertCache> dev = std::move(made).value();
  EXPECT_EQ(dev->device_bytes(), plan.used_bytes());
  for (uint32_t b : {0u, 4u}) {
    const ExpertViews& v = dev->slots(b);
    EXPECT_TRUE(v.gate.data == nullptr && v.up.data == nullptr && v.down.data == nullptr && v.gate_up.data == nullptr);
  }
  for (uint32_t b : kMoeBlocks) {
    SCOPED_TRACE(b);
    const LayerExpertGeometry& l = s.layer(b);
    const LayerSlots& where = cache.slots(b);
    ASSERT_EQ(where.count, 3u);
    const ExpertViews& v = dev->slots(b);
    const uint8_t* base = slot_base(v);
    ASSERT_NE(base, nullptr);
    const uint64_t gate_bytes = l.gate().present ? l.gate().bytes_per_expert : 0;
    EXPECT_EQ(v.up.data, base + gate_bytes);
    EXPECT_EQ(v.down.data, base + gate_bytes + l.up().bytes_per_expert);
    for (const DeviceMatrix* m : {&v.up, &v.down}) {
      EXPECT_EQ(m->n_mat, 3);
      EXPECT_EQ(m->matrix_bytes, where.expert_bytes);
    }
    EXPECT_EQ(v.up.n_in, 64);
    EXPECT_EQ(v.up.n_out, 32);
    EXPECT_EQ(v.up.type, l.up().type);
    EXPECT_EQ(v.up.row_bytes * 32, l.up().bytes_per_expert);
    EXPECT_EQ(v.down.n_in, 32);
    EXPECT_EQ(v.down.n_out, 64);
    EXPECT_EQ(v.down.type, l.down().type);
    EXPECT_EQ(v.down.row_bytes * 64, l.down().bytes_per_expert);
  }
  // The two layers of one group sit side by side in one pool.
  EXPECT_EQ(slot_base(dev->slots(2)), slot_base(dev->slots(1)) + 3 * s.layer(1).bytes_per_expert());
  const ExpertViews& paired = dev->slots(1);
  EXPECT_EQ(paired.gate_up.data, paired.gate.data);
  EXPECT_EQ(paired.gate_up.n_out, 64);
  EXPECT_EQ(paired.gate_up.n_in, 64);
  EXPECT_EQ(paired.gate_up.row_bytes, paired.gate.row_bytes);
  EXPECT_EQ(paired.gate_up.matrix_bytes, paired.gate.matrix_bytes);
  EXPECT_EQ(dev->slots(3).gate.data, nullptr);     // ungated
  EXPECT_EQ(dev->slots(3).gate_up.data, nullptr);
  EXPECT_NE(dev->slots(5).gate.data, nullptr);
  EXPECT_EQ(dev->slots(5).gate_up.data, nullptr);  // F32 gate, F16 up
}

TEST(CudaExpertCache, AdmittedExpertsReadBackAsTheHostBytes) {
  MT_SKIP_WITHOUT_DEVICE();
  CudaPinnedAllocator pins;
  SynthBanks s;
  HostExpertStore store(s.geometry, s.resolver());
  const std::vector<uint32_t> pinned = {1, 3};
  ASSERT_EQ(store.pin(pinned, pins), 2u);
  const PoolPlan plan = three_slots_per_layer(s.geometry);
  ExpertCache cache(plan, kBlocks, kExperts, {});
  auto made = DeviceExpertCache::create(plan, cache, store, pins, 0);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  const std::unique_ptr<DeviceExpertCache> dev = std::move(made).value();

  // Every expert of every layer, three rounds in different orders: LRU evicts, slots are
  // overwritten, both pinned staging buffers are reused many times.
  ExpertCacheCounters want;
  for (uint32_t round = 0; round < 3; ++round) {
    for (uint32_t k = 0; k < kExperts; ++k) {
      for (uint32_t b : kMoeBlocks) {
        const uint32_t e = (k * (round + 1) + round) % kExperts;
        if (cache.lookup(b, e) >= 0) continue;
        const int32_t slot = cache.admit(b, e);
        ASSERT_GE(slot, 0);
        dev->admit(b, e, slot);
        const uint64_t bytes = s.layer(b).bytes_per_expert();
        ++want.admissions;
        want.bytes_copied += bytes;
        if (!store.pinned(b)) want.bytes_through_ring += bytes;
      }
      cache.next_step();
    }
  }

  // Read back on a compute stream that waits only through wait_layer (no host sync).
  cudaStream_t compute = nullptr;
  MT_CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  for (uint32_t b : kMoeBlocks) {
    SCOPED_TRACE(b);
    dev->wait_layer(b, compute);
    const uint64_t bytes = s.layer(b).bytes_per_expert();
    std::vector<std::vector<uint8_t>> got(3, std::vector<uint8_t>(bytes));
    for (uint32_t slot = 0; slot < 3; ++slot) {
      MT_CUDA_CHECK(cudaMemcpyAsync(got[slot].data(), slot_base(dev->slots(b)) + slot * bytes, bytes,
                                    cudaMemcpyDeviceToHost, compute));
    }
    MT_CUDA_CHECK(cudaStreamSynchronize(compute));
    for (uint32_t slot = 0; slot < 3; ++slot) {
      const int32_t e = cache.expert_in(b, slot);
      ASSERT_GE(e, 0) << "slot " << slot;
      EXPECT_TRUE(got[slot] == s.expert(b, static_cast<uint32_t>(e))) << "slot " << slot << " expert " << e;
    }
  }
  dev->wait_layer(0, compute);  // a layer without copies: nothing to wait for
  MT_CUDA_CHECK(cudaStreamSynchronize(compute));
  MT_CUDA_CHECK(cudaStreamDestroy(compute));
  dev->synchronize();
  EXPECT_EQ(dev->counters().admissions, want.admissions);
  EXPECT_EQ(dev->counters().bytes_copied, want.bytes_copied);
  EXPECT_EQ(dev->counters().bytes_through_ring, want.bytes_through_ring);
  EXPECT_GT(want.bytes_through_ring, 0u);
  EXPECT_LT(want.bytes_through_ring, want.bytes_copied);
}

TEST(CudaExpertCache, StagedLayersReadBackAsEveryExpertOfTheLayer) {
  MT_SKIP_WITHOUT_DEVICE();
  CudaPinnedAllocator pins;
  SynthBanks s;
  HostExpertStore store(s.geometry, s.resolver());
  const std::vector<uint32_t> pinned = {1, 3};
  ASSERT_EQ(store.pin(pinned, pins), 2u);
  const PoolPlan plan = three_slots_per_layer(s.geometry);
  ExpertCache cache(plan, kBlocks, kExperts, {});
  auto made = DeviceExpertCache::create(plan, cache, store, pins, 2);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  const std::unique_ptr<DeviceExpertCache> dev = std::move(made).value();
  uint64_t largest_bank = 0;
  for (const LayerExpertGeometry& l : s.geometry.layers) largest_bank = std::max(largest_bank, l.bank_bytes());
  EXPECT_EQ(dev->device_bytes(), plan.used_bytes() + 2 * largest_bank);

  cudaStream_t compute = nullptr;
  MT_CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  const uint32_t order[] = {1, 2, 5, 3};  // pinned, pageable, pageable (largest), pinned ungated
  std::vector<std::vector<uint8_t>> got(std::size(order));  // sized before any copy is queued
  std::vector<const uint8_t*> buffer(std::size(order));
  uint64_t streamed = 0;
  for (size_t i = 0; i < std::size(order); ++i) {
    const uint32_t b = order[i];
    const LayerExpertGeometry& l = s.layer(b);
    const ExpertViews& v = dev->stage_layer(b, compute);
    EXPECT_EQ(v.up.n_mat, kExperts);
    EXPECT_EQ(v.down.n_mat, kExperts);
    EXPECT_EQ(v.down.matrix_bytes, l.bytes_per_expert());
    EXPECT_EQ(v.gate.data == nullptr, !l.gate().present);
    buffer[i] = slot_base(v);
    dev->wait_staged(compute);
    got[i].resize(l.bank_bytes());
    MT_CUDA_CHECK(cudaMemcpyAsync(got[i].data(), buffer[i], l.bank_bytes(), cudaMemcpyDeviceToHost, compute));
    dev->release_staged(compute);
    streamed += l.bank_bytes();
  }
  // The same through the buffer-named calls, continuing the round robin.
  const uint32_t named_order[] = {5, 2, 1};
  std::vector<std::vector<uint8_t>> named_got(std::size(named_order));
  for (size_t i = 0; i < std::size(named_order); ++i) {
    const uint32_t b = named_order[i];
    const int buf = dev->stage_layer(b);
    EXPECT_EQ(buf, static_cast<int>((std::size(order) + i) % 2));
    dev->wait_staged(buf, compute);
    const ExpertViews& v = dev->staged(buf);
    EXPECT_EQ(slot_base(v), buffer[static_cast<size_t>(buf)]);
    named_got[i].resize(s.layer(b).bank_bytes());
    MT_CUDA_CHECK(cudaMemcpyAsync(named_got[i].data(), slot_base(v), s.layer(b).bank_bytes(), cudaMemcpyDeviceToHost,
                                  compute));
    dev->release_staged(buf, compute);
    streamed += s.layer(b).bank_bytes();
  }
  MT_CUDA_CHECK(cudaStreamSynchronize(compute));
  MT_CUDA_CHECK(cudaStreamDestroy(compute));
  auto bank = [&](uint32_t b) {
    std::vector<uint8_t> want;
    for (uint32_t e = 0; e < kExperts; ++e) {
      const std::vector<uint8_t> x = s.expert(b, e);
      want.insert(want.end(), x.begin(), x.end());
    }
    return want;
  };
  for (size_t i = 0; i < std::size(named_order); ++i) {
    EXPECT_TRUE(named_got[i] == bank(named_order[i])) << "named call " << i << " layer " << named_order[i];
  }
  EXPECT_NE(buffer[0], buffer[1]);
  EXPECT_EQ(buffer[0], buffer[2]);
  EXPECT_EQ(buffer[1], buffer[3]);
  for (size_t i = 0; i < std::size(order); ++i) {
    EXPECT_TRUE(got[i] == bank(order[i])) << "call " << i << " layer " << order[i];
  }
  EXPECT_EQ(dev->counters().streamed_layers, std::size(order) + std::size(named_order));
  EXPECT_EQ(dev->counters().bytes_streamed, streamed);
  EXPECT_EQ(dev->counters().admissions, 0u);
}

TEST(CudaExpertCache, PlanBeyondDeviceMemoryIsAnError) {
  MT_SKIP_WITHOUT_DEVICE();
  size_t free_b = 0, total_b = 0;
  MT_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  CudaPinnedAllocator pins;
  SynthBanks s;
  HostExpertStore store(s.geometry, s.resolver());
  const PoolPlan plan = three_slots_per_layer(s.geometry);
  ExpertCache cache(plan, kBlocks, kExperts, {});
  PoolPlan big = plan;  // the cache's layout, in a pool twice the device
  big.pools[0].slots = 2 * total_b / big.pools[0].expert_bytes + 1;
  ASSERT_GT(big.used_bytes(), total_b);
  auto made = DeviceExpertCache::create(big, cache, store, pins, 0);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(made.status().message().find(std::to_string(big.used_bytes())), std::string::npos)
      << made.status().to_string();
  // The device is still usable.
  auto small = DeviceExpertCache::create(plan, cache, store, pins, 0);
  EXPECT_TRUE(small.ok()) << small.status().to_string();
}

TEST(CudaExpertCache, SlotsThatDisagreeWithTheStoreAreAnError) {
  // Fails before any CUDA call: runs without a device too.
  SimulatedPinnedAllocator pins;
  SynthBanks s;
  HostExpertStore store(s.geometry, s.resolver());
  ExpertGeometry other = s.geometry;  // block 5's down twice as wide as the store's
  other.layers[3].proj[2] = proj(QuantType::Q8_0, 64, 64);
  finish(other);
  const PoolPlan plan = three_slots_per_layer(other);
  ExpertCache cache(plan, kBlocks, kExperts, {});
  auto made = DeviceExpertCache::create(plan, cache, store, pins, 0);
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("layer 5"), std::string::npos) << made.status().to_string();
}

}  // namespace
}  // namespace mt::cuda
