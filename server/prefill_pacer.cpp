#include "server/prefill_pacer.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace mt {

PrefillPacer::PrefillPacer(Options o) : o_(o) {
  MT_CHECK(o_.max_chunk >= 1 && o_.min_chunk >= 1 && o_.ratio >= 0 && o_.alpha > 0 && o_.alpha <= 1);
  o_.min_chunk = std::min(o_.min_chunk, o_.max_chunk);
  if (o_.idle_chunk == 0) o_.idle_chunk = o_.max_chunk;
  size_t n = 1;
  while (size_of(n - 1) < o_.max_chunk) ++n;
  extra_s_.assign(n, 0.0);
}

uint32_t PrefillPacer::size_of(size_t bucket) const {
  const uint64_t s = static_cast<uint64_t>(o_.min_chunk) << std::min<size_t>(bucket, 32);
  return static_cast<uint32_t>(std::min<uint64_t>(s, o_.max_chunk));
}

size_t PrefillPacer::bucket_of(uint32_t tokens) const {
  size_t b = 0;
  while (b + 1 < extra_s_.size() && size_of(b + 1) <= tokens) ++b;
  return b;
}

double PrefillPacer::chunk_extra_s(uint32_t bucket_tokens) const { return extra_s_[bucket_of(bucket_tokens)]; }

void PrefillPacer::buckets(std::vector<Bucket>* out) const {
  out->resize(extra_s_.size());
  for (size_t b = 0; b < extra_s_.size(); ++b) (*out)[b] = {size_of(b), extra_s_[b]};
}

uint32_t PrefillPacer::budget(uint32_t decoding, uint32_t waiting) {
  if (decoding == 0) return o_.idle_chunk;
  if (o_.ratio <= 1) return o_.max_chunk;
  // No prompt tokens this step: a plain decode step measures d, which nothing else does
  // (with prompts waiting every step would carry a chunk, and d would stay unknown: an
  // H100 served 8 tiered streams with the whole crowd admitted 16 tokens a step, ttft p99
  // 18.6 s); again after `reprobe` prompt steps without one (d grows with the decoders).
  if (decode_s_ <= 0 || (o_.reprobe > 0 && since_plain_ >= o_.reprobe)) return 0;
  const double scale = std::clamp(static_cast<double>(waiting) / decoding, 1.0, kMaxWaitScale);
  const double target = (o_.ratio - 1) * decode_s_ * scale;
  // The largest measured bucket within the target; where even the smallest measured one
  // is over it (a fixed cost: MoE experts read for any chunk), the largest within
  // kFallbackSlack x the smallest's extra time: the stall stays near the least a chunk can
  // add while a fixed cost is spread over as many tokens as that allows (GPU MoE: 256
  // tokens for ~1.4x 16's stall; a CPU's linear cost: the smallest). Capping that by the
  // target as well measured worse: an H100 admitted a 4,096-token prompt beside 8 streams
  // in 6.9 s instead of 0.7 s for a p99 gap of 3.54x instead of 3.78x (docs/PERFORMANCE.md).
  size_t first = extra_s_.size();
  for (size_t b = 0; b < extra_s_.size() && first == extra_s_.size(); ++b) {
    if (extra_s_[b] > 0) first = b;
  }
  if (first == extra_s_.size()) return o_.min_chunk;  // nothing measured yet
  // The fallback's slack stays within kStallCap x d for the whole step (the streams' worst
  // gap), above the target only where the crowd's scale put the target there.
  const double slack = std::min(kFallbackSlack * extra_s_[first], (kStallCap - 1) * decode_s_);
  const double limit = std::max(target, slack);
  size_t pick = first;
  for (size_t b = first; b < extra_s_.size(); ++b) {
    if (extra_s_[b] > 0 && extra_s_[b] <= limit) pick = b;
  }
  // Try the next bucket up: once when unmeasured, then every `reprobe` prompt steps; not
  // when the pick already takes most of the limit (a bigger chunk costs at least as much:
  // a probe would only be a stall the streams see).
  const size_t up = pick + 1;
  const bool room = extra_s_[pick] <= limit / kProbeHeadroom;
  if (up < extra_s_.size() && room &&
      (extra_s_[up] <= 0 || (o_.reprobe > 0 && prompt_steps_ % o_.reprobe == o_.reprobe - 1))) {
    return size_of(up);
  }
  return size_of(pick);
}

void PrefillPacer::observe(uint32_t decode_rows, uint32_t prompt_tokens, double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return;
  const auto blend = [this](double& avg, double v) { avg = avg <= 0 ? v : avg + o_.alpha * (v - avg); };
  if (prompt_tokens == 0) {
    if (decode_rows > 0) blend(decode_s_, seconds), since_plain_ = 0;
    return;
  }
  if (decode_rows == 0) return;  // a prompt-only step says nothing of the extra time
  ++since_plain_;
  if (decode_s_ <= 0) return;
  ++prompt_steps_;
  // A floor keeps a measured bucket distinguishable from an unmeasured one (0).
  blend(extra_s_[bucket_of(prompt_tokens)], std::max(seconds - decode_s_, 1e-9));
}

}  // namespace mt
