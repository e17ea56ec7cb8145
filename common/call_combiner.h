#pragma once

// CallCombiner: group commit for blocking calls (the writer queue of
// LevelDB's DBImpl::Write). The client's Get and Put use it (threads that
// call at once share a BatchGet or BatchPut), and the worker's ClaimBatcher
// (concurrent puts share a claim at the master).
//
// A caller that finds no call of its combiner on the wire sends its own
// request at once, alone: combining never waits for company. Callers that
// arrive while a call is out queue up; when it returns, the first of them
// leads: it sends the queued requests (as many as CallLimits allow) as one
// call and hands each caller its reply. No thread sends more than one call
// on others' behalf, and no caller waits behind more than one call it did
// not join. So N threads calling at once cost about one round trip per call
// instead of one each, and a lone caller pays one uncontended mutex.
//
// CallLimits::max_in_flight lets more than one call be out at once: callers
// queue only while that many are; each call that returns hands the queue to
// the next leader. One call at a time makes the largest batches, which is
// what a small machine wants; a machine with many cores can serve several
// calls side by side, and one call at a time would leave them idle.
//
// A reply is optional: nullopt means the batch did not settle that request
// (say, an object too large for a batch reply), and its caller then does
// the work alone. The same holds for every request of a batch whose send
// threw (logged here) or answered fewer replies than requests.
//
// Thread-safety: Call() is safe from any number of threads. `send` must not
// call Call() of the same combiner: it would wait for itself.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/wake_word.h"

namespace mooncake {

// How much one call may carry. A request weighs `units` (1 unless the
// combiner is given a weigh function: a batch of keys weighs its keys) and
// `bytes`; the first request of a call always goes, however heavy.
struct CallLimits {
  size_t max_units = 64;
  uint64_t max_bytes = UINT64_MAX;
  size_t max_in_flight = 1;  // calls out at once (at least 1)
};
struct CallWeight {
  size_t units = 1;
  uint64_t bytes = 0;
};

template <typename Request, typename Reply>
class CallCombiner {
 public:
  // Sends the requests (at least one) as one call; returns one reply per
  // request, in order.
  using SendFn = std::function<std::vector<std::optional<Reply>>(std::span<const Request* const>)>;
  using WeighFn = std::function<CallWeight(const Request&)>;

  CallCombiner(SendFn send, CallLimits limits, WeighFn weigh = {})
      : send_(std::move(send)), limits_(AtLeastOneInFlight(limits)), weigh_(std::move(weigh)) {}
  CallCombiner(const CallCombiner&) = delete;
  CallCombiner& operator=(const CallCombiner&) = delete;

  // Sends `request`, alone or in a batch; returns its reply. `request` is
  // read by whichever thread leads its batch, until this returns.
  std::optional<Reply> Call(const Request& request) {
    auto me = std::make_shared<Waiter>();
    me->request = &request;
    if (weigh_) me->weight = weigh_(request);
    std::unique_lock lock(mu_);
    waiting_units_ += me->weight.units;
    if (in_flight_ < limits_.max_in_flight) {
      // Invariant: callers queue only while every call slot is taken (a
      // returning call hands its slot straight to the queue), so nobody
      // waits before us and we lead at once.
      ++in_flight_;
      Lead(lock, me);
      return std::move(me->reply);
    }
    queue_.push_back(me);
    lock.unlock();
    // Sleep on our own word, not on mu_: a caller woken through a condition
    // variable takes mu_ again on the way out, and the ten or so callers a
    // reply wakes at once then queued on it (a third of the futex calls of
    // 16 threads' gets went to that).
    if (me->wake.Wait() == Waiter::kLead) {
      lock.lock();
      Lead(lock, me);
    }
    return std::move(me->reply);
  }

  // Every call sent, the units they carried, and the units waiting for a
  // call to take them.
  uint64_t calls() const { return Locked(calls_); }
  uint64_t units_sent() const { return Locked(units_sent_); }
  uint64_t waiting_units() const { return Locked(waiting_units_); }
  // Calls that carried more than one request, the requests they carried,
  // and the callers waiting now.
  uint64_t shared_calls() const { return Locked(shared_calls_); }
  uint64_t shared_requests() const { return Locked(shared_requests_); }
  uint64_t waiting() const {
    std::lock_guard lock(mu_);
    return queue_.size();
  }

