// PrefillPacer: how many prompt tokens one serving step may carry beside the sequences
// that are decoding, so that admitting a long prompt does not stall the running streams
// (chunked prefill). Two moving averages of measured step times: d, a step without prompt
// tokens, and c, the marginal time of one prompt token ((step time - d) / n over steps
// with n prompt tokens). The budget n = (ratio - 1) * d / c makes a step with a prompt
// chunk last about ratio x a plain decode step; as c falls with larger chunks (fixed
// costs spread), the budget grows to that fixed point step after step. It stays within
// [min_chunk, max_chunk]: min_chunk beside decoders until both averages exist, max_chunk
// when nothing decodes (no one waits). ratio 0 turns pacing off: always max_chunk.
#pragma once

#include <cstdint>

namespace mt {

class PrefillPacer {
 public:
  struct Options {
    uint32_t max_chunk = 256;  // prompt tokens per step, all prompts together
    uint32_t min_chunk = 16;
    double ratio = 2.0;        // a prompt step's time over a plain decode step's; 0: off
    double alpha = 0.25;       // the moving averages' weight of the newest step
  };
  explicit PrefillPacer(Options o);

  // The prompt tokens the next step may carry; decoders: some sequence decodes in it.
  uint32_t budget(bool decoders) const;
  // A step's measured time with its decoding rows and prompt tokens.
  void observe(uint32_t decode_rows, uint32_t prompt_tokens, double seconds);

  double decode_step_s() const { return decode_s_; }  // 0 until measured
  double prompt_token_s() const { return token_s_; }  // 0 until measured

 private:
  Options o_;
  double decode_s_ = 0, token_s_ = 0;
};

}  // namespace mt
