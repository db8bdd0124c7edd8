// CudaExpertDevice (see the header): the executor's device calls as launches on the
// compute stream and copies on the cache's copy stream.
#include "cuda/tiering_device.h"

#include <algorithm>

#include "core/check.h"
#include "cuda/kernels/check.h"
#include "cuda/kernels/ops.h"

namespace mt::cuda {

namespace {

void* pinned(size_t bytes) {
  void* p = nullptr;
  MT_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
  return p;
}

}  // namespace

StatusOr<std::unique_ptr<CudaExpertDevice>> CudaExpertDevice::create(const PoolPlan& plan, const ExpertCache& cache,
                                                                     const HostExpertStore& store,
                                                                     HostAllocator& allocator, uint32_t stream_buffers,
                                                                     uint32_t n_layer, uint32_t k, uint32_t n_embd,
                                                                     uint32_t max_tokens) {
  std::unique_ptr<CudaExpertDevice> d(new CudaExpertDevice());
  MT_ASSIGN_OR_RETURN(d->cache_, DeviceExpertCache::create(plan, cache, store, allocator, stream_buffers));
  d->k_ = k, d->n_embd_ = n_embd, d->max_tokens_ = max_tokens;
  const size_t S = static_cast<size_t>(max_tokens) * k, E = n_embd;
  d->pin_sel_ = static_cast<int32_t*>(pinned(sizeof(int32_t) * S));
  d->pin_slot_ids_ = static_cast<int32_t*>(pinned(sizeof(int32_t) * S));
  d->pin_row_ids_ = static_cast<int32_t*>(pinned(sizeof(int32_t) * S));
  d->pin_stage_ids_ = static_cast<int32_t*>(pinned(sizeof(int32_t) * S));
  d->pin_h_ = static_cast<float*>(pinned(sizeof(float) * max_tokens * E));
  d->pin_rows_ = static_cast<float*>(pinned(sizeof(float) * S * E));
  d->slot_ids_dev_ = DeviceBuffer(sizeof(int32_t) * S);
  d->stage_ids_dev_ = DeviceBuffer(sizeof(int32_t) * S);
  d->row_ids_dev_ = DeviceBuffer(sizeof(int32_t) * S);
  d->rows_dev_ = DeviceBuffer(sizeof(float) * S * E);
  d->dev_issue_.resize(n_layer);
  d->dev_begin_.resize(n_layer);
  d->dev_end_.resize(n_layer);
  d->dev_timed_.assign(n_layer, false);
  for (uint32_t l = 0; l < n_layer; ++l) {
    MT_CUDA_CHECK(cudaEventCreate(&d->dev_issue_[l]));
    MT_CUDA_CHECK(cudaEventCreate(&d->dev_begin_[l]));
    MT_CUDA_CHECK(cudaEventCreate(&d->dev_end_[l]));
  }
  return d;
}

CudaExpertDevice::~CudaExpertDevice() {
  for (void* p : {static_cast<void*>(pin_sel_), static_cast<void*>(pin_slot_ids_), static_cast<void*>(pin_row_ids_),
                  static_cast<void*>(pin_stage_ids_), static_cast<void*>(pin_h_), static_cast<void*>(pin_rows_)}) {
    if (p != nullptr) cudaFreeHost(p);
  }
  for (cudaEvent_t e : dev_issue_) cudaEventDestroy(e);
  for (cudaEvent_t e : dev_begin_) cudaEventDestroy(e);
  for (cudaEvent_t e : dev_end_) cudaEventDestroy(e);
}

LayerStep CudaExpertDevice::fetch_routing(uint32_t layer, uint32_t n_tokens, const int32_t* sel, const float* h,
                                          cudaStream_t stream) {
  MT_CHECK(n_tokens <= max_tokens_);
  MT_CUDA_CHECK(cudaMemcpyAsync(pin_sel_, sel, sizeof(int32_t) * n_tokens * k_, cudaMemcpyDeviceToHost, stream));
  MT_CUDA_CHECK(cudaMemcpyAsync(pin_h_, h, sizeof(float) * n_tokens * n_embd_, cudaMemcpyDeviceToHost, stream));
  MT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return {layer, n_tokens, k_, pin_sel_, pin_h_};
}

void CudaExpertDevice::copy_to_slot(uint32_t layer, uint32_t expert, int32_t slot) { cache_->admit(layer, expert, slot); }

void CudaExpertDevice::wait_copies(uint32_t layer) {
  // The device share's start: the compute stream is idle here (fetch_routing waited for
  // it), so the event marks when this layer-step's copies were issued.
  MT_CUDA_CHECK(cudaEventRecord(dev_issue_[layer], layer_.stream));
  cache_->wait_layer(layer, layer_.stream);
}

void CudaExpertDevice::stage(uint32_t layer, std::span<const uint32_t> experts) {
  staged_buf_ = cache_->stage_experts(layer, experts);
}

void CudaExpertDevice::compute(const DeviceGroup& g) {
  cudaStream_t s = layer_.stream;
  const uint32_t l = g.layer;
  const size_t S = g.selected.size();
  MT_CHECK(S <= static_cast<size_t>(max_tokens_) * k_ && layer_.products != nullptr);
  std::copy(g.slot.begin(), g.slot.end(), pin_slot_ids_);
  MT_CUDA_CHECK(cudaMemcpyAsync(slot_ids_dev_.get(), pin_slot_ids_, sizeof(int32_t) * S, cudaMemcpyHostToDevice, s));
  if (staged_buf_ >= 0) {
    std::copy(g.staged.begin(), g.staged.end(), pin_stage_ids_);
    MT_CUDA_CHECK(cudaMemcpyAsync(stage_ids_dev_.get(), pin_stage_ids_, sizeof(int32_t) * S, cudaMemcpyHostToDevice, s));
  }
  if (g.n_slot > 0 || staged_buf_ >= 0) {
    MT_CUDA_CHECK(cudaEventRecord(dev_begin_[l], s));
    dev_timed_[l] = true;
  }
  ProductSet sets[2];
  size_t n = 0;
  if (g.n_slot > 0) sets[n++] = {cache_->slots(l), slot_ids_dev_.as<int32_t>()};
  if (staged_buf_ >= 0) {
    cache_->wait_staged(staged_buf_, s);
    sets[n++] = {cache_->staged(staged_buf_), stage_ids_dev_.as<int32_t>()};
  }
  layer_.products->launch({sets, n});
  if (staged_buf_ >= 0) cache_->release_staged(staged_buf_, s);
  staged_buf_ = -1;
  if (dev_timed_[l]) MT_CUDA_CHECK(cudaEventRecord(dev_end_[l], s));
}

float* CudaExpertDevice::cpu_rows(size_t n) {
  MT_CHECK(n <= static_cast<size_t>(max_tokens_) * k_);
  return pin_rows_;
}

void CudaExpertDevice::finish(const DeviceGroup&, std::span<const int32_t> cpu_slots, const float* rows) {
  const size_t n = cpu_slots.size();
  if (n == 0) return;
  MT_CHECK(rows == pin_rows_);
  cudaStream_t s = layer_.stream;
  std::copy(cpu_slots.begin(), cpu_slots.end(), pin_row_ids_);
  MT_CUDA_CHECK(cudaMemcpyAsync(rows_dev_.get(), pin_rows_, sizeof(float) * n * n_embd_, cudaMemcpyHostToDevice, s));
  MT_CUDA_CHECK(cudaMemcpyAsync(row_ids_dev_.get(), pin_row_ids_, sizeof(int32_t) * n, cudaMemcpyHostToDevice, s));
  scatter_rows(layer_.d, rows_dev_.as<float>(), row_ids_dev_.as<int32_t>(), static_cast<int>(n),
               static_cast<int>(n_embd_), s);
}

void CudaExpertDevice::collect_times(TieredExecutor& executor) {
  std::vector<LayerTiming>& timing = executor.timing();
  for (size_t l = 0; l < dev_timed_.size(); ++l) {
    if (!dev_timed_[l]) continue;
    float ms = 0, share_ms = 0;
    MT_CUDA_CHECK(cudaEventElapsedTime(&ms, dev_begin_[l], dev_end_[l]));
    MT_CUDA_CHECK(cudaEventElapsedTime(&share_ms, dev_issue_[l], dev_end_[l]));
    timing[l].device_s += ms * 1e-3;
    executor.observe_device(static_cast<uint32_t>(l), share_ms * 1e-3);
    dev_timed_[l] = false;
  }
}

}  // namespace mt::cuda