 private:
  // One caller. It sleeps on its own word (a futex, common/wake_word.h), so
  // that finishing a call wakes exactly its callers and the next leader, and
  // a woken caller takes no lock on its way out. It is shared with the leader
  // so that the leader can wake it after letting go of mu_ (a caller woken
  // under mu_ would sleep again on mu_ at once; on a 2-core machine that was
  // a tenth of a put's worker CPU), when the caller may already have
  // returned.
  struct Waiter {
    static constexpr uint32_t kDone = 1;  // reply is set
    static constexpr uint32_t kLead = 2;  // this caller sends the next call
    const Request* request = nullptr;
    CallWeight weight;
    std::optional<Reply> reply;  // written by its leader before kDone
    WakeWord wake;
  };

  static CallLimits AtLeastOneInFlight(CallLimits limits) {
    limits.max_in_flight = std::max<size_t>(limits.max_in_flight, 1);
    return limits;
  }

  uint64_t Locked(const uint64_t& counter) const {
    std::lock_guard lock(mu_);
    return counter;
  }

  // mu_ held. The batch `leader` sends: itself, then the requests queued
  // now, in arrival order, as far as the limits allow. The leader is not in
  // the queue (a caller leading at once never joined it; a woken one was
  // taken out when named), so two calls returning at once never name the
  // same leader, and callers that queue while a named leader wakes up still
  // join its call.
  std::vector<std::shared_ptr<Waiter>> TakeBatchLocked(std::shared_ptr<Waiter> leader) {
    std::vector<std::shared_ptr<Waiter>> batch;
    size_t units = leader->weight.units;
    uint64_t bytes = leader->weight.bytes;
    batch.push_back(std::move(leader));
    while (!queue_.empty()) {
      const CallWeight& next = queue_.front()->weight;
      if (units + next.units > limits_.max_units || bytes + next.bytes > limits_.max_bytes) break;
      units += next.units;
      bytes += next.bytes;
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    waiting_units_ -= units;
    ++calls_;
    units_sent_ += units;
    if (batch.size() > 1) {
      ++shared_calls_;
      shared_requests_ += batch.size();
    }
    return batch;
  }

  // With `lock` held and a call slot taken for `leader` (this thread's own
  // caller): sends its batch as one call without mu_, answers its callers,
  // and hands the slot to the next leader; returns with `lock` released.
  void Lead(std::unique_lock<std::mutex>& lock, std::shared_ptr<Waiter> leader) {
    std::vector<std::shared_ptr<Waiter>> batch = TakeBatchLocked(std::move(leader));
    lock.unlock();

    std::vector<const Request*> requests;
    requests.reserve(batch.size());
    for (const auto& waiter : batch) requests.push_back(waiter->request);
    std::vector<std::optional<Reply>> replies;
    try {
      replies = send_(requests);
    } catch (const std::exception& e) {
      // Nothing may escape: every caller in the batch waits for an answer,
      // and an unsettled one does its work alone.
      MC_LOG_ERROR("combined call failed requests={} error=\"{}\"", batch.size(), e.what());
      replies.clear();
    }
    replies.resize(batch.size());

    // Each reply belongs to one waiter, which reads it only after kDone.
    for (size_t i = 0; i < batch.size(); ++i) batch[i]->reply = std::move(replies[i]);
    lock.lock();
    std::shared_ptr<Waiter> next_leader;
    if (queue_.empty()) {
      --in_flight_;
    } else {
      next_leader = std::move(queue_.front());
      queue_.pop_front();
    }
    lock.unlock();
    // The next leader first: its call is what the queue waits for.
    if (next_leader) Wake(*next_leader, Waiter::kLead);
    // batch[0] is this thread's own caller, which reads its reply when Lead
    // returns: no one to wake.
    for (size_t i = 1; i < batch.size(); ++i) Wake(*batch[i], Waiter::kDone);
  }

  static void Wake(Waiter& waiter, uint32_t state) { waiter.wake.Set(state); }

  const SendFn send_;
  const CallLimits limits_;
  const WeighFn weigh_;
  mutable std::mutex mu_;
  std::deque<std::shared_ptr<Waiter>> queue_;  // guarded by mu_
  size_t in_flight_ = 0;                       // guarded by mu_: calls out
  uint64_t waiting_units_ = 0;                 // guarded by mu_: units not yet sent
  uint64_t calls_ = 0;                         // guarded by mu_
  uint64_t units_sent_ = 0;                    // guarded by mu_
  uint64_t shared_calls_ = 0;                  // guarded by mu_
  uint64_t shared_requests_ = 0;               // guarded by mu_
};

// One CallCombiner per key (a worker node, a set of put options), so
// that calls which could never share a batch never wait for each other:
// a get stuck on a slow worker holds up only gets of that worker. A
// combiner is made on first use (CallCombinerMap::For) and kept while
// there is room. The map holds at most `max_combiners`: keys come from
// callers (a put's pin TTL, a node that left), so an unbounded map would
// grow for as long as the process runs. When it is full, combiners no
// caller holds make room; if every one is in use, For returns null and the
// caller sends alone.
//
// Thread-safety: every method is safe from any thread.
template <typename Key, typename Request, typename Reply>
class CallCombinerMap {
 public:
  using Combiner = CallCombiner<Request, Reply>;
  static constexpr size_t kDefaultMaxCombiners = 256;

