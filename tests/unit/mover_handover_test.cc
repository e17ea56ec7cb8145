// Hand-overs between real backends (worker/mover.h, worker/peer_transfer.h):
// several TieredCacheBackends share one in-memory master, and a loopback
// PeerTransfer moves objects between them as ThriftPeerTransfer::Transfer
// does (SendToNodeWithRoom over AdoptStart / PutChunk / AdoptEnd on the
// target, then UpdateOwner at the master), with the master's answers
// scripted where a test needs a race.

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/unit/gated_read_tier.h"
#include "tiers/dram_tier.h"
#include "worker/mover.h"
#include "worker/peer_transfer.h"
#include "worker/tiered_cache_backend.h"

namespace mooncake {
namespace {

constexpr uint64_t kKiB = 1024;

// The master's ownership table, shared by every node.
class SharedMaster {
 public:
  // "" when no node owns `key`.
  std::string OwnerOf(const std::string& key) {
    std::lock_guard lock(mu_);
    auto it = owners_.find(key);
    return it == owners_.end() ? "" : it->second;
  }
  // UpdateOwner(key, expected, new): a compare-and-set.
  Result<void> UpdateOwner(const std::string& key, const std::string& from, const std::string& to) {
    std::lock_guard lock(mu_);
    auto it = owners_.find(key);
    if (it == owners_.end()) return Err(ErrorCode::kObjectNotFound);
    if (it->second != from) return Err(ErrorCode::kNotOwner);
    it->second = to;
    return {};
  }
  Result<void> Claim(const std::string& key, const std::string& node) {
    std::lock_guard lock(mu_);
    auto [it, added] = owners_.emplace(key, node);
    if (!added && it->second != node) return Err(ErrorCode::kObjectAlreadyExists);
    return {};
  }
  Result<void> Release(const std::string& key, const std::string& node) {
    std::lock_guard lock(mu_);
    auto it = owners_.find(key);
    if (it == owners_.end()) return Err(ErrorCode::kObjectNotFound);
    if (it->second != node) return Err(ErrorCode::kNotOwner);
    owners_.erase(it);
    return {};
  }
  // The master declares `node` dead: it forgets the node's keys.
  void Kill(const std::string& node) {
    std::lock_guard lock(mu_);
    dead_.insert(node);
    std::erase_if(owners_, [&](const auto& entry) { return entry.second == node; });
  }
  bool Alive(const std::string& node) {
    std::lock_guard lock(mu_);
    return !dead_.contains(node);
  }
  // As another node's put or remove at the master.
  void SetOwner(const std::string& key, const std::string& node) {
    std::lock_guard lock(mu_);
    if (node.empty()) {
      owners_.erase(key);
    } else {
      owners_[key] = node;
    }
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::string> owners_;  // guarded by mu_
  std::set<std::string> dead_;                 // guarded by mu_
};

// One node's view of the shared master.
class NodeDirectory : public OwnerDirectory {
 public:
  NodeDirectory(SharedMaster& master, std::string node) : master_(master), node_(std::move(node)) {}
  Result<void> Claim(const std::string& key) override {
    ++claims;
    if (claims_fail) return Err(*claims_fail);
    auto claimed = master_.Claim(key, node_);
    if (after_claim) after_claim();
    return claimed;
  }
  Result<void> Release(const std::string& key) override {
    auto released = master_.Release(key, node_);
    if (released && release_answers_lost) return Err(ErrorCode::kRpcTimeout);
    return released;
  }
  uint64_t registrations() const override { return registrations_count; }
  Result<std::string> OwnerOf(const std::string& key) override {
    std::string owner = master_.OwnerOf(key);
    if (owner.empty()) return Err(ErrorCode::kObjectNotFound);
    return owner;
  }
  // Claims fail with this code, not sent (kRpcTimeout: a master away).
  std::optional<ErrorCode> claims_fail;
  int claims = 0;  // claims made, sent or not
  // Runs after each claim is applied, before it is answered.
  std::function<void()> after_claim;
  // Releases are applied but answered kRpcTimeout, as when the answer is lost.
  bool release_answers_lost = false;
  uint64_t registrations_count = 0;
  Result<bool> OwnedHere(const std::string& key) override {
    if (master_fails) return Err(*master_fails);
    std::string owner = master_.OwnerOf(key);
    if (owner.empty()) return Err(ErrorCode::kObjectNotFound);
    return owner == node_;
  }
  // OwnedHere's error instead of an answer: kRpcTimeout, a master away;
  // kNotLeader, a standby; kInternalError.
  std::optional<ErrorCode> master_fails;
  Result<bool> RemovedSinceSent(const std::string& key, const std::string& sender) override {
    if (key == forgotten_at_shard_of) return Err(ErrorCode::kNodeNotFound);
    return master_.OwnerOf(key).empty() && master_.Alive(sender);
  }
  // RemovedSinceSent of this key answers kNodeNotFound, as a master shard
  // that forgot this node would.
  std::string forgotten_at_shard_of;
  Result<bool> UnownedWhileHere(const std::string& key) override {
    if (master_fails) return Err(*master_fails);
    if (!master_.Alive(node_)) return Err(ErrorCode::kNodeNotFound);
    return master_.OwnerOf(key).empty();
  }

 private:
  SharedMaster& master_;
  const std::string node_;
};

// ThriftPeerTransfer::Transfer in process. The master picks nodes in
// `pick_order`, leaving out those that refused unless
// `pick_ignores_refusals` (as a master whose usage figures still favour a
// node that refused might, if the sender did not name it); `before_hand_over` runs
// between the adopt and UpdateOwner (another node's write there, say).
class LoopbackPeers : public PeerTransfer {
 public:
  LoopbackPeers(SharedMaster& master, std::string self) : master_(master), self_(std::move(self)) {}

