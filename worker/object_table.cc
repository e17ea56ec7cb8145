#include "worker/object_table.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace mooncake {

std::string_view StateName(ObjectState state) {
  switch (state) {
    case ObjectState::kWriting:
      return "writing";
    case ObjectState::kComplete:
      return "complete";
    case ObjectState::kAdopted:
      return "adopted";
    case ObjectState::kTransferring:
      return "transferring";
    case ObjectState::kRemoving:
      return "removing";
    case ObjectState::kRemoved:
      return "removed";
  }
  return "unknown";
}

std::string_view StateName(MoveState state) {
  switch (state) {
    case MoveState::kIdle:
      return "idle";
    case MoveState::kCopying:
      return "copying";
    case MoveState::kDropping:
      return "dropping";
  }
  return "unknown";
}

bool IsLegalTransition(ObjectState from, ObjectState to) {
  using S = ObjectState;
  if (from == S::kRemoved) return false;
  if (to == S::kRemoved) return true;  // E, O: erasure ends every live state
  switch (from) {
    case S::kWriting:
      return to == S::kComplete || to == S::kAdopted;  // P, A
    case S::kComplete:
      return to == S::kTransferring || to == S::kRemoving;  // T, M
    case S::kAdopted:
      return to == S::kComplete;  // C
    case S::kTransferring:
    case S::kRemoving:
      return to == S::kComplete;  // F
    case S::kRemoved:
      break;
  }
  return false;
}

bool IsLegalMove(MoveState from, MoveState to, ObjectState state) {
  using M = MoveState;
  using S = ObjectState;
  if (from == M::kIdle && to == M::kCopying) {
    return state == S::kComplete || state == S::kAdopted || state == S::kRemoving;
  }
  if (from == M::kIdle && to == M::kDropping) return state == S::kComplete;
  // Back to idle from whatever a mover did, in any live state it may have
  // reached meanwhile.
  return from != M::kIdle && to == M::kIdle && state != S::kRemoved;
}

bool IsLegalCombination(ObjectState state, MoveState move, bool published) {
  using M = MoveState;
  using S = ObjectState;
  switch (state) {
    case S::kWriting:
      return move == M::kIdle;
    case S::kTransferring:
      return move == M::kIdle && published;
    case S::kAdopted:
      return move != M::kDropping && !published;
    case S::kComplete:
    case S::kRemoving:
      return move != M::kDropping || published;
    case S::kRemoved:
      return true;
  }
  return false;
}

ObjectTable::Record* ObjectTable::Record::Create(std::string_view key, Object object) {
  static_assert(sizeof(Record) % alignof(Record) == 0);
  void* memory = ::operator new(sizeof(Record) + key.size());
  auto* record = new (memory) Record(std::move(object));
  char* bytes = reinterpret_cast<char*>(record + 1);
  std::memcpy(bytes, key.data(), key.size());
  record->object.key_ = std::string_view(bytes, key.size());
  return record;
}

void ObjectTable::Record::Destroy(Record* record) {
  record->~Record();
  ::operator delete(record);
}

ObjectTable::ObjectTable(size_t tiers)
    : lru_(tiers),
      soft_lru_(tiers),
      soft_count_(tiers, 0),
      soft_ends_(tiers),
      pinned_bytes_(tiers, 0) {
  MC_DCHECK(tiers < 64);  // Object::tier_ has six bits
}

Object* ObjectTable::Find(const std::string& key) {
  Record* record = objects_.Find(key);
  return record == nullptr ? nullptr : &record->object;
}

const Object* ObjectTable::Find(const std::string& key) const {
  const Record* record = objects_.Find(key);
  return record == nullptr ? nullptr : &record->object;
}

void ObjectTable::FindMany(std::span<const std::string> keys, std::span<Object*> found) {
  MC_DCHECK(keys.size() == found.size());
  objects_.FindMany(keys, [&](size_t i, Record* record) {
    found[i] = record == nullptr ? nullptr : &record->object;
  });
}

Object* ObjectTable::FindSame(const std::string& key, uint64_t object_id) {
  Object* object = Find(key);
  return object != nullptr && object->id == object_id ? object : nullptr;
}

