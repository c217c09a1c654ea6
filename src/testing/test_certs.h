// Certificates for the TLS tests, made at test time with OpenSSL so that no private key is
// ever committed: a fresh self-signed CA (EC P-256) and the server and client certificates
// it signs, written as PEM files into a directory. The server's certificate names
// "localhost" and 127.0.0.1.
//
// Thread-safety: none needed; each call writes its own files.
#pragma once

#include <string>

#include "kvtier/status.h"

namespace kvtier::testing {

struct TestPki {
  std::string ca_cert;
  std::string server_cert, server_key;
  std::string client_cert, client_key;
};

// Writes <dir>/<name>-ca.pem, -server.pem, -server.key, -client.pem and -client.key; each call
// makes a new CA, so two names give two PKIs that do not trust each other.
Result<TestPki> MakeTestPki(const std::string& dir, const std::string& name);

}  // namespace kvtier::testing
