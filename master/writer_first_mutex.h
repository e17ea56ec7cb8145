#pragma once

// WriterFirstSharedMutex: a readers-writer lock that lets no new reader in
// while a writer waits. A drop-in for std::shared_mutex (std::unique_lock,
// std::shared_lock).
//
// Why: libstdc++'s std::shared_mutex is glibc's pthread_rwlock_t of the
// default kind, PTHREAD_RWLOCK_PREFER_READER_NP: a reader gets in whenever
// another reader holds the lock, even with a writer waiting. The master's
// key calls take its locks shared, one connection thread each, so under
// steady lookup traffic some reader always holds them and a writer
// (RegisterNode, the reaper, the purge of a node's keys) waited for seconds,
// until the readers happened to drain. Here a waiting writer blocks new
// readers and gets in once the readers inside leave; the exclusive holds
// are short, so readers pause at most that long.
//
// The price of writer preference: a thread must never take the lock shared
// twice (a waiting writer would block the second take behind the first:
// a deadlock). No caller in master/ does.
//
// Thread-safety: a mutex; every method is safe from any thread. Not
// copyable or movable.

#include <errno.h>
#include <pthread.h>

#include <system_error>

namespace mooncake {

class WriterFirstSharedMutex {
 public:
  WriterFirstSharedMutex() {
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&rw_, &attr);
    pthread_rwlockattr_destroy(&attr);
  }
  ~WriterFirstSharedMutex() { pthread_rwlock_destroy(&rw_); }
  WriterFirstSharedMutex(const WriterFirstSharedMutex&) = delete;
  WriterFirstSharedMutex& operator=(const WriterFirstSharedMutex&) = delete;

  void lock() { Check(pthread_rwlock_wrlock(&rw_)); }
  bool try_lock() { return pthread_rwlock_trywrlock(&rw_) == 0; }
  void unlock() { pthread_rwlock_unlock(&rw_); }

  void lock_shared() {
    int rc;
    // EAGAIN: too many readers at once for glibc's counter; as libstdc++
    // does, wait for some to leave.
    while ((rc = pthread_rwlock_rdlock(&rw_)) == EAGAIN) {
    }
    Check(rc);
  }
  // False when the lock is held exclusive or a writer waits for it.
  bool try_lock_shared() { return pthread_rwlock_tryrdlock(&rw_) == 0; }
  void unlock_shared() { pthread_rwlock_unlock(&rw_); }

 private:
  // EDEADLK (this thread holds it already) is a bug, reported as
  // std::mutex::lock reports it.
  static void Check(int rc) {
    if (rc != 0) throw std::system_error(rc, std::system_category(), "WriterFirstSharedMutex");
  }

  pthread_rwlock_t rw_;
};

}  // namespace mooncake