Object* ObjectTable::Resolve(const ObjectRef& ref, const std::string& key) {
  Object* object = erasures_ == ref.erasures ? ref.object : FindSame(key, ref.id);
  MC_DCHECK(object == nullptr || (object->id == ref.id && object->key() == key));
  return object;
}

Object& ObjectTable::Emplace(const std::string& key, Object object, ObjectState state, size_t tier,
                             bool published, SteadyClock::time_point last_access) {
  MC_DCHECK(!Contains(key));
  Object* added = EmplaceIfAbsent(key, std::move(object), state, tier, published, last_access);
  MC_DCHECK(added != nullptr);
  return *added;
}

Object* ObjectTable::EmplaceIfAbsent(const std::string& key, Object object, ObjectState state,
                                     size_t tier, bool published,
                                     SteadyClock::time_point last_access) {
  MC_DCHECK(state == ObjectState::kWriting || state == ObjectState::kComplete);
  MC_DCHECK(tier < lru_.size());
  // `object` is left alone when the key is taken.
  auto [record, inserted] =
      objects_.FindOrInsert(key, [&] { return Record::Create(key, std::move(object)); });
  if (!inserted) return nullptr;
  Object& added = record->object;
  added.state_ = state;
  added.move_ = MoveState::kIdle;
  added.published_ = published;
  added.tier_ = static_cast<uint8_t>(tier);
  added.last_access_ = last_access;
  Index(added);
  return &added;
}

void ObjectTable::Erase(Object& object) {
  MC_DCHECK(IsLegalTransition(object.state_, ObjectState::kRemoved));
  Unindex(object);
  objects_.Erase(object.key_);
  ++erasures_;
}

void ObjectTable::EraseIfSame(const std::string& key, uint64_t object_id) {
  if (Object* object = FindSame(key, object_id)) Erase(*object);
}

void ObjectTable::SetState(Object& object, ObjectState to) {
  MC_DCHECK(to != ObjectState::kRemoved);  // Erase does that
  MC_DCHECK(IsLegalTransition(object.state_, to));
  MC_DCHECK(IsLegalCombination(to, object.move_, object.published_));
  const bool committed = object.state_ == ObjectState::kWriting;
  object.state_ = to;
  // A commit sets the soft pin just before: out of pass 0's way now, rather
  // than all at once by the first scan after many commits.
  if (committed && object.options.soft_pin && !object.options.hard_pin && !object.soft_filed_ &&
      object.soft_pin_until > object.last_access_) {
    FileSoftPinned(object);
  }
}

void ObjectTable::SetMove(Object& object, MoveState to) {
  MC_DCHECK(IsLegalMove(object.move_, to, object.state_));
  MC_DCHECK(IsLegalCombination(object.state_, to, object.published_));
  object.move_ = to;
}

void ObjectTable::MarkPublished(Object& object) {
  MC_DCHECK(IsLegalCombination(object.state_, object.move_, true));
  object.published_ = true;
}

ObjectTable::LruIndex& ObjectTable::IndexOf(const Object& object) {
  return object.soft_filed_ ? soft_lru_[object.tier_] : lru_[object.tier_];
}

void ObjectTable::Unindex(Object& object) {
  if (object.options.hard_pin) {
    pinned_bytes_[object.tier_] -= object.size;
    return;  // in no recency index
  }
  LruIndex& index = IndexOf(object);
  index.erase(index.iterator_to(object));
  if (object.soft_filed_) {
    --soft_count_[object.tier_];
    CompactSoftEnds(object.tier_);
  }
}

void ObjectTable::Index(Object& object) {
  if (object.options.hard_pin) {
    // Never a victim, so no scan needs to see it.
    object.soft_filed_ = false;
    pinned_bytes_[object.tier_] += object.size;
    return;
  }
  // A soft pin not set yet (a write's record gets it at commit) or ended by
  // the record's last access files it with the unpinned ones; pass 0 moves
  // it if the pin turns out to hold.
  bool soft = object.options.soft_pin && object.soft_pin_until > object.last_access_;
  File(object, soft);
  if (soft) ExpectSoftPinEnd(object, object.soft_pin_until);
}

