#include "tiers/ssd_tier.h"

#include <fcntl.h>
#include <rocksdb/db.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <rocksdb/slice.h>
#include <rocksdb/transaction_log.h>
#include <rocksdb/write_batch.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <optional>
#include <system_error>
#include <unordered_set>
#include <utility>

#include "common/log.h"
#include "tiers/ssd_format.h"

namespace mooncake {

namespace {

using ssd_format::DataKey;
using ssd_format::DecodeDeferredSlot;
using ssd_format::DecodeMeta;
using ssd_format::EncodeDeferredSlot;
using ssd_format::EncodeMeta;
using ssd_format::kDeferredDeletesFile;
using ssd_format::kDeferredSlotBytes;
using ssd_format::kDeferredSlots;
using ssd_format::kIdLimit;
using ssd_format::kMetaCfName;
using ssd_format::kMetaPrefix;
using ssd_format::kPendingPrefix;
using ssd_format::PrefixedKey;
using ssd_format::ReadBigEndian64;

// Full chunks are handed to RocksDB in batches of at most this many, so one
// huge Write never copies the whole object into a single WriteBatch.
constexpr uint64_t kChunksPerBatch = 8;

// [offset, offset + len) inside an object of `size` bytes, overflow-safe.
bool InObject(uint64_t size, uint64_t offset, uint64_t len) {
  return offset <= size && len <= size - offset;
}

// Length of chunk `chunk` of an object: kChunkBytes except for the last one.
uint64_t ChunkLength(uint64_t object_size, uint64_t chunk) {
  return std::min(SsdTier::kChunkBytes, object_size - chunk * SsdTier::kChunkBytes);
}

// Adds the deletion of every chunk of object `id` to `batch`. The range ends
// inside the id, not at DataKey(id + 1, 0), so it holds for any id.
void DeleteChunks(rocksdb::WriteBatch& batch, rocksdb::ColumnFamilyHandle* data_cf, uint64_t id) {
  batch.DeleteRange(data_cf, DataKey(id, 0), DataKey(id, UINT64_MAX));
  batch.Delete(data_cf, DataKey(id, UINT64_MAX));
}

rocksdb::Slice AsSlice(std::span<const std::byte> data) {
  return {reinterpret_cast<const char*>(data.data()), data.size()};
}

// Every read checks block and blob checksums (RocksDB's default, made
// explicit): a damaged byte on disk must become an error, never data.
rocksdb::ReadOptions VerifiedReads() {
  rocksdb::ReadOptions options;
  options.verify_checksums = true;
  return options;
}

// What a failed RocksDB write means to a caller: no space is the client's
// NO_AVAILABLE_HANDLE (it may retry elsewhere or later), anything else is an
// internal error.
ErrorCode WriteErrorCode(const rocksdb::Status& s) {
  return s.IsNoSpace() ? ErrorCode::kNoAvailableHandle : ErrorCode::kInternalError;
}

const char* WriteErrorReason(const rocksdb::Status& s) {
  if (s.IsNoSpace()) return "No space left on device";
  if (s.IsCorruption()) return "corruption";
  return "storage error";
}

// Turns off RocksDB's own recovery from background errors. For a full disk
// it waits in a background thread, and meanwhile every DB::Resume() answers
// Busy; WriteChecked resumes on the next write instead, as soon as there is
// room again.
class ManualErrorRecovery : public rocksdb::EventListener {
 public:
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason, rocksdb::Status,
                            bool* auto_recovery) override {
    *auto_recovery = false;
  }
};

// True when `dir` holds files that only an existing database writes (a
// MANIFEST, table, blob or WAL file). Without CURRENT such a directory is a
// damaged database, not a fresh one: create_if_missing would start a new
// database over it and silently lose (or later mix up) its files.
bool HoldsDatabaseFiles(const std::filesystem::path& dir) {
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with("MANIFEST-") || name.ends_with(".sst") || name.ends_with(".blob") ||
        name.ends_with(".log")) {
      return true;
    }
  }
  return false;
}

}  // namespace

SsdTier::SsdTier(std::string name, std::string path, uint64_t capacity)
    : name_(std::move(name)), path_(std::move(path)), capacity_(capacity) {}

Result<std::unique_ptr<SsdTier>> SsdTier::Open(std::string name, std::string path,
                                               uint64_t capacity, std::string* error) {
  std::string ignored;
  if (error == nullptr) error = &ignored;
  error->clear();
  if (capacity == 0 || path.empty()) {
    *error = "path=" + path + " status=invalid arguments (empty path or zero capacity)";
    return Err(ErrorCode::kInvalidParams);
  }
  try {
    std::unique_ptr<SsdTier> tier(new SsdTier(std::move(name), std::move(path), capacity));
    if (auto r = tier->OpenDb(error); !r) return Err(r.error());
    if (auto r = tier->LoadAndCleanUp(error); !r) return Err(r.error());
    tier->reclaimer_ = std::thread([t = tier.get()] { t->ReclaimLoop(); });
    MC_LOG_INFO("ssd tier ready tier={} path={} capacity={} objects={} used={}", tier->name_,
                tier->path_, capacity, tier->object_count(), tier->used());
    return tier;
  } catch (const std::exception& e) {
    // `path` may have been moved from by now, so only the cause is logged.
    MC_LOG_ERROR("ssd tier open failed error={}", e.what());
    *error = std::string("status=") + e.what();
    return Err(ErrorCode::kInternalError);
  }
}