  Result<std::string> Transfer(const std::string& key, uint64_t size, uint64_t version,
                               const ObjectOptions& options, const ObjectSource& source,
                               const std::string& target, bool /*dram_only*/) override {
    ++transfers;
    auto pick = [&](const std::vector<std::string>& refused) -> Result<NodeRecord> {
      ++picks;
      if (!target.empty()) return NodeRecord{.node_id = target};
      for (const std::string& node : pick_order) {
        if (pick_ignores_refusals || std::ranges::find(refused, node) == refused.end()) {
          return NodeRecord{.node_id = node};
        }
      }
      return Err(ErrorCode::kNoAvailableHandle);
    };
    auto send = [&](const NodeRecord& to) -> SendResult {
      ++sends;
      auto at_target = [](ErrorCode error) { return std::unexpected(SendFailure{.error = error}); };
      if (unreachable.contains(to.node_id)) return at_target(ErrorCode::kRpcFail);
      TieredCacheBackend& peer = *nodes.at(to.node_id);
      auto handle = peer.PutStart(key, size, options, WriteMode::kAdopt,
                                  {.version = version, .sender = self_});
      if (!handle) return at_target(handle.error());
      std::string bytes(size, '\0');
      if (auto read = source.read(0, std::as_writable_bytes(std::span(bytes.data(), size)));
          !read) {
        (void)peer.PutRevoke(*handle);
        return std::unexpected(SendFailure{.error = ErrorCode::kTransferFail, .at_source = true});
      }
      if (auto chunk = peer.PutChunk(*handle, 0, bytes); !chunk) return at_target(chunk.error());
      if (auto ended = peer.PutEnd(*handle); !ended) return at_target(ended.error());
      if (adopt_answer_lost.contains(to.node_id)) return at_target(ErrorCode::kRpcTimeout);
      return {};
    };
    auto node = SendToNodeWithRoom(pick, send);
    if (!node) return Err(node.error());
    if (before_hand_over) before_hand_over();
    if (hand_over_unsettled || hand_over_applied_unsettled) {
      // The master could be asked neither to swap (or its answer was lost)
      // nor, after, who owns the key: the target's copy stays to be
      // confirmed or dropped by it.
      if (hand_over_applied_unsettled) (void)master_.UpdateOwner(key, self_, node->node_id);
      return Err(ErrorCode::kRpcTimeout);
    }
    if (auto swapped = master_.UpdateOwner(key, self_, node->node_id); !swapped) {
      (void)nodes.at(node->node_id)->AdoptAbort(key);
      return Err(swapped.error());
    }
    if (confirms_at_once) (void)nodes.at(node->node_id)->ConfirmAdoptSoon(key);
    return node->node_id;
  }

  std::map<std::string, TieredCacheBackend*> nodes;
  std::vector<std::string> pick_order;
  bool pick_ignores_refusals = false;
  // Nodes the master lists alive that this node cannot reach: a send to one
  // fails kRpcFail, as a refused connection does.
  std::set<std::string> unreachable;
  // Nodes that commit the adopted copy but whose answer to AdoptEnd is lost.
  std::set<std::string> adopt_answer_lost;
  std::function<void()> before_hand_over;
  bool hand_over_unsettled = false;  // UpdateOwner never reaches the master
  // UpdateOwner is applied, but neither its answer nor the master reach A.
  bool hand_over_applied_unsettled = false;
  bool confirms_at_once = true;  // tells the target after a swap (AdoptConfirm)
  int transfers = 0, picks = 0, sends = 0;

 private:
  SharedMaster& master_;
  const std::string self_;
};

BackendOptions Options() {
  BackendOptions options;
  options.kv_lease_ttl = Millis{0};
  options.adopt_confirm_delay = Millis{0};
  return options;
}

// A worker with one DRAM tier of `dram` bytes.
struct Node {
  Node(SharedMaster& master, const std::string& id, uint64_t dram,
       BackendOptions options = Options())
      : directory(master, id), peers(master, id) {
    auto gated =
        std::make_unique<testing::GatedReadTier>(std::move(DramTier::Create("dram", dram).value()));
    tier = gated.get();
    std::vector<std::unique_ptr<CacheTier>> tiers;
    tiers.push_back(std::move(gated));
    backend = std::make_unique<TieredCacheBackend>(std::move(tiers), &directory, options);
    backend->Recover();
    backend->set_peer_transfer(&peers);
  }
  // This node evicts to `targets`, the master offering them in that order.
  void EvictsTo(std::initializer_list<std::pair<std::string, Node*>> targets) {
    for (const auto& [id, node] : targets) {
      peers.nodes[id] = node->backend.get();
      peers.pick_order.push_back(id);
    }
  }