void ObjectTable::File(Object& object, bool soft) {
  object.soft_filed_ = soft;
  object.filed_at_ = object.last_access_;
  // Filed at the end almost always (a new record, a refile of a touched
  // one): with that hint the insert is amortized constant time instead of a
  // descent through a tree of millions of records.
  LruIndex& index = IndexOf(object);
  index.insert(index.end(), object);
  if (soft) ++soft_count_[object.tier_];
}

void ObjectTable::FileSoftPinned(Object& object) {
  lru_[object.tier_].erase(lru_[object.tier_].iterator_to(object));
  File(object, /*soft=*/true);
  ExpectSoftPinEnd(object, object.soft_pin_until);
}

void ObjectTable::ExpectSoftPinEnd(const Object& object, SteadyClock::time_point until) {
  std::vector<SoftPinEnd>& ends = soft_ends_[object.tier_];
  ends.push_back({until, ObjectKeyHash(object.key_), object.id});
  std::push_heap(ends.begin(), ends.end(), LaterEnd());
  CompactSoftEnds(object.tier_);
}

void ObjectTable::CompactSoftEnds(size_t tier) {
  std::vector<SoftPinEnd>& ends = soft_ends_[tier];
  // Rebuilt once it is twice what is live, so each rebuild is paid for by
  // as many pushes or erasures as it walks records.
  constexpr size_t kSlack = 64;
  if (ends.size() <= 2 * soft_count_[tier] + kSlack) return;
  ends.clear();
  for (const Object& object : soft_lru_[tier]) {
    ends.push_back({object.soft_pin_until, ObjectKeyHash(object.key_), object.id});
  }
  std::make_heap(ends.begin(), ends.end(), LaterEnd());
  if (ends.capacity() > 4 * ends.size() + kSlack) ends.shrink_to_fit();
}

void ObjectTable::UnpinExpired(size_t tier, SteadyClock::time_point now) {
  std::vector<SoftPinEnd>& ends = soft_ends_[tier];
  while (!ends.empty() && ends.front().until <= now) {
    std::pop_heap(ends.begin(), ends.end(), LaterEnd());
    const SoftPinEnd end = ends.back();
    ends.pop_back();
    ++scan_visits_;
    Record* record = objects_.FindHashed(
        end.key_hash, [&](const Record& candidate) { return candidate.object.id == end.id; });
    if (record == nullptr) continue;  // erased
    Object& object = record->object;
    // Moved to another tier, or moved to lru_ by an entry before this one.
    if (object.tier_ != tier || !object.soft_filed_) continue;
    if (object.soft_pin_until > now) {
      // Raised since this entry was queued: check again at the new end.
      ExpectSoftPinEnd(object, object.soft_pin_until);
      continue;
    }
    soft_lru_[tier].erase(soft_lru_[tier].iterator_to(object));
    --soft_count_[tier];
    File(object, /*soft=*/false);
  }
}

void ObjectTable::SetTier(Object& object, size_t tier) {
  MC_DCHECK(tier < lru_.size());
  if (tier == object.tier_) return;  // a write placed where its record began
  Unindex(object);
  object.tier_ = static_cast<uint8_t>(tier);
  Index(object);
}

void ObjectTable::Touch(Object& object, SteadyClock::time_point now) {
  // Filed again only when a victim scan reaches it (see lru_). Threads read
  // the clock before they take the lock, so `now` may trail a touch that
  // came first: recency never goes back.
  object.last_access_ = std::max(object.last_access_, now);
}

void ObjectTable::SetSoftPinUntil(Object& object, SteadyClock::time_point until) {
  object.soft_pin_until = until;
  // Its entries in soft_ends_ may all come later than a lowered end. One in
  // lru_ with a pin that holds is moved by the next pass 0 that meets it.
  if (object.soft_filed_ && !object.options.hard_pin) ExpectSoftPinEnd(object, until);
}

bool ObjectTable::RefileIfTouched(Object& object) {
  if (object.filed_at_ == object.last_access_) return false;
  LruIndex& index = IndexOf(object);
  index.erase(index.iterator_to(object));
  object.filed_at_ = object.last_access_;
  // Usually the latest access in the tier: amortized constant time there.
  index.insert(index.end(), object);
  return true;
}

