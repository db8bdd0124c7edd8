// HttpServer: the routes of `moetier serve`, on cpp-httplib.
//   POST /v1/chat/completions, POST /v1/completions   parsed and checked (openai.h), the
//        chat rendered (chat_prompt.h), tokenized, submitted to the Scheduler; answered as
//        one JSON body, or with "stream": true as SSE chunks ending in `data: [DONE]`
//   GET  /v1/models, /v1/models/{id}, /health, /metrics (Prometheus text, metrics.h)
// Invariants: every failure is answered with an OpenAI error object and a 4xx/5xx status
// (bad JSON or fields 400, wrong API key 401, unknown model or route 404, wrong method
// 405, a body over the limit 413), and the server goes on serving; the HTTP threads never
// run the model, they wait on a PendingGeneration; a streaming client that goes away
// (a write to it fails) cancels its request at the next piece of text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <chrono>
#include <string>
#include <vector>

#include "core/status.h"
#include "server/chat_prompt.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace mt::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                              // 0: any free port (bind() returns it)
  std::string model_name;                       // the "model" clients name
  std::string api_key;                          // "": no authentication
  size_t max_body_bytes = size_t{8} << 20;      // larger bodies get 413
  uint32_t threads = 64;                        // connections served at once (an open one holds a thread)
  std::chrono::milliseconds request_timeout{0};  // a request still running after this ends ("timeout"); 0: none
  std::vector<ExpertGroupLabel> expert_groups;  // for /metrics
};

class HttpServer {
 public:
  // scheduler, tokenizer and chat must outlive the server.
  HttpServer(Scheduler& scheduler, const Tokenizer& tokenizer, const ChatPrompt& chat, HttpOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket; returns the port.
  StatusOr<int> bind();
  // Serves until stop(); returns once every connection's thread has finished.
  void run();
  // From any thread: stop accepting, cancel the requests in flight.
  void stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mt::server
