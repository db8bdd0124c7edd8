// ChatReply: a chat request's generated text read through its template's tool-call syntax
// (runtime/tool_calls.h) into the API's shapes: content and reasoning deltas, one delta per
// whole tool call (delta.tool_calls[{index, id, type, function: {name, arguments}}]), and
// finish_reason "tool_calls" when the reply called a tool and ended on its own (a reply cut
// at max_tokens stays "length"). Streaming and non-streaming read the text the same way.
// A forced call (server/chat_prompt.h) starts opened, and is closed at the end when the
// model did not close it (its grammar ends the reply where the arguments end).
#pragma once

#include <string>
#include <string_view>

#include "runtime/tool_calls.h"
#include "server/chat_prompt.h"
#include "server/openai.h"

namespace mt::server {

class ChatReply {
 public:
  explicit ChatReply(const ChatTurn& turn);

  // SSE events for the next piece of generated text (none while a call is still open).
  std::string stream(const ResponseMeta& meta, std::string_view text, bool usage_field);
  // The events still held, then the finish chunk.
  std::string stream_finish(const ResponseMeta& meta, std::string_view finish_reason, bool usage_field);

  // The whole answer of a non-streaming request, from all of the generated text.
  std::string body(const ResponseMeta& meta, std::string_view text, std::string_view finish_reason, const Usage& usage);

 private:
  std::string events(const ResponseMeta& meta, std::vector<ReplyPiece> pieces, bool usage_field);
  std::string finish_reason(std::string_view generated) const;

  std::vector<ReplyPiece> finish();

  ReplyStream reply_;
  std::string forced_suffix_;  // closes a forced call whose arguments the grammar ended
  size_t next_index_ = 0;
};

}  // namespace mt::server
