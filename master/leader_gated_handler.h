#pragma once

// The Thrift face of every master: forwards each call to the plain
// MasterHandler when this master may answer it, and otherwise answers
// NOT_LEADER (docs/ha.md). A master without etcd is the leader of its own
// group (RoleGate::LeadAlone) and only ever rebuilds, after its start:
//
// * a standby answers every call with NOT_LEADER: bare ErrorCode returns,
//   the `code` of result structs, every element of batch results;
//   ListNodes, which has no code, fails with a TApplicationException whose
//   message starts with "NOT_LEADER" (an empty list would say "no nodes");
// * a leader inside its rebuild window (after an election, or after the
//   start of a master without etcd) serves RegisterNode, Heartbeat,
//   AnnounceKeys and ListNodes (that is how workers rebuild its directory)
//   but answers the key calls (GetLocation, BatchGetLocation, PutOwner,
//   BatchPutOwner, UpdateOwner, RemoveOwner, BatchRemoveOwner) and PickNode
//   with NOT_LEADER, so no caller is told "not found" for a key whose owner
//   has not re-announced yet, nor "no space" while nodes are still
//   re-registering;
// * GetRole always answers, from the gate: a leader names itself, which
//   is how a caller told NOT_LEADER knows to wait and retry at the same
//   master (thrift/master_endpoint.cc).
//
// Thread-safety: stateless apart from the references; the gate and the
// inner handler are thread-safe and must outlive this one.

#include <memory>
#include <string>
#include <vector>

#include "master/leader_election.h"
#include "mooncake_rpc/MasterService.h"

namespace mooncake {

class LeaderGatedHandler : public rpc::MasterServiceIf {
 public:
  LeaderGatedHandler(std::shared_ptr<rpc::MasterServiceIf> inner, const RoleGate& gate)
      : inner_(std::move(inner)), gate_(gate) {}

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
  const std::shared_ptr<rpc::MasterServiceIf> inner_;
  const RoleGate& gate_;
};

}  // namespace mooncake