void ObjectTable::BeginRead(Object& object, SteadyClock::time_point now, Millis lease) {
  MC_DCHECK(object.complete());
  object.readers++;
  GrantLease(object, now, lease);
}

void ObjectTable::EndRead(Object& object) {
  MC_DCHECK(object.readers > 0);
  object.readers--;
}

void ObjectTable::GrantLease(Object& object, SteadyClock::time_point now, Millis lease) {
  Touch(object, now);
  object.lease_until = now + lease;
}

bool ObjectTable::IsLeased(const Object& object, SteadyClock::time_point now) {
  return object.readers > 0 || object.lease_until > now;
}

bool ObjectTable::IsEvictable(const Object& object, SteadyClock::time_point now, int pass,
                              bool allow_evict_soft_pinned) {
  if (object.state_ != ObjectState::kComplete || !object.published_ || object.moving() ||
      object.readers > 0) {
    return false;
  }
  if (object.options.hard_pin || object.lease_until > now) return false;
  bool soft_pinned = object.options.soft_pin && object.soft_pin_until > now;
  if (pass == 0) return !soft_pinned;
  return soft_pinned && allow_evict_soft_pinned;
}

std::vector<std::string> ObjectTable::PickVictims(size_t tier, uint64_t bytes,
                                                  SteadyClock::time_point now,
                                                  bool allow_evict_soft_pinned) {
  std::vector<std::string> victims;
  uint64_t freed = 0;
  // Pass 0 then sees every record whose soft pin ended, in recency order
  // with the unpinned ones; soft_lru_ keeps only pins that hold.
  UnpinExpired(tier, now);
  Scan(tier, 0, bytes, now, allow_evict_soft_pinned, victims, freed);
  if (allow_evict_soft_pinned && freed < bytes) {
    Scan(tier, 1, bytes, now, allow_evict_soft_pinned, victims, freed);
  }
  return victims;
}

void ObjectTable::Scan(size_t tier, int pass, uint64_t bytes, SteadyClock::time_point now,
                       bool allow_evict_soft_pinned, std::vector<std::string>& victims,
                       uint64_t& freed) {
  LruIndex& index = pass == 0 ? lru_[tier] : soft_lru_[tier];
  for (auto it = index.begin(); it != index.end() && freed < bytes;) {
    ++scan_visits_;
    Object& object = *it;
    auto next = std::next(it);
    if (RefileIfTouched(object)) {
      // It moved back, behind records filed before its last access. The
      // walk meets it again there, up to date (so each moves once a scan),
      // or at once if it still sorts before the next record.
      it = next == index.end() || ByRecency()(object, *next) ? index.iterator_to(object) : next;
      continue;
    }
    it = next;
    if (pass == 0 && object.options.soft_pin && object.soft_pin_until > now) {
      // Soft-pinned after it was filed: out of pass 0's way from now on.
      FileSoftPinned(object);
      continue;
    }
    if (!IsEvictable(object, now, pass, allow_evict_soft_pinned)) continue;
    victims.emplace_back(object.key());
    freed += object.size;
  }
}

std::vector<std::string> ObjectTable::Keys() {
  ++listings_;
  std::vector<std::string> keys;
  keys.reserve(objects_.size());
  objects_.ForEach([&](const Record& record) {
    if (record.object.complete() && record.object.published_) keys.emplace_back(record.key());
  });
  return keys;
}

bool ObjectTable::IsHeld(const Object& object) {
  return object.complete() && object.published_ && !object.removing() &&
         object.move_ != MoveState::kDropping;
}

void ObjectTable::KeepCommittedOnRelease() {
  objects_.ForEach([](Record& record) {
    Object& object = record.object;
    if (!object.complete()) return;
    if (object.allocation) object.allocation->free_on_release = false;
    if (object.durable_copy) object.durable_copy->free_on_release = false;
  });
}

void ObjectTable::ObserveVersion(uint64_t version) {
  next_version_ = std::max(next_version_, version + 1);
}

}  // namespace mooncake
