// HttpLoop: the sockets of `moetier serve`. One thread (run()) owns every connection
// through epoll: it accepts, reads and parses requests (http_parser.h), writes responses
// and times connections out; an idle keep-alive connection costs a file descriptor and a
// few hundred bytes, never a thread. Handlers run on a small worker pool and never on the
// loop thread, except the inline ones (/health must answer while workers are busy). A
// handler answers at once or returns a DeferredReply (a generation in flight): the loop
// polls that reply on its own thread whenever a Waker says it has news, and calls its
// abandon() as soon as the client goes away (EPOLLRDHUP, a read of 0 bytes, a failed
// write) whether the reply is streamed or not, so work for a departed client stops.
//
// Sockets: SO_REUSEADDR but never SO_REUSEPORT (a second server on a port in use fails to
// bind), a backlog of SOMAXCONN. Limits: a head must arrive within header_timeout of its
// first byte (slowloris), a body may stall at most body_timeout, a keep-alive connection
// idle for idle_timeout is closed. An error the loop answers itself (a malformed request,
// 413, 431, a timeout) closes the connection after the response, reading and discarding
// what the client still sends for a while (a close with unread input would reset the
// connection and lose the response).
//
// stop() drains: the listening socket closes, idle connections close, requests in flight
// continue; at shutdown_grace each DeferredReply is cut() (it ends itself cleanly), and a
// bounded time later whatever is left is closed and run() returns.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "server/http_parser.h"
#include "server/http_wire.h"

namespace mt::server {

// The loop's side of one reply in progress (loop thread only).
class ReplyWriter {
 public:
  virtual ~ReplyWriter() = default;
  virtual void respond(HttpResponse response) = 0;  // the whole reply; ends it
  virtual void begin_stream(HttpResponse head) = 0;  // status and headers; the body follows
  virtual void write(std::string_view data) = 0;     // a piece of the streamed body
  virtual void end_stream() = 0;                     // ends the reply
};

// A reply that is not ready when its handler returns. Loop thread only.
class DeferredReply {
 public:
  virtual ~DeferredReply() = default;
  // Writes whatever is ready; called once when the reply arrives and after each wake.
  virtual void poll(ReplyWriter& out) = 0;
  // The client went away before the reply ended; poll is not called again.
  virtual void abandon() = 0;
  // The server is shutting down and its grace time is over: end soon (poll goes on).
  virtual void cut() = 0;
};

struct Mailbox;
// Asks the loop to poll one connection's DeferredReply. Any thread; cheap; harmless once
// the reply, its connection or the loop is gone.
class Waker {
 public:
  Waker() = default;
  Waker(std::shared_ptr<Mailbox> box, uint64_t connection) : box_(std::move(box)), connection_(connection) {}
  void operator()() const;

 private:
  std::shared_ptr<Mailbox> box_;
  uint64_t connection_ = 0;
};

struct HandlerResult {
  std::optional<HttpResponse> response;    // answered at once, or
  std::unique_ptr<DeferredReply> deferred;  // later
};

struct HttpHooks {
  // Loop thread: a response for the requests that must never wait on a worker; nullopt
  // sends the request to a worker.
  std::function<std::optional<HttpResponse>(const HttpRequest&)> inline_route;
  // A worker thread: every other request. The waker is the one its DeferredReply uses.
  std::function<HandlerResult(HttpRequest&, const Waker&)> handle;
  // The response for an error the loop found itself (status, message).
  std::function<HttpResponse(int, const std::string&)> error;
  // A reply ended: the request's method and path ("" when none was parsed) and the status
  // (499: the client left before the response began). Loop thread.
  std::function<void(const std::string&, const std::string&, int)> done;
};

struct HttpLoopOptions {
  ParserLimits limits;
  uint32_t workers = 4;
  std::chrono::milliseconds idle_timeout{60000};
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds body_timeout{30000};
  std::chrono::milliseconds shutdown_grace{10000};
  size_t max_connections = 4096;  // more wait in the kernel's backlog
};

class HttpLoop {
 public:
  HttpLoop(HttpLoopOptions options, HttpHooks hooks);
  ~HttpLoop();
  HttpLoop(const HttpLoop&) = delete;
  HttpLoop& operator=(const HttpLoop&) = delete;

  // Binds and listens; returns the port (the chosen one for port 0). A port in use is an
  // error ("address already in use").
  StatusOr<int> bind(const std::string& host, int port);
  // Serves until stop() and the drain; returns with every connection closed.
  void run();
  // Any thread, any number of times.
  void stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mt::server
