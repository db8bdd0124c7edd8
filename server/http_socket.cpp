#include "server/http_socket.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace mt::server {

StatusOr<ListenSocket> listen_tcp(const std::string& host, int port) {
  const std::string where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints, &found)) {
    return io_error("cannot listen on " + where + ": " + gai_strerror(rc));
  }
  ListenSocket out;
  int error = 0;
  for (addrinfo* a = found; a != nullptr && out.fd < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      error = errno;
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
      error = errno;
      close(fd);
      continue;
    }
    out.fd = fd;
  }
  freeaddrinfo(found);
  if (out.fd < 0) {
    std::string why = std::strerror(error);
    if (error == EADDRINUSE) why += " (is another server running there?)";
    return io_error("cannot listen on " + where + ": " + why);
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  getsockname(out.fd, reinterpret_cast<sockaddr*>(&addr), &len);
  out.port = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                        : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return out;
}

}  // namespace mt::server