Result<void> SsdTier::OpenDb(std::string* error) {
  // A new node's --ssd-path (and its parents) may not exist yet: create it,
  // and say plainly when that is impossible (RocksDB would only report
  // "No such file or directory" for the LOCK file).
  {
    std::error_code ec;
    const std::filesystem::path dir(path_);
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      *error = "path=" + path_ + " status=cannot create directory: " + ec.message();
      MC_LOG_ERROR("ssd tier open failed {}", *error);
      return Err(ErrorCode::kInternalError);
    }
    if (!std::filesystem::is_directory(dir, ec)) {
      *error = "path=" + path_ + " status=cannot create directory: not a directory";
      MC_LOG_ERROR("ssd tier open failed {}", *error);
      return Err(ErrorCode::kInternalError);
    }
    if (::access(path_.c_str(), W_OK | X_OK) != 0) {
      *error = "path=" + path_ + " status=directory is not writable: " + std::strerror(errno);
      MC_LOG_ERROR("ssd tier open failed {}", *error);
      return Err(ErrorCode::kInternalError);
    }
  }
  if (std::error_code ec; !std::filesystem::exists(std::filesystem::path(path_) / "CURRENT", ec) &&
                          HoldsDatabaseFiles(path_)) {
    *error = "path=" + path_ +
             " status=Corruption: CURRENT is missing but the directory holds database files";
    MC_LOG_ERROR("ssd tier rocksdb open failed {}", *error);
    return Err(ErrorCode::kInternalError);
  }
  rocksdb::DBOptions db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  // Refuse to open on any inconsistency (missing or truncated files, bad
  // checksums in the MANIFEST) instead of serving what is left.
  db_options.paranoid_checks = true;
  // No preallocation: free space seen by statvfs is then what RocksDB can
  // still write, which the free-space check before each write relies on.
  db_options.allow_fallocate = false;
  db_options.listeners.push_back(std::make_shared<ManualErrorRecovery>());

  rocksdb::ColumnFamilyOptions data_options;
  data_options.enable_blob_files = true;
  data_options.min_blob_size = kMinBlobBytes;
  // Freed objects leave dead blobs behind; GC during compaction reclaims them.
  data_options.enable_blob_garbage_collection = true;

  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, data_options},
      {kMetaCfName, rocksdb::ColumnFamilyOptions()}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(db_options, path_, families, &handles, &raw);
  if (!s.ok()) {
    *error = "path=" + path_ + " status=" + s.ToString();
    MC_LOG_ERROR("ssd tier rocksdb open failed {}", *error);
    return Err(ErrorCode::kInternalError);
  }
  db_.reset(raw);
  data_cf_ = handles[0];
  meta_cf_ = handles[1];
  return {};
}

SsdTier::~SsdTier() {
  if (reclaimer_.joinable()) {
    // A running compaction stops early instead of holding up the close.
    db_->DisableManualCompaction();
    {
      std::lock_guard lock(reclaim_mu_);
      reclaim_stopping_ = true;
    }
    reclaim_cv_.notify_all();
    reclaimer_.join();
  }
  if (db_) {
    try {
      // The last chance in this process for deletes the disk had no room for.
      // What still fails stays in the deferred-deletes file for the next Open.
      RetryDeferredDeletes();
      if (has_deferred_deletes_.load()) {
        std::lock_guard lock(mu_);
        MC_LOG_WARN("ssd tier closes with deferred deletes tier={} objects={}", name_,
                    deferred_deletes_.size());
      }
      db_->DestroyColumnFamilyHandle(data_cf_);
      db_->DestroyColumnFamilyHandle(meta_cf_);
      if (rocksdb::Status s = db_->Close(); !s.ok()) {
        MC_LOG_ERROR("ssd tier close failed path={} status={}", path_, s.ToString());
      }
      db_.reset();
    } catch (...) {
      // A destructor must not throw; the WAL already holds every write.
    }
  }
  if (deferred_fd_ >= 0) ::close(deferred_fd_);
}

