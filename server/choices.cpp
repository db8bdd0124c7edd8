#include "server/choices.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "core/check.h"

namespace mt::server {
namespace {

using Json = nlohmann::json;

// JSON has no -inf: a token the model gives no chance at all reports -9999.
constexpr float kFloor = -9999.0f;

std::string dump_json(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// A token's piece as a JSON string: invalid UTF-8 is replaced, the bytes say what it was.
Json piece_string(const std::string& piece) { return Json::parse(dump_json(Json(piece))); }

Json bytes_of(const std::string& piece) {
  Json b = Json::array();
  for (unsigned char c : piece) b.push_back(static_cast<int>(c));
  return b;
}

Json entry(const LogprobEntry& e) {
  return {{"token", piece_string(e.piece)}, {"logprob", std::max(e.logprob, kFloor)}, {"bytes", bytes_of(e.piece)}};
}

Json chat_logprobs(const std::vector<TokenLogprobs>& lps) {
  Json content = Json::array();
  for (const TokenLogprobs& lp : lps) {
    Json c = entry(lp.chosen);
    c["top_logprobs"] = Json::array();
    for (const LogprobEntry& t : lp.top) c["top_logprobs"].push_back(entry(t));
    content.push_back(std::move(c));
  }
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

// The legacy completions shape; *offset advances by each token's piece.
Json completion_logprobs(const std::vector<TokenLogprobs>& lps, size_t* offset) {
  Json tokens = Json::array(), values = Json::array(), tops = Json::array(), offsets = Json::array();
  for (const TokenLogprobs& lp : lps) {
    tokens.push_back(piece_string(lp.chosen.piece));
    values.push_back(std::max(lp.chosen.logprob, kFloor));
    Json top = Json::object();
    for (const LogprobEntry& t : lp.top) {
      const std::string key = piece_string(t.piece).get<std::string>();
      if (!top.contains(key)) top[key] = std::max(t.logprob, kFloor);
    }
    tops.push_back(std::move(top));
    offsets.push_back(*offset);
    *offset += lp.chosen.piece.size();
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(values)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

Json head(const ResponseMeta& meta, const char* object) {
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

}  // namespace

ResponseChoices::ResponseChoices(const ResponseMeta& meta) : meta_(meta), choices_(std::max(1u, meta.n)) {}

std::string ResponseChoices::stream_text(const GenerationEvent& e, bool usage_field) {
  MT_CHECK(e.index < choices_.size());
  if (e.text.empty() && e.logprobs.empty()) return "";
  const bool chat = meta_.endpoint == Endpoint::kChat;
  Json choice = {{"index", e.index}};
  if (chat) {
    choice["delta"] = {{"content", e.text}};
  } else {
    choice["text"] = e.text;
  }
  if (meta_.top_logprobs < 0) {
    choice["logprobs"] = nullptr;
  } else {
    choice["logprobs"] = chat ? chat_logprobs(e.logprobs) : completion_logprobs(e.logprobs, &choices_[e.index].offset);
  }
  choice["finish_reason"] = nullptr;
  Json j = head(meta_, chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = Json::array({std::move(choice)});
  if (usage_field) j["usage"] = nullptr;
  return "data: " + dump_json(j) + "\n\n";
}

std::string ResponseChoices::stream_finish(uint32_t index, std::string_view finish_reason, bool usage_field) const {
  const bool chat = meta_.endpoint == Endpoint::kChat;
  Json choice = {{"index", index}};
  if (chat) {
    choice["delta"] = Json::object();
  } else {
    choice["text"] = "";
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = std::string(finish_reason);
  Json j = head(meta_, chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = Json::array({std::move(choice)});
  if (usage_field) j["usage"] = nullptr;
  return "data: " + dump_json(j) + "\n\n";
}

void ResponseChoices::add(const GenerationEvent& e) {
  MT_CHECK(e.index < choices_.size());
  Choice& c = choices_[e.index];
  if (e.kind == GenerationEvent::Kind::kText) {
    c.text += e.text;
    c.logprobs.insert(c.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
  } else if (e.kind == GenerationEvent::Kind::kDone) {
    c.finish_reason = e.finish_reason;
  }
}

std::string ResponseChoices::body(std::string_view finish_reason, const Usage& usage) const {
  const bool chat = meta_.endpoint == Endpoint::kChat;
  Json j = head(meta_, chat ? "chat.completion" : "text_completion");
  j["choices"] = Json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    Json choice = {{"index", i}};
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    } else {
      choice["text"] = c.text;
    }
    if (meta_.top_logprobs < 0) {
      choice["logprobs"] = nullptr;
    } else {
      size_t offset = 0;
      choice["logprobs"] = chat ? chat_logprobs(c.logprobs) : completion_logprobs(c.logprobs, &offset);
    }
    choice["finish_reason"] = c.finish_reason.empty() ? std::string(finish_reason) : c.finish_reason;
    j["choices"].push_back(std::move(choice));
  }
  j["usage"] = {{"prompt_tokens", usage.prompt_tokens},
                {"completion_tokens", usage.completion_tokens},
                {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
  return dump_json(j);
}

}  // namespace mt::server
