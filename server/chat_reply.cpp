#include "server/chat_reply.h"

namespace mt::server {

ChatReply::ChatReply(const ChatTurn& turn)
    : reply_(turn.syntax, ToolSchemas(turn.tools_json)), forced_suffix_(turn.forced_suffix) {
  reply_.push(turn.forced);  // an opened call: nothing comes out before its arguments
}

std::vector<ReplyPiece> ChatReply::finish() {
  std::vector<ReplyPiece> out;
  if (!forced_suffix_.empty() && reply_.calls() == 0) out = reply_.push(forced_suffix_);
  for (ReplyPiece& p : reply_.finish()) out.push_back(std::move(p));
  return out;
}

std::string ChatReply::finish_reason(std::string_view generated) const {
  return reply_.calls() > 0 && generated == "stop" ? "tool_calls" : std::string(generated);
}

std::string ChatReply::events(const ResponseMeta& meta, std::vector<ReplyPiece> pieces, bool usage_field) {
  std::string out;
  for (const ReplyPiece& p : pieces) {
    switch (p.kind) {
      case ReplyPiece::Kind::kContent: out += chunk_text(meta, p.text, usage_field); break;
      case ReplyPiece::Kind::kReasoning: out += chunk_reasoning(meta, p.text, usage_field); break;
      case ReplyPiece::Kind::kToolCall: out += chunk_tool_call(meta, next_index_++, p.call, usage_field); break;
    }
  }
  return out;
}

std::string ChatReply::stream(const ResponseMeta& meta, std::string_view text, bool usage_field) {
  return events(meta, reply_.push(text), usage_field);
}

std::string ChatReply::stream_finish(const ResponseMeta& meta, std::string_view reason, bool usage_field) {
  std::string out = events(meta, finish(), usage_field);
  return out + chunk_finish(meta, finish_reason(reason), usage_field);
}

std::string ChatReply::body(const ResponseMeta& meta, std::string_view text, std::string_view reason,
                            const Usage& usage) {
  std::vector<ReplyPiece> pieces = reply_.push(text);
  for (ReplyPiece& p : finish()) pieces.push_back(std::move(p));
  ChatReplyParts parts;
  for (ReplyPiece& p : pieces) {
    if (p.kind == ReplyPiece::Kind::kContent) parts.content += p.text;
    if (p.kind == ReplyPiece::Kind::kReasoning) parts.reasoning += p.text;
    if (p.kind == ReplyPiece::Kind::kToolCall) parts.tool_calls.push_back(std::move(p.call));
  }
  return chat_response_body(meta, parts, finish_reason(reason), usage);
}

}  // namespace mt::server
