// Client::Batch*: one result per input position, in input order. Reads,
// probes and removes fan out to each key's owner (one master round trip
// locates them all); writes go to one target chosen for the whole batch
// (BatchPut) or to each key's owner (BatchUpsert). Keys a batch request
// cannot settle (moved, racing a write, a full node the client chose) go
// through the single-key call, which follows them. See client_batch.h.

#include "client/client_batch.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "client/client_chunked_io.h"
#include "client/client_impl.h"
#include "client/client_retry.h"
#include "client/client_writes.h"
#include "common/wake_word.h"
#include "thrift/value_calls.h"

namespace mooncake {

namespace {

// What the threads of one RunParallel call share. Helpers' copies of the
// drain keep it alive: one may start after the caller returned, find no
// task left, and touch nothing else.
struct ParallelRun {
  explicit ParallelRun(std::vector<std::function<void()>>& t) : tasks(t), count(t.size()) {}
  std::vector<std::function<void()>>& tasks;  // read only while a task is left
  const size_t count;
  std::atomic<size_t> next{0};
  std::mutex mu;
  size_t done = 0;             // guarded by mu
  std::exception_ptr failure;  // the first task's exception; guarded by mu
  // Set once, by whichever thread finishes the last task; the caller waits
  // on it (yielding first, like CallCombiner's callers: a helper's part
  // is one round trip).
  WakeWord all_done;

  // Runs tasks until none is left to take.
  void Drain() {
    size_t ran = 0;
    std::exception_ptr thrown;
    for (size_t i = next++; i < count; i = next++) {
      try {
        tasks[i]();
      } catch (...) {
        if (!thrown) thrown = std::current_exception();
      }
      ++ran;
    }
    if (ran == 0) return;
    bool last = false;
    {
      std::lock_guard lock(mu);
      if (thrown && !failure) failure = thrown;
      done += ran;
      last = done == count;
    }
    if (last) all_done.Set(1);
  }
};

}  // namespace

void RunParallel(HelperThreads& helpers, std::vector<std::function<void()>>& tasks) {
  if (tasks.size() == 1) {
    tasks[0]();
    return;
  }
  if (tasks.empty()) return;
  auto run = std::make_shared<ParallelRun>(tasks);
  size_t offered = std::min(tasks.size(), kMaxBatchParallelism) - 1;
  // The helpers' copies may outlive this call, `tasks` must not be left to
  // them: whatever happens while offering, this thread drains and waits.
  try {
    for (size_t h = 0; h < offered; ++h) helpers.Run([run] { run->Drain(); });
  } catch (...) {
    // Fewer helpers (no memory for another task): this thread does the rest.
  }
  run->Drain();
  run->all_done.Wait();
  std::exception_ptr failure;
  {
    std::lock_guard lock(run->mu);
    failure = run->failure;
  }
  // As if the tasks had run here: a batch never reports what it did not do.
  if (failure) std::rethrow_exception(failure);
}

std::vector<OwnerGroup> SliceGroups(const std::map<std::string, OwnerGroup>& groups,
                                    const std::vector<std::string>& keys) {
  std::vector<OwnerGroup> requests;
  for (const auto& [node_id, group] : groups) {
    for (auto& slice : SliceIndices(group.indices, keys, kMaxBatchKeyBytes, kMaxBatchCount)) {
      requests.push_back(OwnerGroup{group.owner, std::move(slice)});
    }
  }
  return requests;
}

std::vector<std::string> KeysAt(const std::vector<std::string>& keys,
                                const std::vector<size_t>& slice) {
  std::vector<std::string> out;
  out.reserve(slice.size());
  for (size_t i : slice) out.push_back(keys[i]);
  return out;
}

std::vector<std::vector<size_t>> PlanPutRequests(std::span<const ValueView> items,
                                                 const std::vector<size_t>& positions,
                                                 std::vector<size_t>& large) {
  std::vector<size_t> small;
  small.reserve(positions.size());
  for (size_t i : positions) {
    if (items[i].value.size() > kRpcChunkBytes) {
      large.push_back(i);
    } else {
      small.push_back(i);
    }
  }
  return SliceIndices(
      small, [&items](size_t i) { return items[i].key.size() + items[i].value.size(); },
      kMaxBatchPutBytes, kMaxBatchCount);
}

std::vector<size_t> WritablePositions(std::span<const ValueView> items,
                                      std::vector<Result<void>>& results) {
  std::vector<size_t> positions;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!ValidateKey(items[i].key)) {
      results[i] = Err(ErrorCode::kInvalidKey);
    } else if (items[i].value.empty()) {
      results[i] = Err(ErrorCode::kInvalidParams);
    } else {
      positions.push_back(i);
    }
  }
  return positions;
}