Result<void> SsdTier::LoadAndCleanUp(std::string* error) {
  std::vector<uint64_t> pending;
  // Ids whose meta a newer release wrote: left untouched, not live.
  std::unordered_set<uint64_t> newer;
  rocksdb::WriteBatch cleanup;
  // Objects freed before the restart whose delete never landed: not live, and
  // their ids are never handed out again while the file names them.
  auto recorded = OpenDeferredFile(error);
  if (!recorded) return Err(recorded.error());
  const std::vector<uint64_t> deferred = std::move(*recorded);
  const std::unordered_set<uint64_t> freed(deferred.begin(), deferred.end());
  uint64_t max_id = deferred.empty() ? 0 : *std::max_element(deferred.begin(), deferred.end());
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(VerifiedReads(), meta_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice key = it->key();
    if (key.size() != 9 || (key[0] != kMetaPrefix && key[0] != kPendingPrefix)) {
      MC_LOG_WARN("ssd tier ignores unknown meta key tier={} key_size={}", name_, key.size());
      continue;
    }
    const uint64_t id = ReadBigEndian64(key.data() + 1);
    if (id >= kIdLimit) {
      // No release hands out such an id: damaged (or foreign) but passing
      // the checksums. Counting it would wrap the next id onto live objects.
      MC_LOG_ERROR("ssd tier drops a record with an impossible id tier={} id={}", name_, id);
      cleanup.Delete(meta_cf_, key);
      DeleteChunks(cleanup, data_cf_, id);
      continue;
    }
    max_id = std::max(max_id, id);
    if (freed.contains(id)) continue;  // deleted below, with its data
    if (key[0] == kPendingPrefix) {
      pending.push_back(id);
      continue;
    }
    auto meta = DecodeMeta(it->value().ToStringView());
    if (!meta && meta.error() == ssd_format::MetaDecodeError::kNewerFormat) {
      // Written by a newer release (this is a rollback): well-formed, only
      // not readable here. Keep everything of the id for that release; its
      // id stays counted in max_id, so it is never handed out again.
      newer.insert(id);
      continue;
    }
    if (!meta || meta->location.offset != id) {
      // Damaged meta: the object cannot be served, so treat it as
      // uncommitted and drop it with its data.
      MC_LOG_ERROR("ssd tier drops corrupt meta tier={} id={}", name_, id);
      cleanup.Delete(meta_cf_, key);
      pending.push_back(id);
      continue;
    }
    live_.emplace(id, meta->location.size);
    used_ += meta->location.size;
  }
  if (!it->status().ok()) {
    *error = "path=" + path_ + " status=" + it->status().ToString();
    MC_LOG_ERROR("ssd tier meta scan failed tier={} {}", name_, *error);
    return Err(ErrorCode::kInternalError);
  }
  it.reset();

  if (!newer.empty()) {
    MC_LOG_WARN(
        "ssd tier skips objects of a newer format tier={} path={} objects={} known_format={} "
        "reason=\"written by a newer release: kept on disk untouched but not served or counted "
        "in used; that release serves them again\"",
        name_, path_, newer.size(), ssd_format::kMetaFormatVersion);
  }
  uint64_t orphans = 0;
  for (uint64_t id : pending) {
    // Next to a newer release's meta: that release decides what it means.
    if (newer.contains(id)) continue;
    cleanup.Delete(meta_cf_, PrefixedKey(kPendingPrefix, id));
    // A committed object written again (an in-place upsert) that was not
    // persisted again may hold a mix of old and new bytes: drop it whole, as
    // a revoked upsert would, rather than serve torn data.
    if (auto live = live_.find(id); live != live_.end()) {
      cleanup.Delete(meta_cf_, PrefixedKey(kMetaPrefix, id));
      used_ -= live->second;
      live_.erase(live);
    }
    DeleteChunks(cleanup, data_cf_, id);
    ++orphans;
  }
  if (cleanup.Count() > 0) {
    rocksdb::Status s = db_->Write(rocksdb::WriteOptions(), &cleanup);
    if (!s.ok()) {
      *error = "path=" + path_ + " status=" + s.ToString();
      MC_LOG_ERROR("ssd tier cleanup failed tier={} {}", name_, *error);
      return Err(WriteErrorCode(s));
    }
  }
  if (orphans > 0) MC_LOG_INFO("ssd tier dropped uncommitted tier={} objects={}", name_, orphans);
  next_id_ = max_id + 1;
  if (used_ > capacity_) {
    MC_LOG_WARN("ssd tier recovered more than capacity tier={} used={} capacity={}", name_, used_,
                capacity_);
  }
  if (!deferred.empty()) {
    MC_LOG_INFO("ssd tier retries deferred deletes tier={} objects={}", name_, deferred.size());
    deferred_deletes_ = deferred;
    has_deferred_deletes_.store(true);
    // Failing again is not fatal: the objects stay dead, and the next write
    // or close retries.
    RetryDeferredDeletes();
  }
  return {};
}

