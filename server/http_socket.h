// The listening socket of `moetier serve`: SO_REUSEADDR (a restart need not wait out
// TIME_WAIT) but never SO_REUSEPORT, so a second server on a port in use fails to bind
// instead of sharing the port's connections with the first; a backlog of SOMAXCONN.
#pragma once

#include <string>

#include "core/status.h"

namespace mt::server {

struct ListenSocket {
  int fd = -1;   // non-blocking, close-on-exec; the caller closes it
  int port = 0;  // the bound port (the chosen one when asked for 0)
};

// host: a name or numeric address ("" = every interface). The error names host:port and
// says when the address is in use.
StatusOr<ListenSocket> listen_tcp(const std::string& host, int port);

}  // namespace mt::server
