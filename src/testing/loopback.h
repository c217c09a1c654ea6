// A TCP connection to a port on 127.0.0.1, for tests that speak a protocol by hand (raw
// frames, TLS records cut in two).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>

#include "util/posix_file.h"

namespace kvtier::testing {

// The connected socket, or an empty one (-1) when it cannot connect.
inline ScopedFd ConnectLoopbackTcp(uint16_t port) {
  ScopedFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) return {};
  return fd;
}

}  // namespace kvtier::testing