Result<std::vector<uint64_t>> SsdTier::OpenDeferredFile(std::string* error) {
  constexpr size_t kBytes = kDeferredSlots * kDeferredSlotBytes;
  const std::string file = path_ + "/" + kDeferredDeletesFile;
  // The file exists but cannot be read: opening without its records would
  // serve the objects they name again, so the tier does not open.
  auto unreadable = [&](const std::string& reason) -> Result<std::vector<uint64_t>> {
    *error = "path=" + path_ + " status=cannot read " + kDeferredDeletesFile + ": " + reason +
             " (the objects it records as deleted would be served again)";
    MC_LOG_ERROR("ssd tier open failed {}", *error);
    return Err(ErrorCode::kInternalError);
  };
  std::lock_guard lock(deferred_file_mu_);
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    const std::string reason = std::strerror(errno);
    if (struct stat st{}; ::lstat(file.c_str(), &st) == 0) return unreadable(reason);
    // It could not be created, so nothing was ever recorded in it.
    MC_LOG_WARN("ssd tier keeps deferred deletes in memory only tier={} file={} error=\"{}\"",
                name_, file, reason);
    return std::vector<uint64_t>{};
  }
  struct stat st {};
  if (const bool stat_ok = ::fstat(fd, &st) == 0; !stat_ok || !S_ISREG(st.st_mode)) {
    const std::string reason = stat_ok ? "not a regular file" : std::strerror(errno);
    ::close(fd);
    return unreadable(reason);
  }
  // Everything the file holds is read; only a file shorter than its slots
  // (new, or cut short while it was created) is extended, with empty ones.
  std::string bytes(kBytes, '\0');
  const size_t have = static_cast<size_t>(std::min<uint64_t>(st.st_size, kBytes));
  for (size_t done = 0; done < have;) {
    const ssize_t n = ::pread(fd, bytes.data() + done, have - done, static_cast<off_t>(done));
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const std::string reason = n < 0 ? std::strerror(errno) : "the file ended before its size";
    ::close(fd);
    return unreadable(reason);
  }
  std::vector<uint64_t> slots(kDeferredSlots, 0);
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < kDeferredSlots; ++i) {
    uint64_t id = DecodeDeferredSlot(bytes.data() + i * kDeferredSlotBytes);
    if (id >= kIdLimit) {
      // Never recorded by a tier (see kIdLimit): the slot is free again.
      MC_LOG_ERROR("ssd tier ignores a deferred delete with an impossible id tier={} id={}", name_,
                   id);
      id = 0;
    }
    slots[i] = id;
    if (id != 0) ids.push_back(id);
  }
  if (have < kBytes) {
    // Written in full so later records need no space.
    const int dir = ::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    const bool ok = ::pwrite(fd, bytes.data() + have, kBytes - have, static_cast<off_t>(have)) ==
                        static_cast<ssize_t>(kBytes - have) &&
                    ::fsync(fd) == 0 && dir >= 0 && ::fsync(dir) == 0;
    const std::string reason = ok ? "" : std::strerror(errno);
    if (dir >= 0) ::close(dir);
    if (!ok) {
      // The ids read still count; the file keeps them for the next Open.
      MC_LOG_WARN("ssd tier keeps deferred deletes in memory only tier={} file={} error=\"{}\"",
                  name_, file, reason);
      ::close(fd);
      return ids;
    }
  }
  deferred_fd_ = fd;
  deferred_slots_ = std::move(slots);
  return ids;
}

bool SsdTier::RecordDeferred(uint64_t id) {
  std::lock_guard lock(deferred_file_mu_);
  if (deferred_fd_ < 0) return false;
  auto slot = std::find(deferred_slots_.begin(), deferred_slots_.end(), 0);
  if (slot == deferred_slots_.end()) return false;
  const auto bytes = EncodeDeferredSlot(id);
  const off_t at = static_cast<off_t>(slot - deferred_slots_.begin()) * kDeferredSlotBytes;
  // Overwrites bytes the file already holds: no new blocks needed.
  if (::pwrite(deferred_fd_, bytes.data(), bytes.size(), at) !=
          static_cast<ssize_t>(bytes.size()) ||
      ::fdatasync(deferred_fd_) != 0) {
    return false;
  }
  *slot = id;
  return true;
}

void SsdTier::ClearDeferred(uint64_t id) {
  std::lock_guard lock(deferred_file_mu_);
  auto slot = std::find(deferred_slots_.begin(), deferred_slots_.end(), id);
  if (slot == deferred_slots_.end()) return;
  *slot = 0;
  const auto bytes = EncodeDeferredSlot(0);
  const off_t at = static_cast<off_t>(slot - deferred_slots_.begin()) * kDeferredSlotBytes;
  // Synced, so that a restart after an OS crash does not find the slot again
  // naming an id it may already have reissued. A slot left behind only
  // repeats a delete at the next Open.
  if (::pwrite(deferred_fd_, bytes.data(), bytes.size(), at) !=
          static_cast<ssize_t>(bytes.size()) ||
      ::fdatasync(deferred_fd_) != 0) {
    MC_LOG_WARN("ssd tier cannot clear deferred delete tier={} id={} error=\"{}\"", name_, id,
                std::strerror(errno));
  }
}

bool SsdTier::IsLive(uint64_t id) const {
  std::lock_guard lock(mu_);
  return live_.contains(id);
}

