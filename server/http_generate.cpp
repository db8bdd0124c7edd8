#include "server/http_generate.h"

#include <algorithm>
#include <optional>

#include "server/chat_reply.h"
#include "server/choices.h"
#include "server/choices.h"
#include "server/generation.h"

namespace mt::server {

namespace {

// The answer for a generation that ended without "stop" or "length".
ApiError ended_error(const GenerationEvent& e) {
  if (e.kind == GenerationEvent::Kind::kError) return server_error(500, "generation failed: " + e.error);
  return server_error(503, "generation " + e.finish_reason + " (the server is shutting down or the request timed out)");
}

bool finished_normally(const GenerationEvent& e) {
  return e.kind == GenerationEvent::Kind::kDone && (e.finish_reason == "stop" || e.finish_reason == "length");
}

HandlerResult answer(const GenerationServices& s, const ApiError& e) { return {s.error(e), nullptr}; }

// A choice's end that the client sees as a finish: its own "stop"/"length", or any end of
// a request the shutdown cut (its text is cut short: "length").
std::optional<std::string> finish_of(const GenerationEvent& e, bool cut) {
  if (finished_normally(e)) return e.finish_reason;
  if (cut && e.kind == GenerationEvent::Kind::kDone && e.finish_reason == "cancelled") return std::string("length");
  return std::nullopt;
}

class GenerationReply final : public DeferredReply {
 public:
  GenerationReply(const GenerationServices& s, std::shared_ptr<PendingGeneration> pending, const ResponseMeta& meta,
                  uint64_t id, bool stream, bool include_usage, std::shared_ptr<ChatReply> chat_reply)
      : s_(s),
        pending_(std::move(pending)),
        meta_(meta),
        choices_(meta),
        id_(id),
        stream_(stream),
        include_usage_(include_usage),
        chat_reply_(std::move(chat_reply)) {}

  void poll(ReplyWriter& out) override {
    if (finished_) return;
    if (stream_ && !started_) begin(out);
    for (const GenerationEvent& e : pending_->take(std::chrono::milliseconds(0))) {
      if (e.kind == GenerationEvent::Kind::kText) {
        if (stream_) {
          write_text(out, e);
        } else if (chat_reply_) {
          text_.append(e.text);
        } else {
          choices_.add(e);
        }
        continue;
      }
      if (!e.last) {  // one of n choices ended; the request goes on
        if (!stream_) {
          choices_.add(e);
        } else if (auto reason = finish_of(e, cut_)) {
          out.write(choices_.stream_finish(e.index, *reason, include_usage_));
        }
        continue;
      }
      finished_ = true;
      if (stream_) {
        end_stream(out, e);
      } else {
        respond(out, e);
      }
      return;
    }
  }

  void abandon() override {
    if (finished_) return;
    finished_ = true;
    pending_->abandon();
    s_.scheduler->cancel(id_);
  }

  void cut() override {
    cut_ = true;
    s_.scheduler->cancel(id_);
  }

 private:
  void begin(ReplyWriter& out) {
    started_ = true;
    HttpResponse head;
    head.content_type = "text/event-stream";
    head.headers.emplace_back("Cache-Control", "no-cache");
    if (s_.decorate) s_.decorate(&head);
    out.begin_stream(std::move(head));
    if (meta_.endpoint == Endpoint::kChat) out.write(chunk_start(meta_, include_usage_));
  }

  void write_text(ReplyWriter& out, const GenerationEvent& e) {
    const std::string events = chat_reply_ ? (e.text.empty() ? "" : chat_reply_->stream(meta_, e.text, include_usage_))
                                           : choices_.stream_text(e, include_usage_);
    if (!events.empty()) out.write(events);
  }

  void end_stream(ReplyWriter& out, const GenerationEvent& e) {
    if (auto reason = finish_of(e, cut_)) {
      out.write(chat_reply_ ? chat_reply_->stream_finish(meta_, *reason, include_usage_)
                            : choices_.stream_finish(e.index, *reason, include_usage_));
      if (include_usage_) out.write(chunk_usage(meta_, {e.prompt_tokens, e.completion_tokens}));
    } else {
      out.write(sse_error(ended_error(e)));
    }
    out.write(kSseDone);
    out.end_stream();
  }

