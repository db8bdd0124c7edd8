#include "server/prefill_pacer.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace mt {

PrefillPacer::PrefillPacer(Options o) : o_(o) {
  MT_CHECK(o_.max_chunk >= 1 && o_.min_chunk >= 1 && o_.ratio >= 0 && o_.alpha > 0 && o_.alpha <= 1);
  o_.min_chunk = std::min(o_.min_chunk, o_.max_chunk);
}

uint32_t PrefillPacer::budget(bool decoders) const {
  if (!decoders || o_.ratio <= 1) return o_.max_chunk;
  if (decode_s_ <= 0 || token_s_ <= 0) return o_.min_chunk;
  const double n = (o_.ratio - 1) * decode_s_ / token_s_;
  if (!(n < o_.max_chunk)) return o_.max_chunk;  // NaN-safe
  return std::max(o_.min_chunk, static_cast<uint32_t>(n));
}

void PrefillPacer::observe(uint32_t decode_rows, uint32_t prompt_tokens, double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return;
  const auto blend = [this](double& avg, double v) { avg = avg <= 0 ? v : avg + o_.alpha * (v - avg); };
  if (prompt_tokens == 0) {
    if (decode_rows > 0) blend(decode_s_, seconds);
    return;
  }
  if (decode_rows == 0 || decode_s_ <= 0) return;  // a prompt-only step says nothing of the marginal cost
  const double extra = std::max(seconds - decode_s_, 0.0) / prompt_tokens;
  if (extra > 0) blend(token_s_, extra);
}

}  // namespace mt