uint64_t SsdTier::used() const {
  std::lock_guard lock(mu_);
  return used_;
}

uint64_t SsdTier::object_count() const {
  std::lock_guard lock(mu_);
  return live_.size();
}

Result<TierLocation> SsdTier::Allocate(uint64_t size) {
  if (size == 0) return Err(ErrorCode::kInvalidParams);
  try {
    std::lock_guard lock(mu_);
    // used_ may exceed capacity_ after recovering into a smaller tier.
    if (used_ > capacity_ || size > capacity_ - used_) return Err(ErrorCode::kNoAvailableHandle);
    // Ids come from max + 1 at Open, so none is live; skipping one that is
    // anyway keeps a new object from ever sharing the id of a live one.
    uint64_t id = next_id_;
    while (id < kIdLimit && live_.contains(id)) ++id;
    if (id >= kIdLimit) {
      MC_LOG_ERROR("ssd tier allocate failed tier={} size={} reason=\"object ids exhausted\"",
                   name_, size);
      return Err(ErrorCode::kNoAvailableHandle);
    }
    next_id_ = id + 1;
    live_.emplace(id, size);
    used_ += size;
    return TierLocation{.offset = id, .size = size};
  } catch (const std::exception& e) {
    MC_LOG_ERROR("ssd tier allocate failed tier={} size={} error={}", name_, size, e.what());
    return Err(ErrorCode::kInternalError);
  }
}

void SsdTier::Free(const TierLocation& location) {
  const uint64_t id = location.offset;
  try {
    // The object lock orders this Free against a Persist of the same id, so
    // a meta record can never outlive the object's data.
    std::lock_guard object_lock(ObjectMutex(id));
    {
      std::lock_guard lock(mu_);
      auto it = live_.find(id);
      if (it == live_.end()) return;
      used_ -= it->second;
      live_.erase(it);
      damaged_.erase(id);
    }
    frees_.fetch_add(1);
    // If the delete fails the meta record is still on disk: retry later, or a
    // restart would bring back an object the cache already dropped.
    if (!DeleteObject(id)) DeferDelete(id);
    RetryDeferredDeletes();
    // The freed bytes come back only with a flush and a compaction, which
    // RocksDB would start on later writes; a short disk refuses those.
    if (disk_short_.load()) RequestReclaim();
  } catch (const std::exception& e) {
    MC_LOG_ERROR("ssd tier free failed tier={} id={} error={}", name_, id, e.what());
  }
}

void SsdTier::MarkDamaged(uint64_t id) const {
  std::lock_guard lock(mu_);
  if (live_.contains(id)) damaged_.insert(id);
}

void SsdTier::ForgetDamage(uint64_t id) {
  std::lock_guard lock(mu_);
  damaged_.erase(id);
}

bool SsdTier::Damaged(const TierLocation& location) const {
  std::lock_guard lock(mu_);
  return damaged_.contains(location.offset);
}

Result<void> SsdTier::DeleteObject(uint64_t id) {
  rocksdb::WriteBatch batch;
  DeleteChunks(batch, data_cf_, id);
  batch.Delete(meta_cf_, PrefixedKey(kMetaPrefix, id));
  batch.Delete(meta_cf_, PrefixedKey(kPendingPrefix, id));
  return WriteChecked(batch, id, /*data=*/false);
}

void SsdTier::DeferDelete(uint64_t id) {
  const bool recorded = RecordDeferred(id);
  {
    std::lock_guard lock(mu_);
    deferred_deletes_.push_back(id);
    has_deferred_deletes_.store(true);
  }
  if (recorded) {
    MC_LOG_WARN("ssd tier delete deferred tier={} id={}", name_, id);
  } else {
    MC_LOG_ERROR(
        "ssd tier delete deferred in memory only tier={} id={} "
        "reason=\"deferred-deletes file missing or full: a restart before the retry brings the "
        "object back\"",
        name_, id);
  }
}

void SsdTier::RetryDeferredDeletes() {
  if (!has_deferred_deletes_.load()) return;
  std::vector<uint64_t> ids;
  {
    std::lock_guard lock(mu_);
    ids.swap(deferred_deletes_);
    has_deferred_deletes_.store(false);
  }
  // The ids are no longer live, so no Persist of them can race these
  // deletes. Stop at the first failure: the rest would fail the same way.
  size_t done = 0;
  while (done < ids.size() && DeleteObject(ids[done])) ++done;
  // Slots are cleared only once the deletes are in the synced WAL (and each
  // clear is synced): an OS crash can then neither keep a cleared slot but
  // lose the delete (the object would come back), nor lose the clear after a
  // restart reissued the id (the next Open would delete the new object).
  if (done > 0) {
    if (rocksdb::Status s = db_->SyncWAL(); s.ok()) {
      for (size_t i = 0; i < done; ++i) ClearDeferred(ids[i]);
    } else {
      MC_LOG_WARN(
          "ssd tier keeps deferred-delete slots until the next open tier={} objects={} "
          "status={}",
          name_, done, s.ToString());
    }
  }
  if (done == ids.size()) return;
  std::lock_guard lock(mu_);
  deferred_deletes_.insert(deferred_deletes_.end(), ids.begin() + done, ids.end());
  has_deferred_deletes_.store(true);
}

