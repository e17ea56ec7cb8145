#pragma once

// Thrift face of MasterService: converts wire structs to C++ values and
// ErrorCode back, and nothing else; every rule lives in MasterService.
// No exception leaves a handler method: a failure inside becomes
// INTERNAL_ERROR in the reply.
//
// Thread-safety: stateless apart from the MasterService reference, which is
// itself thread-safe, so one handler serves every connection thread. The
// service must outlive the handler.

#include <string>
#include <vector>

#include "common/metrics.h"
#include "master/master_service.h"
#include "mooncake_rpc/MasterService.h"

namespace mooncake {

class MasterHandler : public rpc::MasterServiceIf {
 public:
  MasterHandler(MasterService& service, RequestMetrics& requests)
      : service_(service), requests_(requests) {}

  // The operation names requests are counted under (for RequestMetrics).
  static std::vector<std::string> OperationNames();

  rpc::ErrorCode::type RegisterNode(const rpc::NodeInfo& node) override;
  rpc::ErrorCode::type Heartbeat(const std::string& node_id,
                                 const std::vector<rpc::TierUsage>& tiers) override;
  void GetLocation(rpc::LocationResult& _return, const std::string& key) override;
  void BatchGetLocation(std::vector<rpc::LocationResult>& _return,
                        const std::vector<std::string>& keys) override;
  void PutOwner(rpc::PutOwnerResult& _return, const std::string& key,
                const std::string& node_id) override;
  void BatchPutOwner(std::vector<rpc::PutOwnerResult>& _return,
                     const std::vector<std::string>& keys, const std::string& node_id) override;
  rpc::ErrorCode::type UpdateOwner(const std::string& key, const std::string& expected_owner,
                                   const std::string& new_owner) override;
  rpc::ErrorCode::type RemoveOwner(const std::string& key, const std::string& node_id) override;
  void BatchRemoveOwner(std::vector<rpc::ErrorCode::type>& _return,
                        const std::vector<std::string>& keys, const std::string& node_id) override;
  void AnnounceKeys(rpc::AnnounceResult& _return, const std::string& node_id,
                    const std::vector<std::string>& keys) override;
  void PickNode(rpc::PickNodeResult& _return, int64_t size,
                const std::vector<std::string>& exclude) override;
  void ListNodes(std::vector<rpc::NodeInfo>& _return) override;
  void GetRole(rpc::MasterRole& _return) override;

 private:
  MasterService& service_;
  RequestMetrics& requests_;
};

}  // namespace mooncake