uint64_t TotalBytes(std::span<const ValueView> items, const std::vector<size_t>& positions) {
  uint64_t total = 0;
  for (size_t i : positions) total += items[i].value.size();
  return total;
}

std::vector<ValueView> ViewsOf(const std::vector<std::pair<std::string, std::string>>& items) {
  std::vector<ValueView> views;
  views.reserve(items.size());
  for (const auto& [key, value] : items) views.push_back({key, value});
  return views;
}

namespace {

// Where a batch finds its keys' owners.
enum class Owners {
  kMaster,  // always ask the master (one round trip for the batch)
  // Keys the owner cache knows go straight to that node; the master is asked
  // only for the rest. For reads, whose per-key path (ReadValue) follows a
  // key the remembered node no longer has, so a stale entry costs one extra
  // call, never a wrong answer.
  kCacheFirst,
};

// One task per (owner, slice of its keys). `per_slice(owner, slice)` fills
// the results of the slice's positions; slices never share a position.
template <typename R, typename PerSlice>
void FanOut(ClientRouter& router, HelperThreads& helpers, const std::vector<std::string>& keys,
            std::vector<R>& results, const std::function<void(size_t, ErrorCode)>& on_missing,
            PerSlice&& per_slice, Owners owners = Owners::kMaster) {
  std::vector<size_t> todo = ValidIndices(keys, results);
  if (todo.empty()) return;
  std::map<std::string, OwnerGroup> cached;
  if (owners == Owners::kCacheFirst) {
    std::vector<size_t> uncached;
    cached = router.GroupCached(keys, todo, uncached);
    todo = std::move(uncached);
  }
  std::map<std::string, OwnerGroup> located;
  if (!todo.empty()) {
    std::vector<std::pair<size_t, ErrorCode>> missing;
    auto groups = router.GroupByOwner(keys, todo, missing);
    if (!groups) {
      for (size_t i : todo) results[i] = Err(groups.error());
    } else {
      for (const auto& [i, code] : missing) on_missing(i, code);
      located = std::move(*groups);
    }
  }
  std::vector<std::function<void()>> tasks;
  for (const auto* groups : {&cached, &located}) {
    for (auto& request : SliceGroups(*groups, keys)) {
      tasks.emplace_back([&per_slice, request = std::move(request)] {
        per_slice(request.owner, request.indices);
      });
    }
  }
  if (!tasks.empty()) RunParallel(helpers, tasks);
}

// Adds tasks that write items[positions] to `target`: bounded BatchPut (or
// BatchUpsert) requests, and values too big for one request one by one.
// Keys written are remembered as `target`'s, as the single Put does, so
// later reads of them skip the master. Tasks hold references to router,
// items, config and results: run them before those go away.
void AddWriteTasks(ClientRouter& router, const Owner& target, std::span<const ValueView> items,
                   const std::vector<size_t>& positions, const rpc::ReplicateConfig& config,
                   bool upsert, std::vector<Result<void>>& results,
                   std::vector<std::function<void()>>& tasks) {
  std::vector<size_t> large;
  for (auto& request : PlanPutRequests(items, positions, large)) {
    tasks.emplace_back(
        [&router, items, &config, &results, target, upsert, request = std::move(request)] {
          // Views of the caller's items: the values go from its memory to
          // the socket, with no copy into PutItems.
          std::vector<ValueView> batch(request.size());
          for (size_t j = 0; j < request.size(); ++j) batch[j] = items[request[j]];
          std::vector<rpc::ErrorCode::type> codes;
          auto call = target.channel->Call([&](rpc::WorkerServiceClient& c) {
            SendBatchValueCall(c, upsert, batch, config);
            if (upsert) {
              c.recv_BatchUpsert(codes);
            } else {
              c.recv_BatchPut(codes);
            }
          });
          for (size_t j = 0; j < request.size(); ++j) {
            if (!call || codes.size() != request.size()) {
              results[request[j]] = Err(call ? ErrorCode::kInternalError : call.error());
            } else {
              results[request[j]] = ToResult(codes[j]);
              if (results[request[j]]) {
                router.RememberOwner(items[request[j]].key, target.node_id);
              }
            }
          }
        });
  }
  for (size_t i : large) {
    tasks.emplace_back([&router, items, &config, &results, target, upsert, i] {
      std::string key(items[i].key);
      std::string_view value = items[i].value;
      results[i] =
          upsert ? UpsertValue(target, key, value, config) : PutValue(target, key, value, config);
      if (results[i]) router.RememberOwner(key, target.node_id);
    });
  }
}

// After a BatchGet call to `owner` failed (`failure`) for keys[slice]: a
// transport failure may be a reply too large for one frame, and single reads
// are chunked, so they are tried (`read_one(i)`). If one fails in transport
// too, the node is down. The owner cache may have sent a key there that has
// since moved, or been removed and put elsewhere: the master is asked, and
// only a key it names that node for (at that address) gets the failure
// without waiting for the node again; the others are read where they are.
template <typename R, typename ReadOne>
void ReadSinglyAfterFailedBatch(ClientRouter& router, const Owner& owner,
                                const std::vector<std::string>& keys, ErrorCode failure,
                                const std::vector<size_t>& slice, std::vector<R>& results,
                                ReadOne&& read_one) {
  bool node_down = failure != ErrorCode::kRpcFail;
  for (size_t i : slice) {
    if (node_down) {
      auto elsewhere = router.RelocateUnreachable(keys[i], owner, failure);
      if (!elsewhere) {
        const bool gone = elsewhere.error() == ErrorCode::kObjectNotFound;
        results[i] = Err(gone ? ErrorCode::kObjectNotFound : failure);
        continue;
      }
    }
    results[i] = read_one(i);
    if (!node_down && !results[i] &&
        (results[i].error() == ErrorCode::kRpcFail ||
         results[i].error() == ErrorCode::kRpcTimeout)) {
      node_down = true;
      failure = results[i].error();
    }
  }
}

// One BatchGet call to `owner` for keys[slice]: one reply per key, or the
// call's failure (kInternalError for a reply of the wrong length).
Result<void> CallBatchGet(const Owner& owner, const std::vector<std::string>& keys,
                          const std::vector<size_t>& slice, std::vector<rpc::GetResult>& replies) {
  // Slices hold increasing positions, so one as long as the batch is the
  // whole batch (one owner, every key valid): send the keys as they are
  // instead of a copy.
  std::vector<std::string> subset;
  if (slice.size() != keys.size()) subset = KeysAt(keys, slice);
  const std::vector<std::string>& sent = slice.size() == keys.size() ? keys : subset;
  auto call = owner.channel->Call([&](rpc::WorkerServiceClient& c) { c.BatchGet(replies, sent); });
  if (call && replies.size() != slice.size()) return Err(ErrorCode::kInternalError);
  return call;
}

// A reply that holds its whole value.
bool IsWholeValue(const rpc::GetResult& reply) {
  return reply.code == rpc::ErrorCode::OK && reply.total_size >= 0 &&
         reply.data.size() == static_cast<uint64_t>(reply.total_size);
}

// BatchGet and BatchGetInto: one BatchGet call per owner slice (owners the
// cache remembers first). A failed call falls back to single reads
// (`read_one(i)`); each reply becomes a result through
// `from_reply(i, owner, reply)`, which completes values larger than the
// reply's one chunk and follows keys that moved.
template <typename R, typename ReadOne, typename FromReply>
void FanOutBatchGet(ClientRouter& router, HelperThreads& helpers,
                    const std::vector<std::string>& keys, std::vector<R>& results,
                    ReadOne&& read_one, FromReply&& from_reply) {
  auto on_missing = [&](size_t i, ErrorCode code) { results[i] = Err(code); };
  FanOut(
      router, helpers, keys, results, on_missing,
      [&](const Owner& owner, const std::vector<size_t>& slice) {
        std::vector<rpc::GetResult> replies;
        auto call = CallBatchGet(owner, keys, slice, replies);
        if (!call) {
          ReadSinglyAfterFailedBatch(router, owner, keys, call.error(), slice, results, read_one);
          return;
        }
        for (size_t j = 0; j < slice.size(); ++j) {
          results[slice[j]] = from_reply(slice[j], owner, replies[j]);
        }
      },
      Owners::kCacheFirst);
}

}  // namespace

