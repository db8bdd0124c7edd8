#include "experts/tiering.h"

#include <algorithm>
#include <string>

#include "core/check.h"
#include "core/log.h"
#include "core/meminfo.h"

namespace mt {

ExpertTiering::~ExpertTiering() {
  executor.reset();
  device.reset();  // its copies read the store's pinned banks and the allocator's buffers
  scheduler.reset();
  store.reset();
}

Status ExpertTiering::reset() {
  executor.reset();
  device.reset();
  scheduler = std::make_unique<ExpertScheduler>(geometry, plan, n_layer, cache_options, scheduler_options);
  MT_ASSIGN_OR_RETURN(device, make_device(*this));
  executor = std::make_unique<TieredExecutor>(*scheduler, *device, *cpu, n_layer);
  bound();
  return {};
}

uint64_t pin_budget_cap(uint64_t budget, uint64_t available, std::string* why) {
  if (available == 0) return budget;
  constexpr uint64_t kMinReserve = 2ull << 30;
  const uint64_t reserve = std::max(kMinReserve, available / 8);
  const uint64_t spare = available > reserve ? available - reserve : 0;
  if (budget <= spare) return budget;
  if (why != nullptr) {
    *why = "the host has " + human_bytes(available) + " available: pinned expert banks are capped at " +
           human_bytes(spare) + " (a reserve of " + human_bytes(reserve) + " kept" +
           (budget == ~uint64_t{0} ? std::string(")") : "; --pin-budget asked " + human_bytes(budget) + ")");
  }
  return spare;
}

Status build_tiering(TieringSpec spec, ExpertTiering& t) {
  MT_CHECK(spec.allocator != nullptr && spec.cpu != nullptr && spec.make_device);
  t.geometry = std::move(spec.geometry);
  t.plan = std::move(spec.plan);
  t.cache_options = spec.cache_options;
  t.scheduler_options = spec.scheduler_options;
  t.n_layer = spec.n_layer;
  t.allocator = std::move(spec.allocator);
  t.cpu = std::move(spec.cpu);
  t.make_device = std::move(spec.make_device);
  t.scheduler = std::make_unique<ExpertScheduler>(t.geometry, t.plan, t.n_layer, t.cache_options, t.scheduler_options);
  t.store = std::make_unique<HostExpertStore>(t.geometry, spec.source);
  MT_ASSIGN_OR_RETURN(t.device, t.make_device(t));  // its pinned staging before the layers
  std::string why;
  const uint64_t budget = pin_budget_cap(spec.pin_budget, mem_available_bytes().value_or(0), &why);
  t.pins = choose_pinned_layers(t.geometry, budget);
  if (!why.empty() && !t.pins.pageable.empty()) {
    log_warn(why + ": pinning " + std::to_string(t.pins.pinned.size()) + " of " +
             std::to_string(t.pins.pinned.size() + t.pins.pageable.size()) +
             " expert layers, the others stay pageable (copied through the staging ring)");
  }
  if (spec.pin_background) {
    // Few copy threads: the first tokens' CPU experts run meanwhile (page-locking, on its
    // own thread, is most of the time).
    t.store->pin_in_background(t.pins.pinned, *t.allocator, kBackgroundCopyThreads);
  } else {
    t.store->pin(t.pins.pinned, *t.allocator, spec.show_progress);
  }
  t.executor = std::make_unique<TieredExecutor>(*t.scheduler, *t.device, *t.cpu, t.n_layer);
  t.bound();
  return {};
}

}  // namespace mt