  explicit CallCombinerMap(size_t max_combiners = kDefaultMaxCombiners)
      : max_combiners_(max_combiners) {}
  CallCombinerMap(const CallCombinerMap&) = delete;
  CallCombinerMap& operator=(const CallCombinerMap&) = delete;

  // The combiner of `key`, made by `make()` (a unique_ptr<Combiner>) the
  // first time; null when the map is full of combiners in use.
  template <typename Make>
  std::shared_ptr<Combiner> For(const Key& key, Make&& make) {
    std::lock_guard lock(mu_);
    auto it = combiners_.find(key);
    if (it != combiners_.end()) return it->second;
    if (combiners_.size() >= max_combiners_) DropIdleLocked();
    if (combiners_.size() >= max_combiners_) return nullptr;
    std::shared_ptr<Combiner> made = make();
    combiners_.emplace(key, made);
    return made;
  }

  size_t size() const {
    std::lock_guard lock(mu_);
    return combiners_.size();
  }
  // Summed over the combiners, those dropped included; see CallCombiner.
  uint64_t shared_calls() const {
    return Sum(dropped_shared_calls_, [](const Combiner& c) { return c.shared_calls(); });
  }
  uint64_t shared_requests() const {
    return Sum(dropped_shared_requests_, [](const Combiner& c) { return c.shared_requests(); });
  }
  uint64_t waiting() const {
    return Sum(0, [](const Combiner& c) { return c.waiting(); });
  }

 private:
  // mu_ held. Drops the combiners only the map holds. A caller gets its
  // reference under mu_, so one the map alone holds stays unused.
  void DropIdleLocked() {
    for (auto it = combiners_.begin(); it != combiners_.end();) {
      if (it->second.use_count() == 1) {
        dropped_shared_calls_ += it->second->shared_calls();
        dropped_shared_requests_ += it->second->shared_requests();
        it = combiners_.erase(it);
      } else {
        ++it;
      }
    }
  }

  template <typename Count>
  uint64_t Sum(const uint64_t& dropped, Count&& count) const {
    std::lock_guard lock(mu_);
    uint64_t total = dropped;
    for (const auto& [key, combiner] : combiners_) total += count(*combiner);
    return total;
  }

  const size_t max_combiners_;
  mutable std::mutex mu_;
  std::map<Key, std::shared_ptr<Combiner>> combiners_;  // guarded by mu_
  uint64_t dropped_shared_calls_ = 0;                   // guarded by mu_
  uint64_t dropped_shared_requests_ = 0;                // guarded by mu_
};

}  // namespace mooncake