std::vector<Result<ObjectValue>> Client::BatchGet(const std::vector<std::string>& keys) {
  std::vector<Result<ObjectValue>> results(keys.size());
  FanOutBatchGet(
      impl_->router, impl_->batch_helpers, keys, results,
      [&](size_t i) { return GetAlone(keys[i]); },
      [&](size_t i, const Owner& owner, rpc::GetResult& reply) -> Result<ObjectValue> {
        // The common case, a whole value in the reply, takes the reply's
        // bytes as they are; ReadValue would copy them into a new string.
        if (IsWholeValue(reply)) return ObjectValue{std::move(reply.data), reply.version};
        return ReadValue(impl_->router, impl_->rdma.get(), keys[i], owner, &reply);
      });
  return results;
}

std::vector<std::optional<Result<ObjectValue>>> GetTogether(
    ClientRouter& router, RdmaReads* rdma, std::span<const CombinedGet* const> gets) {
  std::vector<std::optional<Result<ObjectValue>>> results;
  results.reserve(gets.size());
  const Owner& owner = *gets.front()->owner;
  if (gets.size() == 1) {
    results.emplace_back(ReadValue(router, rdma, std::string(gets.front()->key), owner, nullptr));
    return results;
  }
  std::vector<std::string> keys;
  keys.reserve(gets.size());
  for (const CombinedGet* get : gets) keys.emplace_back(get->key);
  std::vector<size_t> all(keys.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  std::vector<rpc::GetResult> replies;
  results.resize(keys.size());
  // A failed call (say, to an address the node has left) settles nothing.
  if (!CallBatchGet(owner, keys, all, replies)) return results;
  // Only values a reply holds whole are settled here. Anything else (the
  // key moved or is being written, a large object, an error) its caller
  // reads alone, which follows it.
  for (size_t i = 0; i < keys.size(); ++i) {
    if (IsWholeValue(replies[i])) {
      results[i] = ObjectValue{std::move(replies[i].data), replies[i].version};
    }
  }
  return results;
}

std::vector<Result<uint64_t>> Client::BatchGetInto(const std::vector<std::string>& keys,
                                                   const std::vector<std::span<char>>& buffers) {
  std::vector<Result<uint64_t>> results(keys.size(), uint64_t{0});
  if (buffers.size() != keys.size()) {
    for (auto& r : results) r = Err(ErrorCode::kInvalidParams);
    return results;
  }
  FanOutBatchGet(
      impl_->router, impl_->batch_helpers, keys, results,
      [&](size_t i) { return GetInto(keys[i], buffers[i]); },
      [&](size_t i, const Owner& owner, rpc::GetResult& reply) -> Result<uint64_t> {
        uint64_t total = 0;
        ReadSink sink = SpanSink(buffers[i], total);
        auto done = ReadChunked(impl_->router, keys[i], owner, sink, {}, impl_->rdma.get(), &reply);
        return done ? Result<uint64_t>(done->total) : Err(done.error());
      });
  return results;
}

std::vector<Result<bool>> Client::BatchExist(const std::vector<std::string>& keys, bool prefetch) {
  const std::string& requester = impl_->router.config().local_node;
  std::vector<Result<bool>> results(keys.size(), false);
  auto on_missing = [&](size_t i, ErrorCode code) {
    results[i] = code == ErrorCode::kObjectNotFound ? Result<bool>(false) : Err(code);
  };
  FanOut(impl_->router, impl_->batch_helpers, keys, results, on_missing,
         [&](const Owner& owner, const std::vector<size_t>& slice) {
           std::vector<int32_t> answers;
           auto call = owner.channel->Call([&](rpc::WorkerServiceClient& c) {
             c.BatchExist(answers, KeysAt(keys, slice), prefetch, requester);
           });
           for (size_t j = 0; j < slice.size(); ++j) {
             size_t i = slice[j];
             if (!call || answers.size() != slice.size()) {
               results[i] = Err(call ? ErrorCode::kInternalError : call.error());
             } else if (answers[j] == 1) {
               results[i] = true;
             } else if (answers[j] == 0 || IsMoved(ErrorCodeFromInt(answers[j])) ||
                        ErrorCodeFromInt(answers[j]) == ErrorCode::kReplicaIsNotReady) {
               // Moved or racing a write: the single path re-asks the master.
               results[i] = Exist(keys[i], prefetch);
             } else {
               results[i] = Err(ErrorCodeFromInt(answers[j]));
             }
           }
         });
  return results;
}

std::vector<Result<void>> Client::BatchRemove(const std::vector<std::string>& keys, bool force) {
  std::vector<Result<void>> results(keys.size());
  auto on_missing = [&](size_t i, ErrorCode code) { results[i] = Err(code); };
  FanOut(impl_->router, impl_->batch_helpers, keys, results, on_missing,
         [&](const Owner& owner, const std::vector<size_t>& slice) {
           std::vector<rpc::ErrorCode::type> codes;
           auto call = owner.channel->Call([&](rpc::WorkerServiceClient& c) {
             c.BatchRemove(codes, KeysAt(keys, slice), force);
           });
           for (size_t j = 0; j < slice.size(); ++j) {
             size_t i = slice[j];
             if (!call || codes.size() != slice.size()) {
               results[i] = Err(call ? ErrorCode::kInternalError : call.error());
             } else if (IsMoved(FromRpc(codes[j])) ||
                        FromRpc(codes[j]) == ErrorCode::kReplicaIsNotReady) {
               results[i] = Remove(keys[i], force);
             } else {
               results[i] = ToResult(codes[j]);
             }
           }
         });
  // Grouping remembered the owners; the removed keys have none now. Forgetting
  // a key that survived costs at most one master round trip later.
  for (const auto& key : keys) {
    impl_->router.ForgetOwner(key);
    impl_->hot_cache.Erase(key);
  }
  return results;
}

std::vector<Result<void>> Client::BatchPut(
    const std::vector<std::pair<std::string, std::string>>& items, const PutOptions& options) {
  return BatchPutViews(ViewsOf(items), options);
}

std::vector<Result<void>> Client::BatchPutViews(std::span<const ValueView> items,
                                                const PutOptions& options) {
  std::vector<Result<void>> results(items.size());
  std::vector<size_t> positions = WritablePositions(items, results);
  if (positions.empty()) return results;
  // One placement for the whole batch: one master round trip at most, and
  // one node takes the batch.
  bool explicit_choice = false;
  auto target = impl_->router.PickTarget(TotalBytes(items, positions), options, explicit_choice);
  if (!target) {
    for (size_t i : positions) results[i] = Err(target.error());
    return results;
  }
  rpc::ReplicateConfig config = ToRpcConfig(options);
  std::vector<std::function<void()>> tasks;
  AddWriteTasks(impl_->router, *target, items, positions, config, /*upsert=*/false, results, tasks);
  RunParallel(impl_->batch_helpers, tasks);
  // A node the client chose may be full, and any node may have become
  // unreachable (restarted on another port, say): the single path asks the
  // master for another node, or refreshes the node's address, item by item,
  // as a lone Put would.
  bool forgotten = explicit_choice;
  for (size_t i : positions) {
    if (results[i] || !IsRefusedPlacement(results[i].error())) continue;
    if (!forgotten) {
      // Before the retries: they must not be sent where the pick said.
      impl_->router.ForgetPick(target->node_id, results[i].error());
      forgotten = true;
    }
    if (!explicit_choice || results[i].error() == ErrorCode::kRpcFail) {
      results[i] = PutAlone(items[i].key, items[i].value, options);
    }
  }
  // As in PutAlone: a key put now was absent, so a cached copy is stale.
  if (impl_->hot_cache.enabled()) {
    for (size_t i : positions) {
      if (results[i]) impl_->hot_cache.Erase(std::string(items[i].key));
    }
  }
  return results;
}

std::vector<Result<void>> Client::BatchUpsert(
    const std::vector<std::pair<std::string, std::string>>& items, const PutOptions& options) {
  std::vector<Result<void>> results(items.size());
  const std::vector<ValueView> views = ViewsOf(items);
  std::vector<size_t> positions = WritablePositions(views, results);
  if (positions.empty()) return results;
  std::vector<std::string> keys;
  keys.reserve(items.size());
  for (const auto& item : items) keys.push_back(item.first);
  // One master round trip locates every key; keys with an owner are replaced
  // there, one request stream per owner, all owners in parallel.
  std::vector<std::pair<size_t, ErrorCode>> missing;
  auto groups = impl_->router.GroupByOwner(keys, positions, missing);
  if (!groups) {
    for (size_t i : positions) results[i] = Err(groups.error());
    return results;
  }
  rpc::ReplicateConfig config = ToRpcConfig(options);
  std::vector<std::function<void()>> tasks;
  for (const auto& [node_id, group] : *groups) {
    AddWriteTasks(impl_->router, group.owner, views, group.indices, config, /*upsert=*/true,
                  results, tasks);
  }
  std::vector<size_t> absent;
  for (const auto& [i, code] : missing) {
    if (code == ErrorCode::kObjectNotFound) {
      absent.push_back(i);
    } else {
      results[i] = Err(code);
    }
  }
  // Keys without an owner take the put path: one target for all of them.
  bool explicit_choice = false;
  std::optional<std::string> picked;  // the target's node, once tasks write there
  if (!absent.empty()) {
    auto target = impl_->router.PickTarget(TotalBytes(views, absent), options, explicit_choice);
    if (target) {
      picked = target->node_id;
      AddWriteTasks(impl_->router, *target, views, absent, config, /*upsert=*/true, results, tasks);
    } else {
      for (size_t i : absent) results[i] = Err(target.error());
    }
  }
  RunParallel(impl_->batch_helpers, tasks);
  // Keys that moved, lost a put race or found the chosen node full go
  // through the single path, which re-locates them once. An absent key the
  // picked node refused (no room, or unreachable: a dead worker stays
  // registered until node_ttl) is retried as BatchPutViews retries one: the
  // pick is set aside first, so the retries and later batches go elsewhere.
  std::vector<bool> was_absent(items.size(), false);
  for (size_t i : absent) was_absent[i] = true;
  bool forgotten = explicit_choice || !picked;
  for (size_t i : positions) {
    if (results[i]) continue;
    ErrorCode code = results[i].error();
    const bool refused = picked && was_absent[i] && IsRefusedPlacement(code);
    if (refused && !forgotten) {
      impl_->router.ForgetPick(*picked, code);
      forgotten = true;
    }
    if (IsMoved(code) || code == ErrorCode::kObjectAlreadyExists ||
        (code == ErrorCode::kNoAvailableHandle && !explicit_choice) ||
        (refused && code == ErrorCode::kRpcFail)) {
      results[i] = Upsert(items[i].first, items[i].second, options);
    }
  }
  for (const auto& key : keys) impl_->hot_cache.Erase(key);
  return results;
}

}  // namespace mooncake
