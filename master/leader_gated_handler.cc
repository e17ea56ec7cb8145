#include "master/leader_gated_handler.h"

#include <thrift/TApplicationException.h>

namespace mooncake {
namespace {

constexpr rpc::ErrorCode::type kNotLeader = rpc::ErrorCode::NOT_LEADER;

}  // namespace

rpc::ErrorCode::type LeaderGatedHandler::RegisterNode(const rpc::NodeInfo& node) {
  return gate_.leader() ? inner_->RegisterNode(node) : kNotLeader;
}

rpc::ErrorCode::type LeaderGatedHandler::Heartbeat(const std::string& node_id,
                                                   const std::vector<rpc::TierUsage>& tiers) {
  return gate_.leader() ? inner_->Heartbeat(node_id, tiers) : kNotLeader;
}

void LeaderGatedHandler::GetLocation(rpc::LocationResult& _return, const std::string& key) {
  if (gate_.serving_keys()) return inner_->GetLocation(_return, key);
  _return = rpc::LocationResult();
  _return.code = kNotLeader;
}

void LeaderGatedHandler::BatchGetLocation(std::vector<rpc::LocationResult>& _return,
                                          const std::vector<std::string>& keys) {
  if (gate_.serving_keys()) return inner_->BatchGetLocation(_return, keys);
  rpc::LocationResult refused;
  refused.code = kNotLeader;
  _return.assign(keys.size(), refused);
}

void LeaderGatedHandler::PutOwner(rpc::PutOwnerResult& _return, const std::string& key,
                                  const std::string& node_id) {
  if (gate_.serving_keys()) return inner_->PutOwner(_return, key, node_id);
  _return = rpc::PutOwnerResult();
  _return.code = kNotLeader;
}

void LeaderGatedHandler::BatchPutOwner(std::vector<rpc::PutOwnerResult>& _return,
                                       const std::vector<std::string>& keys,
                                       const std::string& node_id) {
  if (gate_.serving_keys()) return inner_->BatchPutOwner(_return, keys, node_id);
  rpc::PutOwnerResult refused;
  refused.code = kNotLeader;
  _return.assign(keys.size(), refused);
}

rpc::ErrorCode::type LeaderGatedHandler::UpdateOwner(const std::string& key,
                                                     const std::string& expected_owner,
                                                     const std::string& new_owner) {
  return gate_.serving_keys() ? inner_->UpdateOwner(key, expected_owner, new_owner) : kNotLeader;
}

rpc::ErrorCode::type LeaderGatedHandler::RemoveOwner(const std::string& key,
                                                     const std::string& node_id) {
  return gate_.serving_keys() ? inner_->RemoveOwner(key, node_id) : kNotLeader;
}

void LeaderGatedHandler::BatchRemoveOwner(std::vector<rpc::ErrorCode::type>& _return,
                                          const std::vector<std::string>& keys,
                                          const std::string& node_id) {
  if (gate_.serving_keys()) return inner_->BatchRemoveOwner(_return, keys, node_id);
  _return.assign(keys.size(), kNotLeader);
}

void LeaderGatedHandler::AnnounceKeys(rpc::AnnounceResult& _return, const std::string& node_id,
                                      const std::vector<std::string>& keys) {
  if (gate_.leader()) return inner_->AnnounceKeys(_return, node_id, keys);
  _return = rpc::AnnounceResult();
  _return.code = kNotLeader;
}

void LeaderGatedHandler::PickNode(rpc::PickNodeResult& _return, int64_t size,
                                  const std::vector<std::string>& exclude) {
  // Until the workers re-registered, the registry would pick among too few
  // nodes, or answer NO_AVAILABLE_HANDLE with none.
  if (gate_.serving_keys()) return inner_->PickNode(_return, size, exclude);
  _return = rpc::PickNodeResult();
  _return.code = kNotLeader;
}

void LeaderGatedHandler::ListNodes(std::vector<rpc::NodeInfo>& _return) {
  if (gate_.leader()) return inner_->ListNodes(_return);
  // No code field to carry NOT_LEADER: the generated processor turns this
  // into a TApplicationException reply (the connection stays usable).
  throw apache::thrift::TApplicationException("NOT_LEADER: this master is a standby; leader=" +
                                              gate_.Snapshot().leader_address);
}

void LeaderGatedHandler::GetRole(rpc::MasterRole& _return) {
  RoleSnapshot role = gate_.Snapshot();
  _return = rpc::MasterRole();
  _return.is_leader = role.leader;
  _return.leader_address = role.leader_address;
  _return.cluster_name = role.cluster_name;
  _return.self_address = role.self_address;
}

}  // namespace mooncake
