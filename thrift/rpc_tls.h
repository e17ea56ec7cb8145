#pragma once

// Mutual TLS settings of one process's RPC endpoints. Plain values, so the
// config structs of the master, the worker, the CLI and ClientConfig carry
// them without pulling in Thrift or OpenSSL headers.
//
// With TLS on, every Thrift connection (client to master, client to worker,
// worker to master, worker to worker) is TLS, and both sides present a
// certificate signed by `ca_file`: a peer without one gets no answer. The
// CA is the trust boundary: any certificate it signed is accepted, whatever
// host name it carries.
//
// Thread-safety: a plain value.

#include <string>

#include "common/status.h"

namespace mooncake {

struct TlsSettings {
  // PEM certificate this process presents.
  std::string cert_file;
  // PEM private key of cert_file.
  std::string key_file;
  // PEM CA certificate(s) a peer's certificate must be signed by.
  std::string ca_file;

  // TLS is on when a certificate is named; ValidateTlsSettings then requires
  // all three files.
  bool enabled() const { return !cert_file.empty() || !key_file.empty() || !ca_file.empty(); }
};

// All three empty (TLS off) or all three naming readable files. On failure
// returns kInvalidParams and says why in `*message` (may be null).
Result<void> ValidateTlsSettings(const TlsSettings& tls, std::string* message);

}  // namespace mooncake
