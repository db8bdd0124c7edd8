// ResponseChoices: the choices of one response (n of them), assembled from the scheduler's
// events, each of which names its choice (GenerationEvent::index). Streaming, every text
// piece becomes a chunk carrying its choice's index and, when logprobs were asked, the
// log-probabilities of the tokens it covers; every choice ends with its own finish chunk.
// Not streaming, text, logprobs and finish reason are kept per choice until the body.
// Logprob shapes: chat `logprobs.content[]` = {token, logprob, bytes, top_logprobs[]};
// completions the legacy {tokens, token_logprobs, top_logprobs [{token: logprob}],
// text_offset} (byte offsets of each token's piece in the choice's text).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server/openai.h"
#include "server/scheduler.h"

namespace mt::server {

class ResponseChoices {
 public:
  explicit ResponseChoices(const ResponseMeta& meta);

  // Streaming: the chunk of a text event ("" when it carries neither text nor logprobs).
  std::string stream_text(const GenerationEvent& e, bool usage_field);
  // Streaming: choice `index`'s finish chunk.
  std::string stream_finish(uint32_t index, std::string_view finish_reason, bool usage_field) const;

  // Not streaming: keeps a text event or a choice's kDone.
  void add(const GenerationEvent& e);
  // The whole answer; a choice without a kDone of its own takes `finish_reason`.
  std::string body(std::string_view finish_reason, const Usage& usage) const;
  const std::string& text(uint32_t index) const { return choices_[index].text; }

 private:
  struct Choice {
    std::string text;
    std::string finish_reason;
    std::vector<TokenLogprobs> logprobs;
    size_t offset = 0;  // completions: text_offset of the next token
  };
  ResponseMeta meta_;
  std::vector<Choice> choices_;
};

}  // namespace mt::server