  NodeDirectory directory;
  LoopbackPeers peers;
  testing::GatedReadTier* tier = nullptr;  // the node's one tier, owned by `backend`
  std::unique_ptr<TieredCacheBackend> backend;
};

// The value of `key` at `backend`, or its error's name.
std::string Read(TieredCacheBackend& backend, const std::string& key) {
  auto read = backend.Get(key, 0, 0);
  return read ? std::string(read->data) : std::string(ToString(read.error()));
}

// The state of `key`'s object at `backend` ("adopted", "complete", ...), or
// its error's name.
std::string StateOf(TieredCacheBackend& backend, const std::string& key) {
  auto info = backend.Inspect(key);
  return info ? info->state : std::string(ToString(info.error()));
}

// ---------------------------------------------------------------------------
// Choosing the target

TEST(MoverHandOverTest, ANodeThatRefusesTheAdoptIsLeftOutAndTheNextOneTakesIt) {
  std::vector<std::vector<std::string>> excluded;
  std::vector<std::string> sent_to;
  auto node = SendToNodeWithRoom(
      [&](const std::vector<std::string>& refused) -> Result<NodeRecord> {
        excluded.push_back(refused);
        return NodeRecord{.node_id = refused.empty() ? "b" : "c"};
      },
      [&](const NodeRecord& to) -> SendResult {
        sent_to.push_back(to.node_id);
        if (to.node_id == "b") {
          return std::unexpected(SendFailure{.error = ErrorCode::kNoAvailableHandle});
        }
        return {};
      });
  ASSERT_TRUE(node);
  EXPECT_EQ(node->node_id, "c");
  EXPECT_EQ(sent_to, (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(excluded, (std::vector<std::vector<std::string>>{{}, {"b"}}));
}

TEST(MoverHandOverTest, RefusalsByTargetsAreNotNoRoomInTheCluster) {
  // Every node refuses: kMaxAdoptTargets are tried, and the answer is not
  // the master's "no node has room", which would drop the key.
  int sends = 0, picks = 0;
  auto every_node = SendToNodeWithRoom(
      [&](const std::vector<std::string>&) -> Result<NodeRecord> {
        return NodeRecord{.node_id = "n" + std::to_string(picks++)};
      },
      [&](const NodeRecord&) -> SendResult {
        ++sends;
        return std::unexpected(SendFailure{.error = ErrorCode::kNoAvailableHandle});
      });
  ASSERT_FALSE(every_node);
  EXPECT_EQ(every_node.error(), ErrorCode::kTransferFail);
  EXPECT_EQ(sends, kMaxAdoptTargets);

  // A master that names the refusing node again has no other to offer.
  sends = 0;
  auto same_node = SendToNodeWithRoom(
      [&](const std::vector<std::string>&) -> Result<NodeRecord> {
        return NodeRecord{.node_id = "b"};
      },
      [&](const NodeRecord&) -> SendResult {
        ++sends;
        return std::unexpected(SendFailure{.error = ErrorCode::kNoAvailableHandle});
      });
  ASSERT_FALSE(same_node);
  EXPECT_EQ(same_node.error(), ErrorCode::kTransferFail);
  EXPECT_EQ(sends, 1);

  // The master's own answer that no node has room is passed on.
  auto no_room = SendToNodeWithRoom(
      [&](const std::vector<std::string>&) -> Result<NodeRecord> {
        return Err(ErrorCode::kNoAvailableHandle);
      },
      [&](const NodeRecord&) -> SendResult { return {}; });
  ASSERT_FALSE(no_room);
  EXPECT_EQ(no_room.error(), ErrorCode::kNoAvailableHandle);
}

// The master lists B alive and, as nobody can write to it, keeps naming it
// the emptiest node. A send to B that fails at B's end (unreachable, too
// slow, or busy with the key) must not end the search, or every eviction in
// the cluster would stop at B.
TEST(MoverHandOverTest, ANodeThatFailsTheSendIsLeftOutAndTheNextOneTakesIt) {
  for (ErrorCode failure : {ErrorCode::kRpcFail, ErrorCode::kRpcTimeout,
                            ErrorCode::kObjectReplicaBusy, ErrorCode::kObjectAlreadyExists}) {
    SCOPED_TRACE(ToString(failure));
    std::vector<std::string> sent_to;
    auto node = SendToNodeWithRoom(
        [&](const std::vector<std::string>& refused) -> Result<NodeRecord> {
          return NodeRecord{.node_id = refused.empty() ? "b" : "c"};
        },
        [&](const NodeRecord& to) -> SendResult {
          sent_to.push_back(to.node_id);
          if (to.node_id == "b") return std::unexpected(SendFailure{.error = failure});
          return {};
        });
    ASSERT_TRUE(node) << ToString(node.error());
    EXPECT_EQ(node->node_id, "c");
    EXPECT_EQ(sent_to, (std::vector<std::string>{"b", "c"}));
  }
}

// The object cannot be read here: no other node would fare better.
TEST(MoverHandOverTest, AFailureToReadTheObjectEndsTheSearchForANode) {
  int sends = 0;
  auto node = SendToNodeWithRoom(
      [&](const std::vector<std::string>& refused) -> Result<NodeRecord> {
        return NodeRecord{.node_id = "n" + std::to_string(refused.size())};
      },
      [&](const NodeRecord&) -> SendResult {
        ++sends;
        return std::unexpected(SendFailure{.error = ErrorCode::kTransferFail, .at_source = true});
      });
  ASSERT_FALSE(node);
  EXPECT_EQ(node.error(), ErrorCode::kTransferFail);
  EXPECT_EQ(sends, 1);
}

// B is alive to the master, and the emptiest, but A cannot reach it: A's
// eviction moves the key to C instead of keeping it and failing the put
// that needed the room.
TEST(MoverHandOverTest, AnEvictionGoesPastANodeThatCannotBeReached) {
  SharedMaster master;
  Node a(master, "A", 32 * kKiB), b(master, "B", 1024 * kKiB), c(master, "C", 256 * kKiB);
  a.EvictsTo({{"B", &b}, {"C", &c}});
  a.peers.unreachable.insert("B");
  const std::string value(16 * kKiB, 'k');
  ASSERT_TRUE(a.backend->Put("k", value, {}));
  ASSERT_TRUE(a.backend->Put("other", std::string(16 * kKiB, 'o'), {}));
  // A is full: this put needs room that only a move can make.
  EXPECT_TRUE(a.backend->Put("new", std::string(16 * kKiB, 'n'), {}));
  EXPECT_EQ(a.backend->Stats().dropped, 0u);
  EXPECT_EQ(master.OwnerOf("k"), "C");
  c.backend->RunMaintenance();
  EXPECT_TRUE(Read(*c.backend, "k") == value) << "C does not serve k's value";
}

// B committed the adopted copy but its answer to AdoptEnd was lost, so A
// offered the key to C, which took it. B's copy was never the key's: it goes
// at B's own check instead of standing in for C's.
TEST(MoverHandOverTest, ACopyWhoseAdoptAnswerWasLostIsDroppedOnceAnotherNodeTookTheKey) {
  SharedMaster master;
  Node a(master, "A", 64 * kKiB), b(master, "B", 64 * kKiB), c(master, "C", 64 * kKiB);
  a.EvictsTo({{"B", &b}, {"C", &c}});
  a.peers.confirms_at_once = false;
  a.peers.adopt_answer_lost.insert("B");
  const std::string value(8 * kKiB, 'k');
  ASSERT_TRUE(a.backend->Put("k", value, {}));
  ASSERT_TRUE(a.backend->EvictTier("dram", 0.0));
  EXPECT_EQ(master.OwnerOf("k"), "C");
  EXPECT_EQ(StateOf(*b.backend, "k"), "adopted");
  b.backend->RunMaintenance();
  c.backend->RunMaintenance();
  EXPECT_EQ(StateOf(*b.backend, "k"), "OBJECT_NOT_FOUND");
  EXPECT_EQ(master.OwnerOf("k"), "C");
  EXPECT_TRUE(Read(*c.backend, "k") == value) << "C does not serve k's value";
}

// The master still ranks B first (its usage is a heartbeat old) though B is
// full: B refuses the adopt, and the key goes to C instead of leaving the
// cluster.
TEST(MoverHandOverTest, AnEvictionRefusedByAFullTargetMovesTheKeyToAnotherNode) {
  SharedMaster master;
  Node a(master, "A", 64 * kKiB), b(master, "B", 16 * kKiB), c(master, "C", 1024 * kKiB);
  ASSERT_TRUE(b.backend->Put("filler", std::string(16 * kKiB, 'f'), {}));
  a.EvictsTo({{"B", &b}, {"C", &c}});
  const std::string value(8 * kKiB, 'k');
  ASSERT_TRUE(a.backend->Put("k", value, {}));
  ASSERT_TRUE(a.backend->EvictTier("dram", 0.0));
  EXPECT_EQ(a.backend->Stats().dropped, 0u);
  EXPECT_EQ(master.OwnerOf("k"), "C");
  c.backend->RunMaintenance();  // C confirms its copy
  EXPECT_EQ(Read(*c.backend, "k"), value);
  EXPECT_EQ(Read(*b.backend, "filler"), std::string(16 * kKiB, 'f'));
}

// The only other node, B, is full though the master's usage figures say
// otherwise, so it refuses the object. Whether the master then offers B again
// (`offers_the_refusing_node_again`) or, told B refused, has no node to
// offer, the key stays readable here: a refusal is not "no node has room".
void ExpectAnEvictionBRefusesKeepsTheKey(bool offers_the_refusing_node_again) {
  SharedMaster master;
  Node a(master, "A", 64 * kKiB), b(master, "B", 16 * kKiB);
  ASSERT_TRUE(b.backend->Put("filler", std::string(16 * kKiB, 'f'), {}));
  a.EvictsTo({{"B", &b}});
  a.peers.pick_ignores_refusals = offers_the_refusing_node_again;
  const std::string value(8 * kKiB, 'k');
  ASSERT_TRUE(a.backend->Put("k", value, {}));
  a.backend->EvictTier("dram", 0.0);
  EXPECT_EQ(a.peers.sends, 1);
  EXPECT_EQ(a.backend->Stats().dropped, 0u);
  EXPECT_EQ(master.OwnerOf("k"), "A");
  EXPECT_EQ(Read(*a.backend, "k"), value);
}

// A's only tier is full and its bytes no longer read back (an SSD whose
// records fail their checksums): the object at the head of its recency
// order cannot be sent anywhere. It is lost already; kept, it would be the
// first victim of every eviction and refused by each, so A could never
// make room again. It is dropped, and the put that needed the room lands.
TEST(MoverHandOverTest, AnObjectWhoseBytesAreDamagedIsDroppedToMakeRoom) {
  SharedMaster master;
  Node a(master, "A", 32 * kKiB), b(master, "B", 64 * kKiB);
  a.EvictsTo({{"B", &b}});
  ASSERT_TRUE(a.backend->Put("damaged", std::string(16 * kKiB, 'd'), {}));
  ASSERT_TRUE(a.backend->Put("other", std::string(16 * kKiB, 'o'), {}));
  a.tier->Damage();
  EXPECT_TRUE(a.backend->Put("new", std::string(16 * kKiB, 'n'), {}));
  EXPECT_EQ(a.backend->Stats().dropped, 1u);
  EXPECT_EQ(master.OwnerOf("damaged"), "");
  EXPECT_EQ(a.backend->Get("damaged", 0, 0).error(), ErrorCode::kObjectNotFound);
  EXPECT_EQ(master.OwnerOf("new"), "A");
}

TEST(MoverHandOverTest, AnEvictionTheOfferedTargetRefusesKeepsTheKey) {
  ExpectAnEvictionBRefusesKeepsTheKey(/*offers_the_refusing_node_again=*/true);
}

TEST(MoverHandOverTest, AnEvictionEveryCandidateRefusesKeepsTheKey) {
  ExpectAnEvictionBRefusesKeepsTheKey(/*offers_the_refusing_node_again=*/false);
}

// A move is no use of an object: the copy at the new node keeps what is
// left of its soft pin, and a pin that ended stays ended. Before, the new
// node pinned every soft-pinned copy afresh for its own default TTL, so the
// coldest objects it received were the ones it could not evict.
TEST(MoverHandOverTest, AMovedCopyKeepsWhatIsLeftOfItsSoftPin) {
  SharedMaster master;
  BackendOptions short_pins = Options();
  short_pins.soft_pin_ttl = Millis(20);  // A's default; B keeps 30 minutes
  Node a(master, "A", 64 * kKiB, short_pins), b(master, "B", 64 * kKiB);
  a.EvictsTo({{"B", &b}});
  ASSERT_TRUE(a.backend->Put("ended", std::string(4 * kKiB, 'e'), {.soft_pin = true}));
  ASSERT_TRUE(a.backend->Put("held", std::string(4 * kKiB, 'h'),
                             {.soft_pin_ttl = Millis(600000), .soft_pin = true}));
  // Time, not an interleaving: "ended"'s 20 ms pin runs out.
  std::this_thread::sleep_for(Millis(60));
  ASSERT_FALSE(a.backend->Inspect("ended")->soft_pinned);
  ASSERT_TRUE(a.backend->EvictTier("dram", 0.0));
  ASSERT_EQ(master.OwnerOf("ended"), "B");
  ASSERT_EQ(master.OwnerOf("held"), "B");
  EXPECT_FALSE(b.backend->Inspect("ended")->soft_pinned);
  EXPECT_TRUE(b.backend->Inspect("held")->soft_pinned);
}

// ---------------------------------------------------------------------------
// Upserts after a hand-over

// A hands the key to B, and B removes it: an upsert that creates the key
// on A (a client finds no owner and picks A) succeeds.
TEST(MoverHandOverTest, AnUpsertCreatingAKeyOnceMovedAwaySucceeds) {
  SharedMaster master;
  Node a(master, "A", 64 * kKiB), b(master, "B", 64 * kKiB);
  a.EvictsTo({{"B", &b}});
  ASSERT_TRUE(a.backend->Put("k", std::string(4 * kKiB, '1'), {}));
  ASSERT_TRUE(a.backend->EvictTier("dram", 0.0));
  b.backend->RunMaintenance();
  ASSERT_EQ(master.OwnerOf("k"), "B");
  ASSERT_TRUE(b.backend->Remove("k", /*force=*/false));
  ASSERT_EQ(master.OwnerOf("k"), "");
  auto upserted = a.backend->Upsert("k", std::string(4 * kKiB, '3'), {});
  EXPECT_TRUE(upserted) << ToString(upserted.error());
  EXPECT_EQ(master.OwnerOf("k"), "A");
  EXPECT_EQ(Read(*a.backend, "k"), std::string(4 * kKiB, '3'));
  EXPECT_EQ(a.backend->MovedTo("k"), "");
}

// While B owns the key an upsert sent to A (a client that looked it up
// before the hand-over) is refused NOT_OWNER, so the client re-locates it,
// and leaves nothing on A.
TEST(MoverHandOverTest, AnUpsertAtTheOldNodeWhileTheNewOneOwnsTheKeyIsNotOwner) {
  SharedMaster master;
  Node a(master, "A", 64 * kKiB), b(master, "B", 64 * kKiB);
  a.EvictsTo({{"B", &b}});
  ASSERT_TRUE(a.backend->Put("k", std::string(4 * kKiB, '1'), {}));
  ASSERT_TRUE(a.backend->EvictTier("dram", 0.0));
  b.backend->RunMaintenance();
  auto upserted = a.backend->Upsert("k", std::string(4 * kKiB, '2'), {});
  ASSERT_FALSE(upserted);
  EXPECT_EQ(upserted.error(), ErrorCode::kNotOwner);
  EXPECT_EQ(master.OwnerOf("k"), "B");
  EXPECT_TRUE(a.backend->Keys().empty());
  EXPECT_EQ(a.backend->MovedTo("k"), "B");
  EXPECT_EQ(Read(*b.backend, "k"), std::string(4 * kKiB, '1'));
}

// A key handed to B and back to A: A owns it again and gives no hint that
// it lives on B.
TEST(MoverHandOverTest, AKeyThatComesBackByAdoptionForgetsWhereItWent) {
  SharedMaster master;
  Node a(master, "A", 64 * kKiB), b(master, "B", 64 * kKiB);
  a.EvictsTo({{"B", &b}});
  b.EvictsTo({{"A", &a}});
  ASSERT_TRUE(a.backend->Put("k", std::string(4 * kKiB, '1'), {}));
  ASSERT_TRUE(a.backend->EvictTier("dram", 0.0));
  b.backend->RunMaintenance();
  ASSERT_EQ(a.backend->MovedTo("k"), "B");
  ASSERT_TRUE(b.backend->EvictTier("dram", 0.0));
  a.backend->RunMaintenance();
  ASSERT_EQ(master.OwnerOf("k"), "A");
  EXPECT_EQ(a.backend->MovedTo("k"), "");
  EXPECT_EQ(Read(*a.backend, "k"), std::string(4 * kKiB, '1'));
}

// ---------------------------------------------------------------------------
// Hand-overs the master refuses

// The master names B, though A still holds a published copy (an earlier
// hand-over to B whose outcome A never learnt). When A tries to hand its
// copy over, the master refuses, and A erases it instead of serving it as
// if it were the owner, or sending it again on every eviction.
TEST(MoverHandOverTest, ACopyTheMasterSaysIsAnotherNodesIsErasedNotKept) {
  SharedMaster master;
  Node a(master, "A", 64 * kKiB), c(master, "C", 256 * kKiB);
  a.EvictsTo({{"C", &c}});
  ASSERT_TRUE(a.backend->Put("k", std::string(4 * kKiB, '1'), {}));
  master.SetOwner("k", "B");
  a.backend->EvictTier("dram", 0.0);
  EXPECT_EQ(Read(*a.backend, "k"), "OBJECT_NOT_FOUND");
  EXPECT_TRUE(a.backend->Keys().empty());
  EXPECT_EQ(a.backend->Stats().dropped, 0u);
  EXPECT_EQ(master.OwnerOf("k"), "B");
  EXPECT_EQ(Read(*c.backend, "k"), "OBJECT_NOT_FOUND");  // its adopted copy was aborted
  for (int i = 0; i < 3; ++i) a.backend->EvictTier("dram", 0.0);
  EXPECT_EQ(a.peers.transfers, 1);
}

// No node owns the key at the master: A keeps its copy, since an
// announcement of it may be on its way (after a master restart).
TEST(MoverHandOverTest, ACopyOfAKeyTheMasterDoesNotKnowIsKept) {
  SharedMaster master;
  Node a(master, "A", 64 * kKiB), c(master, "C", 256 * kKiB);
  a.EvictsTo({{"C", &c}});
  ASSERT_TRUE(a.backend->Put("k", std::string(4 * kKiB, '1'), {}));
  master.SetOwner("k", "");
  a.backend->EvictTier("dram", 0.0);
  EXPECT_EQ(Read(*a.backend, "k"), std::string(4 * kKiB, '1'));
  EXPECT_EQ(master.OwnerOf("k"), "");
  EXPECT_EQ(Read(*c.backend, "k"), "OBJECT_NOT_FOUND");
}

// ---------------------------------------------------------------------------
// Confirming a copy

// A hands "k" and "gone" to B, whose own check of adopted copies comes 30 s
// after the adopt; A tells B the swap succeeded when `sender_confirms`.
struct MovedToALateChecker {
  explicit MovedToALateChecker(bool sender_confirms) {
    a.EvictsTo({{"B", &b}});
    a.peers.confirms_at_once = sender_confirms;
    EXPECT_TRUE(a.backend->Put("k", value, {}));
    EXPECT_TRUE(a.backend->Put("gone", value, {}));
    EXPECT_TRUE(a.backend->EvictTier("dram", 0.0));
    EXPECT_EQ(master.OwnerOf("k"), "B");
    b.backend->RunMaintenance();
  }
  static BackendOptions LateCheck() {
    BackendOptions options = Options();
    options.adopt_confirm_delay = Millis{30000};
    return options;
  }
  const std::string value = std::string(4 * kKiB, '1');
  SharedMaster master;
  Node a{master, "A", 64 * kKiB};
  Node b{master, "B", 64 * kKiB, LateCheck()};
};

// B's next pass confirms the copy, long before its own check, so an upsert
// or a remove of the key is not refused OBJECT_REPLICA_BUSY until then.
TEST(MoverHandOverTest, ANewOwnerTakesWritesOnceTheSenderConfirms) {
  MovedToALateChecker moved(/*sender_confirms=*/true);
  auto upserted = moved.b.backend->Upsert("k", std::string(4 * kKiB, '2'), {});
  ASSERT_TRUE(upserted) << ToString(upserted.error());
  EXPECT_EQ(Read(*moved.b.backend, "k"), std::string(4 * kKiB, '2'));
  auto removed = moved.b.backend->Remove("gone", /*force=*/false);
  ASSERT_TRUE(removed) << ToString(removed.error());
  EXPECT_EQ(moved.master.OwnerOf("gone"), "");
}

// Without the word from A (a sender of an older release), B keeps refusing
// until its own check.
TEST(MoverHandOverTest, ANewOwnerNotToldRefusesWritesUntilItsOwnCheck) {
  MovedToALateChecker moved(/*sender_confirms=*/false);
  auto upserted = moved.b.backend->Upsert("k", std::string(4 * kKiB, '2'), {});
  ASSERT_FALSE(upserted);
  EXPECT_EQ(upserted.error(), ErrorCode::kObjectReplicaBusy);
  EXPECT_EQ(Read(*moved.b.backend, "k"), moved.value);
}

// Told twice, or about a key it holds no adopted copy of, B changes nothing.
TEST(MoverHandOverTest, AConfirmationOfNoAdoptedCopyIsObjectNotFound) {
  SharedMaster master;
  Node b(master, "B", 64 * kKiB);
  ASSERT_TRUE(b.backend->Put("own", std::string(4 * kKiB, '1'), {}));
  EXPECT_EQ(b.backend->ConfirmAdoptSoon("own").error(), ErrorCode::kObjectNotFound);
  EXPECT_EQ(b.backend->ConfirmAdoptSoon("absent").error(), ErrorCode::kObjectNotFound);
  EXPECT_EQ(b.backend->ConfirmAdoptSoon("").error(), ErrorCode::kInvalidKey);
  EXPECT_EQ(Read(*b.backend, "own"), std::string(4 * kKiB, '1'));
}

// ---------------------------------------------------------------------------
// Copies the master never came to name

// A has handed "k" to B, but could learn the outcome neither from
// UpdateOwner's answer nor by asking the master: A keeps its copy and B its
// adopted one. The master applied the swap when `applied`.
struct UnsettledHandOver {
  explicit UnsettledHandOver(bool applied) {
    a.EvictsTo({{"B", &b}});
    (applied ? a.peers.hand_over_applied_unsettled : a.peers.hand_over_unsettled) = true;
    EXPECT_TRUE(a.backend->Put("k", value, {}));
    a.backend->EvictTier("dram", 0.0);
  }
  const std::string value = std::string(4 * kKiB, '1');
  SharedMaster master;
  Node a{master, "A", 64 * kKiB};
  Node b{master, "B", 64 * kKiB};
};

// The key is then removed (at A, its owner). When B checks its copy it must
// not claim the key back: the sender lives, so no owner means removed, not
// lost.
TEST(MoverHandOverTest, AnUnsettledCopyOfAKeyRemovedSinceIsDroppedNotRevived) {
  UnsettledHandOver moved(/*applied=*/false);
  ASSERT_EQ(Read(*moved.a.backend, "k"), moved.value);
  ASSERT_TRUE(moved.a.backend->Remove("k", /*force=*/false));
  ASSERT_EQ(moved.master.OwnerOf("k"), "");
  moved.b.backend->RunMaintenance();
  EXPECT_EQ(moved.master.OwnerOf("k"), "");
  EXPECT_EQ(Read(*moved.b.backend, "k"), "OBJECT_NOT_FOUND");
  EXPECT_TRUE(moved.b.backend->Keys().empty());
}

// A dies and the master forgets its keys: B's copy is all that is left of
// the key, and B claims it.
TEST(MoverHandOverTest, AnUnsettledCopyWhoseSenderDiedIsClaimed) {
  UnsettledHandOver moved(/*applied=*/false);
  moved.master.Kill("A");
  moved.b.backend->RunMaintenance();
  EXPECT_EQ(moved.master.OwnerOf("k"), "B");
  EXPECT_EQ(Read(*moved.b.backend, "k"), moved.value);
}

// The hand-over did not happen (A still owns the key): B drops its copy,
// and A keeps its own for good.
TEST(MoverHandOverTest, AnUnsettledHandOverTheMasterDidNotApplyLeavesTheKeyWithTheSender) {
  UnsettledHandOver moved(/*applied=*/false);
  // B waits a few delays for a swap that may still be on its way, then
  // drops its copy.
  for (int pass = 0; pass <= Mover::kMaxSenderWaits; ++pass) {
    EXPECT_EQ(StateOf(*moved.b.backend, "k"), "adopted") << "pass " << pass;
    moved.b.backend->RunMaintenance();
  }
  moved.a.backend->RunMaintenance();
  moved.a.backend->RunMaintenance();
  EXPECT_EQ(moved.master.OwnerOf("k"), "A");
  EXPECT_EQ(Read(*moved.b.backend, "k"), "OBJECT_NOT_FOUND");
  EXPECT_EQ(Read(*moved.a.backend, "k"), moved.value);
  EXPECT_EQ(moved.a.backend->Stats().moved_out, 0u);
}

// The master applied A's swap. A keeps serving its copy while the master does
// not answer (away, a standby, a failure); once it answers again, A's next pass finds B the owner
// and erases its copy, which would otherwise serve the old value after B took an upsert of the key.
TEST(MoverHandOverTest, ASenderErasesItsCopyOnceItLearnsTheUnsettledSwapWasApplied) {
  UnsettledHandOver moved(/*applied=*/true);
  ASSERT_EQ(moved.master.OwnerOf("k"), "B");
  for (ErrorCode no_answer :
       {ErrorCode::kRpcTimeout, ErrorCode::kNotLeader, ErrorCode::kInternalError}) {
    moved.a.directory.master_fails = no_answer;
    moved.a.backend->RunMaintenance();
    EXPECT_EQ(Read(*moved.a.backend, "k"), moved.value)
        << "dropped on " << ToString(no_answer) << ", before the master named B";
  }
  moved.b.backend->RunMaintenance();  // B confirms its copy
  ASSERT_TRUE(moved.b.backend->Upsert("k", std::string(4 * kKiB, '2'), {}));
  moved.a.directory.master_fails.reset();
  moved.a.backend->RunMaintenance();
  EXPECT_EQ(Read(*moved.a.backend, "k"), "OBJECT_NOT_FOUND");
  EXPECT_TRUE(moved.a.backend->Keys().empty());
  EXPECT_EQ(moved.a.backend->Stats().moved_out, 1u);
  EXPECT_EQ(Read(*moved.b.backend, "k"), std::string(4 * kKiB, '2'));
}

// B's first check of its copy comes before A's swap reached the master (a
// slow master, a short --adopt-confirm-delay-ms): A still owns the key.
// B waits another delay instead of dropping its copy, so when the swap
// lands the master does not name a node without the key.
TEST(MoverHandOverTest, ACopyCheckedBeforeTheSendersSwapLandsWaitsForIt) {
  SharedMaster master;
  Node a(master, "A", 64 * kKiB), b(master, "B", 64 * kKiB);
  a.EvictsTo({{"B", &b}});
  a.peers.confirms_at_once = false;
  a.peers.before_hand_over = [&] { b.backend->RunMaintenance(); };
  const std::string value(4 * kKiB, '1');
  ASSERT_TRUE(a.backend->Put("k", value, {}));
  ASSERT_TRUE(a.backend->EvictTier("dram", 0.0));
  ASSERT_EQ(master.OwnerOf("k"), "B");
  b.backend->RunMaintenance();  // its next check, after the swap
  EXPECT_EQ(Read(*b.backend, "k"), value);
  EXPECT_EQ(master.OwnerOf("k"), "B");
  EXPECT_EQ(StateOf(*b.backend, "k"), "complete");
}

// A moved k1, k2 and k3 to B without telling B (no AdoptConfirm): B holds
// three adopted copies for its own checks to confirm.
struct ThreeAdoptedAtB {
  ThreeAdoptedAtB() {
    a.EvictsTo({{"B", &b}});
    a.peers.confirms_at_once = false;
    for (const char* key : {"k1", "k2", "k3"}) {
      EXPECT_TRUE(a.backend->Put(key, std::string(4 * kKiB, key[1]), {}));
    }
    EXPECT_TRUE(a.backend->EvictTier("dram", 0.0));
  }
  SharedMaster master;
  Node a{master, "A", 64 * kKiB};
  Node b{master, "B", 64 * kKiB};
};

// The master away: one pass asks about one adopted copy, not each in turn
// (each would wait out a timeout and hold up the other maintenance), and
// the next pass confirms them all.
TEST(MoverHandOverTest, AMasterThatDoesNotAnswerIsAskedAboutOneAdoptedCopyAPass) {
  ThreeAdoptedAtB moved;
  Node& b = moved.b;
  b.directory.claims_fail = ErrorCode::kRpcTimeout;
  b.backend->RunMaintenance();
  EXPECT_EQ(b.directory.claims, 1);
  b.directory.claims_fail.reset();
  b.backend->RunMaintenance();
  for (const char* key : {"k1", "k2", "k3"}) {
    EXPECT_EQ(StateOf(*b.backend, key), "complete") << key;
  }
}

// One master shard forgot B and cannot tell about its keys: that says
// nothing of the keys of other shards, whose copies are confirmed on the
// same pass.
TEST(MoverHandOverTest, AShardThatForgotTheNodeHoldsUpOnlyItsOwnKeysConfirmations) {
  ThreeAdoptedAtB moved;
  Node& b = moved.b;
  b.directory.forgotten_at_shard_of = "k1";
  b.backend->RunMaintenance();
  EXPECT_EQ(StateOf(*b.backend, "k1"), "adopted");
  EXPECT_EQ(StateOf(*b.backend, "k2"), "complete");
  EXPECT_EQ(StateOf(*b.backend, "k3"), "complete");
}

// A remove whose release answer is lost claims the kept copy again; a
// registration lands between that claim and its answer and releases the
// copy (on its way out, it is not held). The copy is claimed again on the
// next pass instead of being put back as one the master does not know.
TEST(MoverHandOverTest, AKeptCopyReleasedByARegistrationDuringItsClaimIsClaimedAgain) {
  SharedMaster master;
  Node a(master, "A", 64 * kKiB);
  ASSERT_TRUE(a.backend->Put("k", "value", {}));
  a.directory.release_answers_lost = true;
  a.directory.after_claim = [&] {
    ++a.directory.registrations_count;
    master.SetOwner("k", "");  // the registration's release of a key not held
    a.directory.after_claim = nullptr;
  };
  EXPECT_EQ(a.backend->Remove("k", /*force=*/false).error(), ErrorCode::kRpcTimeout);
  ASSERT_EQ(master.OwnerOf("k"), "");
  a.backend->RunMaintenance();
  EXPECT_EQ(master.OwnerOf("k"), "A");
  EXPECT_EQ(Read(*a.backend, "k"), "value");
}

// The swap was applied though A could not learn it; B confirmed, and the
// key was then removed at B. When A can ask again, no node owns the key
// while the master knew A all along: A's copy is not the key's and goes,
// rather than serving (or announcing) the removed value.
TEST(MoverHandOverTest, AnUnsettledCopyOfAKeyRemovedAtTheNewOwnerIsErased) {
  UnsettledHandOver moved(/*applied=*/true);
  moved.a.directory.master_fails = ErrorCode::kRpcTimeout;
  moved.a.backend->RunMaintenance();  // A cannot ask: keeps its copy
  moved.b.backend->RunMaintenance();  // B confirms its copy
  ASSERT_TRUE(moved.b.backend->Remove("k", /*force=*/false));
  ASSERT_EQ(moved.master.OwnerOf("k"), "");
  moved.a.directory.master_fails.reset();
  moved.a.backend->RunMaintenance();
  EXPECT_EQ(Read(*moved.a.backend, "k"), "OBJECT_NOT_FOUND");
  EXPECT_TRUE(moved.a.backend->Keys().empty());
  EXPECT_EQ(moved.master.OwnerOf("k"), "");
}

// The swap was not applied, and the master declared A dead, forgetting its
// keys: no node owns the key, but the master no longer knows A, so A keeps
// its copy until B, told the sender died, claims its own; then A's goes.
TEST(MoverHandOverTest, AnUnsettledCopyIsKeptWhileTheMasterDoesNotKnowTheSender) {
  UnsettledHandOver moved(/*applied=*/false);
  moved.master.Kill("A");
  moved.a.backend->RunMaintenance();
  EXPECT_EQ(Read(*moved.a.backend, "k"), moved.value);
  moved.b.backend->RunMaintenance();
  ASSERT_EQ(moved.master.OwnerOf("k"), "B");
  moved.a.backend->RunMaintenance();
  EXPECT_EQ(Read(*moved.a.backend, "k"), "OBJECT_NOT_FOUND");
  EXPECT_EQ(Read(*moved.b.backend, "k"), moved.value);
}

}  // namespace
}  // namespace mooncake
