// PrefillPacer: how many prompt tokens one serving step may carry beside the sequences
// that are decoding, so that admitting a long prompt neither stalls the running streams
// nor crawls (chunked prefill). It measures what a prompt chunk adds to a step, per chunk
// size: chunk sizes are buckets min_chunk * 2^k up to max_chunk, each with a moving
// average of (step time - d) over steps that carried a chunk of that bucket, d being the
// moving average of plain decode steps. The extra time is far from linear in the chunk:
// with MoE weights a few prompt tokens already read most experts (a fixed cost), so small
// chunks are slow per token and big ones nearly free per token. The budget is the largest
// measured bucket whose extra time stays within (ratio - 1) * d; when even the smallest
// measured chunk is over that (a fixed cost), the largest within kFallbackSlack x the
// smallest's extra time, but no step past kStallCap x d: a prompt is not admitted 16 tokens
// at a time at nearly a full chunk's cost, a linear cost (a CPU) keeps the smallest stall,
// and the running streams' worst gap stays under 3 plain steps (the smallest chunk where
// even it is over). The next bucket up is tried once when unmeasured and again every
// `reprobe` prompt steps (costs drift with the number of decoders), unless the pick's extra
// time already fills the limit (kProbeHeadroom): a probe there is only a stall. A step
// without prompt tokens (budget 0) measures d where it is unknown, and again after
// `reprobe` prompt steps in a row (with prompts waiting no step is plain by itself).
// Nothing decoding: idle_chunk (no one waits; on a GPU a crowd's prompts in one step cost
// little more than one chunk, and its streams then start together). ratio 0 turns pacing
// off. The allowance is scaled by the requests waiting for their first token over those
// decoding (at least 1): the stall a step may add to each decoding stream grows with how
// many streams it admits sooner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mt {

class PrefillPacer {
 public:
  struct Options {
    uint32_t max_chunk = 256;  // prompt tokens per step, all prompts together
    uint32_t idle_chunk = 0;   // the same while nothing decodes; 0: max_chunk
    uint32_t min_chunk = 16;
    double ratio = 2.0;        // a prompt step's time over a plain decode step's; 0: off
    double alpha = 0.25;       // the moving averages' weight of the newest step
    uint32_t reprobe = 32;     // prompt steps between tries of the next bucket up (and plain steps)
  };
  explicit PrefillPacer(Options o);

  // The prompt tokens the next step may carry beside `decoding` requests decoding while
  // `waiting` requests' prompts go in (0: a plain decode step, to measure one): the
  // allowance grows with waiting / decoding (up to
  // kMaxWaitScale), so a crowd of new requests (32 streams starting together) is admitted
  // in big chunks while one long prompt beside many streams goes in paced.
  uint32_t budget(uint32_t decoding, uint32_t waiting);
  static constexpr double kMaxWaitScale = 8;
  static constexpr double kFallbackSlack = 1.5;
  static constexpr double kStallCap = 2.75;      // the fallback's bound on a step, in decode steps
  static constexpr double kProbeHeadroom = 1.2;  // a bucket up is probed while the pick's extra <= limit / this
  // A step's measured time with its decoding rows and prompt tokens.
  void observe(uint32_t decode_rows, uint32_t prompt_tokens, double seconds);

  double decode_step_s() const { return decode_s_; }  // 0 until measured
  // The measured extra time of a chunk of `bucket_tokens` (a bucket's size); 0: unmeasured.
  double chunk_extra_s(uint32_t bucket_tokens) const;
  struct Bucket {
    uint32_t tokens = 0;   // the bucket's chunk size
    double extra_s = 0;    // its measured extra time; 0: unmeasured
  };
  void buckets(std::vector<Bucket>* out) const;  // every bucket, smallest first (serve's /metrics)

 private:
  size_t bucket_of(uint32_t tokens) const;
  uint32_t size_of(size_t bucket) const;

  Options o_;
  double decode_s_ = 0;
  std::vector<double> extra_s_;  // per bucket; 0: unmeasured
  uint32_t prompt_steps_ = 0;
  uint32_t since_plain_ = 0;  // prompt steps beside decoders since the last plain decode step
};

}  // namespace mt