  void respond(ReplyWriter& out, const GenerationEvent& e) {
    if (!finished_normally(e)) {
      return out.respond(s_.error(cut_ ? server_error(503, "the server is shutting down") : ended_error(e)));
    }
    const Usage usage{e.prompt_tokens, e.completion_tokens};
    choices_.add(e);
    HttpResponse r;
    r.body = chat_reply_ ? chat_reply_->body(meta_, text_, e.finish_reason, usage) : choices_.body(e.finish_reason, usage);
    if (s_.decorate) s_.decorate(&r);
    out.respond(std::move(r));
  }

  const GenerationServices& s_;
  std::shared_ptr<PendingGeneration> pending_;
  ResponseMeta meta_;
  ResponseChoices choices_;  // n choices with their logprobs
  uint64_t id_;
  bool stream_, include_usage_;
  std::shared_ptr<ChatReply> chat_reply_;  // one chat choice with tools: read through the tool-call syntax
  std::string text_;                       // chat_reply_, not streamed: the text so far
  bool started_ = false, finished_ = false, cut_ = false;
};

}  // namespace

ApiError server_error(int status, std::string message) {
  return ApiError{status, "server_error", std::move(message), "", ""};
}

HandlerResult start_generation(const GenerationServices& s, Endpoint endpoint, const std::string& body,
                               const Waker& waker) {
  const auto arrived = std::chrono::steady_clock::now();
  ApiRequest r;
  if (auto e = parse_request(endpoint, body, &r)) return answer(s, *e);
  if (!r.model.empty() && r.model != s.model_name) {
    return answer(s, {404, "invalid_request_error",
                      "The model '" + r.model + "' does not exist; this server serves '" + s.model_name + "'", "model",
                      "model_not_found"});
  }
  std::string text = r.prompt;
  std::shared_ptr<ChatReply> chat_reply;
  if (endpoint == Endpoint::kChat) {
    auto turn = prepare_chat(*s.chat, r);
    if (!turn.ok()) return answer(s, bad_request(turn.status().message(), "messages"));
    text = std::move(turn->prompt);
    if (turn->syntax != ToolSyntax::kNone && r.choices.n == 1) chat_reply = std::make_shared<ChatReply>(*turn);
  }
  const char* prompt_param = endpoint == Endpoint::kChat ? "messages" : "prompt";
  std::vector<int32_t> prompt = s.tokenizer->encode(text, true, true);
  if (prompt.empty()) return answer(s, bad_request("the prompt is empty", prompt_param));
  const uint32_t n_ctx = s.scheduler->options().n_ctx;
  const uint64_t max_tokens = r.max_tokens ? *r.max_tokens : n_ctx - std::min<uint64_t>(prompt.size(), n_ctx);
  if (prompt.size() >= n_ctx || prompt.size() + max_tokens > n_ctx) {
    return answer(s, bad_request("This model's maximum context length is " + std::to_string(n_ctx) +
                                     " tokens; the request needs " + std::to_string(prompt.size()) +
                                     " in the prompt + " + std::to_string(std::max<uint64_t>(max_tokens, 1)) +
                                     " to generate",
                                 prompt_param, "context_length_exceeded"));
  }
  if (s.stopping()) return answer(s, server_error(503, "the server is shutting down"));
  auto pending = std::make_shared<PendingGeneration>(s.metrics.get(), arrived);
  GenerationRequest g;
  g.prompt = std::move(prompt);
  g.sampling = r.sampling;
  if (r.ignore_eos) {  // banned after the client's own biases, so none of them lifts the ban
    for (uint32_t id = 0; id < s.tokenizer->n_vocab(); ++id) {
      if (s.tokenizer->is_eog(static_cast<int32_t>(id))) g.sampling.logit_bias.emplace_back(static_cast<int32_t>(id), -100.0f);
    }
  }
  g.max_tokens = static_cast<uint32_t>(max_tokens);
  g.stops = r.stops;
  g.choices = r.choices;
  g.timeout = s.request_timeout;
  g.choices = r.choices;
  // The callback holds the metrics the pending generation observes into: it may run after
  // the server is gone (the scheduler outlives it).
  g.on_event = [pending, waker, metrics = s.metrics](const GenerationEvent& e) {
    const bool wanted = pending->push(e);
    waker();
    return wanted;
  };
  auto submitted = s.scheduler->submit(std::move(g));
  if (!submitted.ok()) return answer(s, bad_request(submitted.status().message()));
  ResponseMeta meta = response_meta(r, s.model_name);
  return {std::nullopt, std::make_unique<GenerationReply>(s, std::move(pending), std::move(meta), *submitted, r.stream,
                                                          r.include_usage, std::move(chat_reply))};
}

}  // namespace mt::server