std::optional<uint64_t> SsdTier::FreeDiskBytes() const {
  struct statvfs st {};
  if (statvfs(path_.c_str(), &st) != 0) return std::nullopt;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

void SsdTier::RequestReclaim() {
  {
    std::lock_guard lock(reclaim_mu_);
    reclaim_requested_ = true;
  }
  reclaim_cv_.notify_one();
}

void SsdTier::ReclaimLoop() {
  std::unique_lock lock(reclaim_mu_);
  while (true) {
    reclaim_cv_.wait(lock, [&] { return reclaim_stopping_ || reclaim_requested_; });
    if (reclaim_stopping_) return;
    reclaim_requested_ = false;
    lock.unlock();
    try {
      ReclaimDiskSpace();
    } catch (const std::exception& e) {
      MC_LOG_ERROR("ssd tier reclaim failed tier={} error={}", name_, e.what());
    }
    lock.lock();
    // Requests made meanwhile wait for the interval and then share one pass.
    reclaim_cv_.wait_for(lock, kReclaimInterval, [&] { return reclaim_stopping_; });
  }
}

void SsdTier::ReclaimDiskSpace() {
  const std::optional<uint64_t> free_before = FreeDiskBytes();
  // A flush writes at most what the live WAL holds (less what was deleted
  // since) before the WAL goes; one that fails for room stops every write
  // until Resume, so a disk that something else filled is left alone. The
  // memtables' own size is no measure: their arena blocks can exceed the
  // bytes written, and a disk our writes filled would then never flush.
  const uint64_t flush_bytes = UnflushedBytes();
  if (free_before && *free_before < flush_bytes + kMetaWriteReserveBytes) {
    MC_LOG_WARN("ssd tier reclaim skips flush tier={} free={} unflushed={}", name_, *free_before,
                flush_bytes);
    return;
  }
  rocksdb::FlushOptions flush;
  // Writes are being refused anyway; waiting for a quieter moment could wait
  // forever.
  flush.allow_write_stall = true;
  if (rocksdb::Status s = db_->Flush(flush, {data_cf_, meta_cf_}); !s.ok()) {
    MC_LOG_WARN("ssd tier reclaim flush failed tier={} status={}", name_, s.ToString());
    return;
  }
  // The compaction writes the data tables anew before it deletes the old
  // ones; without room for that it could fill the disk itself. Blobs are not
  // rewritten (garbage collection is off for it): a blob file that only
  // freed chunks point into is deleted once no table points into it.
  const uint64_t frees = frees_.load();
  if (frees_at_compaction_ == frees) return;
  uint64_t tables = 0;
  db_->GetIntProperty(data_cf_, "rocksdb.live-sst-files-size", &tables);
  if (auto free = FreeDiskBytes(); free && *free < tables + kDataWriteReserveBytes) {
    MC_LOG_WARN("ssd tier reclaim skips compaction tier={} free={} tables={}", name_, *free,
                tables);
    return;
  }
  rocksdb::CompactRangeOptions compact;
  compact.allow_write_stall = true;
  compact.blob_garbage_collection_policy = rocksdb::BlobGarbageCollectionPolicy::kDisable;
  rocksdb::Status s = db_->CompactRange(compact, data_cf_, nullptr, nullptr);
  if (!s.ok()) {
    MC_LOG_WARN("ssd tier reclaim compaction failed tier={} status={}", name_, s.ToString());
    return;
  }
  frees_at_compaction_ = frees;
  MC_LOG_INFO("ssd tier reclaimed disk space tier={} path={} free_before={} free_after={}", name_,
              path_, free_before.value_or(0), FreeDiskBytes().value_or(0));
}

uint64_t SsdTier::UnflushedBytes() const {
  rocksdb::VectorLogPtr files;
  uint64_t bytes = 0;
  if (db_->GetSortedWalFiles(files).ok()) {
    for (const auto& file : files) {
      if (file->Type() == rocksdb::kAliveLogFile) bytes += file->SizeFileBytes();
    }
    return bytes;
  }
  db_->GetAggregatedIntProperty("rocksdb.cur-size-all-mem-tables", &bytes);
  return bytes;
}

Result<void> SsdTier::WriteChecked(rocksdb::WriteBatch& batch, uint64_t id, bool data) {
  if (needs_resume_.load()) {
    // After a failed write RocksDB refuses every write until resumed; this
    // succeeds once the cause (e.g. a full disk) is gone.
    if (rocksdb::Status s = db_->Resume(); s.ok()) {
      needs_resume_.store(false);
      MC_LOG_INFO("ssd tier resumed writes tier={}", name_);
    } else {
      MC_LOG_WARN("ssd tier cannot resume writes yet tier={} status={}", name_, s.ToString());
    }
  }
  const uint64_t bytes = batch.GetDataSize();
  const uint64_t before = in_flight_bytes_.fetch_add(bytes);
  struct Release {
    std::atomic<uint64_t>& counter;
    uint64_t bytes;
    ~Release() { counter.fetch_sub(bytes); }
  } release{in_flight_bytes_, bytes};

  if (auto free = FreeDiskBytes()) {
    // Each byte is written twice before the WAL holding it is deleted: once
    // to the WAL now and once to a table or blob file when its memtable is
    // flushed. The memtables' current contents need room for their flush too.
    uint64_t needed = 2 * (before + bytes);
    if (data) {
      uint64_t memtables = 0;
      db_->GetAggregatedIntProperty("rocksdb.cur-size-all-mem-tables", &memtables);
      needed += memtables + kDataWriteReserveBytes;
    } else {
      needed += kMetaWriteReserveBytes;
    }
    if (*free < needed) {
      disk_short_.store(true);
      RequestReclaim();
      MC_LOG_ERROR(
          "ssd write failed tier={} path={} id={} bytes={} free={} needed={} "
          "reason=\"No space left on device\"",
          name_, path_, id, bytes, *free, needed);
      return Err(ErrorCode::kNoAvailableHandle);
    }
    if (data) disk_short_.store(false);
  }
  rocksdb::Status s = db_->Write(rocksdb::WriteOptions(), &batch);
  if (s.ok()) return {};
  needs_resume_.store(true);
  MC_LOG_ERROR("ssd write failed tier={} path={} id={} bytes={} status={} reason=\"{}\"", name_,
               path_, id, bytes, s.ToString(), WriteErrorReason(s));
  return Err(WriteErrorCode(s));
}

Result<void> SsdTier::Write(const TierLocation& location, uint64_t offset,
                            std::span<const std::byte> data) {
  if (!InObject(location.size, offset, data.size())) return Err(ErrorCode::kInvalidParams);
  const uint64_t id = location.offset;
  try {
    RetryDeferredDeletes();
    rocksdb::WriteBatch batch;
    batch.Put(meta_cf_, PrefixedKey(kPendingPrefix, id), rocksdb::Slice());
    uint64_t batched_chunks = 0;
    auto flush = [&]() -> Result<void> {
      if (batched_chunks == 0) return {};
      auto written = WriteChecked(batch, id, /*data=*/true);
      batch.Clear();
      batch.Put(meta_cf_, PrefixedKey(kPendingPrefix, id), rocksdb::Slice());
      batched_chunks = 0;
      return written;
    };

    uint64_t pos = offset;
    while (!data.empty()) {
      const uint64_t chunk = pos / kChunkBytes;
      const uint64_t in_chunk = pos % kChunkBytes;
      const uint64_t chunk_len = ChunkLength(location.size, chunk);
      const uint64_t n = std::min(chunk_len - in_chunk, static_cast<uint64_t>(data.size()));
      if (in_chunk == 0 && n == chunk_len) {
        // The common case: a whole chunk, written blind.
        batch.Put(data_cf_, DataKey(id, chunk), AsSlice(data.first(n)));
        if (++batched_chunks == kChunksPerBatch) {
          if (auto r = flush(); !r) return r;
        }
      } else if (auto r = WriteChunk(location, chunk, in_chunk, data.first(n)); !r) {
        return r;
      }
      data = data.subspan(n);
      pos += n;
    }
    auto written = flush();
    // Rewritten bytes (an upsert in place) are judged afresh by the next
    // read: a mark from before would drop a value that reads back.
    if (written) ForgetDamage(id);
    return written;
  } catch (const std::exception& e) {
    MC_LOG_ERROR("ssd tier write failed tier={} id={} error={}", name_, id, e.what());
    return Err(ErrorCode::kInternalError);
  }
}

Result<void> SsdTier::WriteChunk(const TierLocation& location, uint64_t chunk,
                                 uint64_t offset_in_chunk, std::span<const std::byte> data) {
  const uint64_t id = location.offset;
  const uint64_t chunk_len = ChunkLength(location.size, chunk);
  const std::string key = DataKey(id, chunk);
  std::lock_guard lock(RmwMutex(id, chunk));
  std::string value;
  rocksdb::Status s = db_->Get(VerifiedReads(), data_cf_, key, &value);
  if (!s.ok() && !s.IsNotFound()) {
    MC_LOG_ERROR("ssd tier chunk read failed tier={} id={} chunk={} status={}", name_, id, chunk,
                 s.ToString());
    return Err(ErrorCode::kInternalError);
  }
  // A chunk not written yet reads as zeros until the rest of it arrives.
  value.resize(chunk_len, '\0');
  std::memcpy(value.data() + offset_in_chunk, data.data(), data.size());

  rocksdb::WriteBatch batch;
  batch.Put(meta_cf_, PrefixedKey(kPendingPrefix, id), rocksdb::Slice());
  batch.Put(data_cf_, key, value);
  return WriteChecked(batch, id, /*data=*/true);
}

Result<void> SsdTier::Read(const TierLocation& location, uint64_t offset,
                           std::span<std::byte> out) const {
  if (!InObject(location.size, offset, out.size())) return Err(ErrorCode::kInvalidParams);
  try {
    uint64_t pos = offset;
    while (!out.empty()) {
      const uint64_t chunk = pos / kChunkBytes;
      const uint64_t in_chunk = pos % kChunkBytes;
      const uint64_t n =
          std::min(ChunkLength(location.size, chunk) - in_chunk, static_cast<uint64_t>(out.size()));
      if (auto r = ReadChunk(location, chunk, in_chunk, out.first(n)); !r) return r;
      out = out.subspan(n);
      pos += n;
    }
    return {};
  } catch (const std::exception& e) {
    MC_LOG_ERROR("ssd tier read failed tier={} id={} error={}", name_, location.offset, e.what());
    return Err(ErrorCode::kInternalError);
  }
}

Result<void> SsdTier::ReadChunk(const TierLocation& location, uint64_t chunk,
                                uint64_t offset_in_chunk, std::span<std::byte> out) const {
  const uint64_t id = location.offset;
  rocksdb::PinnableSlice value;
  rocksdb::Status s = db_->Get(VerifiedReads(), data_cf_, DataKey(id, chunk), &value);
  if (!s.ok()) {
    // Missing data under a live location means it was never written or was
    // lost; a checksum mismatch means the disk damaged it. Serving zeros or
    // the damaged bytes instead would hand out wrong data.
    MC_LOG_ERROR(
        "ssd read failed tier={} path={} id={} chunk={} status={} reason=\"{}\"", name_, path_, id,
        chunk, s.ToString(),
        s.IsCorruption() ? "corrupt data" : (s.IsNotFound() ? "missing data" : "io error"));
    if (s.IsCorruption() || s.IsNotFound()) MarkDamaged(id);
    return Err(ErrorCode::kInternalError);
  }
  if (value.size() < offset_in_chunk + out.size()) {
    MC_LOG_ERROR("ssd tier chunk too short tier={} id={} chunk={} bytes={}", name_, id, chunk,
                 value.size());
    MarkDamaged(id);
    return Err(ErrorCode::kInternalError);
  }
  std::memcpy(out.data(), value.data() + offset_in_chunk, out.size());
  return {};
}

Result<void> SsdTier::Persist(const DurableObjectMeta& meta) {
  const uint64_t id = meta.location.offset;
  if (meta.key.size() > UINT32_MAX) return Err(ErrorCode::kInvalidParams);
  try {
    std::lock_guard object_lock(ObjectMutex(id));
    {
      std::lock_guard lock(mu_);
      auto it = live_.find(id);
      if (it == live_.end() || it->second != meta.location.size) {
        return Err(ErrorCode::kInvalidParams);
      }
    }
    // Meta and the end of "pending" land atomically: after a crash the object
    // is either committed with all its data or dropped with all of it.
    rocksdb::WriteBatch batch;
    batch.Put(meta_cf_, PrefixedKey(kMetaPrefix, id), EncodeMeta(meta));
    batch.Delete(meta_cf_, PrefixedKey(kPendingPrefix, id));
    return WriteChecked(batch, id, /*data=*/false);
  } catch (const std::exception& e) {
    MC_LOG_ERROR("ssd tier persist failed tier={} id={} error={}", name_, id, e.what());
    return Err(ErrorCode::kInternalError);
  }
}

std::vector<DurableObjectMeta> SsdTier::Recover() {
  std::vector<DurableObjectMeta> metas;
  try {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(VerifiedReads(), meta_cf_));
    const std::string start(1, kMetaPrefix);
    for (it->Seek(start); it->Valid() && it->key().starts_with(start); it->Next()) {
      auto meta = DecodeMeta(it->value().ToStringView());
      // A freed object whose delete is deferred still has its meta on disk.
      if (meta && IsLive(meta->location.offset)) metas.push_back(std::move(*meta));
    }
    if (!it->status().ok()) {
      MC_LOG_ERROR("ssd tier recover scan failed tier={} status={}", name_,
                   it->status().ToString());
    }
  } catch (const std::exception& e) {
    MC_LOG_ERROR("ssd tier recover failed tier={} error={}", name_, e.what());
  }
  return metas;
}

std::mutex& SsdTier::RmwMutex(uint64_t id, uint64_t chunk) {
  return rmw_mu_[std::hash<uint64_t>{}(id * 0x9E3779B97F4A7C15ull + chunk) % rmw_mu_.size()];
}

std::mutex& SsdTier::ObjectMutex(uint64_t id) {
  return object_mu_[std::hash<uint64_t>{}(id) % object_mu_.size()];
}

}  // namespace mooncake
