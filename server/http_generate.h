// The generation routes (POST /v1/chat/completions, /v1/completions) between the HTTP loop
// (http_loop.h) and the Scheduler. On a worker thread the body is parsed and checked
// (openai.h), the chat rendered (chat_prompt.h), tokenized and submitted; what comes back
// is a DeferredReply the loop polls whenever the scheduler's thread has pushed an event
// (PendingGeneration, then the Waker): one JSON body at the end, or with "stream": true SSE
// chunks as the text comes, ending in `data: [DONE]`. No thread ever waits on a generation.
// A client that goes away abandons the reply and cancels its request at the next step,
// streamed or not. At shutdown, once the grace time is over, the reply is cut: a stream
// ends with a finish chunk (finish_reason "length": the text is cut short) and [DONE]; a
// body not yet sent becomes a 503.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "server/chat_prompt.h"
#include "server/http_loop.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace mt::server {

// What the generation routes need of the server; everything outlives the replies.
struct GenerationServices {
  Scheduler* scheduler = nullptr;
  const Tokenizer* tokenizer = nullptr;
  const ChatPrompt* chat = nullptr;
  std::string model_name;
  std::chrono::milliseconds request_timeout{0};
  std::shared_ptr<ServerMetrics> metrics;
  std::function<bool()> stopping;                      // true: refuse with 503
  std::function<HttpResponse(const ApiError&)> error;  // an error response (with the server's headers)
  std::function<void(HttpResponse*)> decorate;         // adds the server's headers (CORS) to a stream's head
};

// A worker thread: the answer to one generation request (an error at once, or a reply).
HandlerResult start_generation(const GenerationServices& services, Endpoint endpoint, const std::string& body,
                               const Waker& waker);

ApiError server_error(int status, std::string message);

}  // namespace mt::server
