#pragma once

// A small client of etcd's v3 API through its JSON gateway (etcd 3.4: POST
// /v3/lease/grant, /v3/lease/keepalive, /v3/lease/revoke, /v3/kv/range,
// /v3/kv/put, /v3/kv/txn), enough for a leader lease per cluster name
// (docs/ha.md). Debian packages no maintained C++ etcd v3 client, and the
// gateway needs only HTTP and JSON, both already dependencies (cpp-httplib,
// nlohmann_json); neither appears in this header.
//
// Every call tries the endpoints in turn, starting with the one that last
// answered, and gives up with kRpcFail when none answers within the timeout
// (an endpoint that answers 503 or 504, a member that cannot serve now,
// counts as not answering). etcd's other refusals are answers: 404 (no such
// lease or key) is kObjectNotFound, any other status kInternalError, logged
// at WARN with etcd's message once per call path until the answer changes
// (so "database space exceeded" shows up in the log).
// The timeout bounds each endpoint's whole exchange (connecting, sending,
// the full reply), not each read, so a call ends within it per endpoint
// tried; a reply over 4 MiB (far above any etcd reply to these calls) is
// not read further and fails the call with kInternalError.
//
// Thread-safety: every method is safe from any thread; calls are serialised
// on one internal lock (they are short: tens per second at most).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace mooncake {

struct EtcdKeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t lease = 0;  // 0: not attached to a lease
};

// The outcome of CreateIfAbsent: created, or the key that was there.
struct EtcdCreateOutcome {
  bool created = false;
  std::optional<EtcdKeyValue> existing;
};

class EtcdClient {
 public:
  // `endpoints` are "http://HOST:PORT" (or "HOST:PORT"); at least one.
  // kInvalidParams if one is malformed. Connects lazily.
  static Result<std::unique_ptr<EtcdClient>> Create(const std::vector<std::string>& endpoints,
                                                    int timeout_ms = 1000);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // A lease of `ttl_s` seconds (etcd may raise it to its minimum); returns
  // its id and sets *granted_ttl_s to the TTL etcd granted.
  Result<int64_t> Grant(int64_t ttl_s, int64_t* granted_ttl_s = nullptr);
  // Refreshes the lease; returns its remaining TTL in seconds, or
  // kObjectNotFound when the lease has expired or was revoked.
  Result<int64_t> KeepAlive(int64_t lease);
  // Revokes the lease, deleting every key attached to it.
  Result<void> Revoke(int64_t lease);
  // The key, or nullopt when absent.
  Result<std::optional<EtcdKeyValue>> Get(const std::string& key);
  Result<void> Put(const std::string& key, const std::string& value, int64_t lease = 0);
  // One transaction: if `key` does not exist, puts key=value attached to
  // `lease`; otherwise reads what is there.
  Result<EtcdCreateOutcome> CreateIfAbsent(const std::string& key, const std::string& value,
                                           int64_t lease);
  // Deletes `key` only while it is attached to `lease` (it is still ours);
  // returns whether it was deleted.
  Result<bool> DeleteIfLease(const std::string& key, int64_t lease);

  // Why the last failed call failed, for logs and /readyz: etcd's status
  // and message ("etcd http://a:2379 answered HTTP 429: etcdserver: mvcc:
  // database space exceeded"), or the endpoint that could not be reached.
  // Empty before any failure.
  std::string last_error() const;

 private:
  struct Impl;
  explicit EtcdClient(std::unique_ptr<Impl> impl);
  Result<std::string> Post(const std::string& path, const std::string& body);
  std::unique_ptr<Impl> impl_;
};

// "http://a:2379,b:2379" -> {"http://a:2379", "http://b:2379"}; spaces
// around entries are ignored. kInvalidParams for an empty list or an entry
// that is not [http://]HOST:PORT (https is not supported).
Result<std::vector<std::string>> ParseEtcdEndpoints(std::string_view text);

// Where the leader of `cluster_name` publishes its RPC address ("HOST:PORT"):
// /mooncake/<cluster_name>/leader.
std::string MasterLeaderKey(std::string_view cluster_name);

// The JSON encoding the gateway speaks, exposed for unit tests.
namespace etcd_json {

std::string Base64Encode(std::string_view bytes);
// kInvalidParams on a character outside the standard alphabet or bad padding.
Result<std::string> Base64Decode(std::string_view text);
// The smallest key greater than every key starting with `prefix` (etcd's
// range_end for a prefix scan); "\0" when no such key exists.
std::string PrefixRangeEnd(std::string_view prefix);
// Request bodies.
std::string GrantRequest(int64_t ttl_s);
std::string LeaseIdRequest(int64_t lease);
std::string RangeRequest(const std::string& key);
std::string PutRequest(const std::string& key, const std::string& value, int64_t lease);
std::string CreateIfAbsentRequest(const std::string& key, const std::string& value, int64_t lease);
std::string DeleteIfLeaseRequest(const std::string& key, int64_t lease);
// Response bodies. int64 fields arrive as JSON strings; absent fields are 0.
Result<int64_t> ParseGrantResponse(const std::string& body, int64_t* ttl_s);
// The TTL; 0 when the lease is gone.
Result<int64_t> ParseKeepAliveResponse(const std::string& body);
Result<std::optional<EtcdKeyValue>> ParseRangeResponse(const std::string& body);
Result<EtcdCreateOutcome> ParseCreateIfAbsentResponse(const std::string& body);
// Whether the transaction's compare held ("succeeded", absent when false).
Result<bool> ParseTxnSucceeded(const std::string& body);

}  // namespace etcd_json
}  // namespace mooncake
