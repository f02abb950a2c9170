// A RocksDB file system for tests that makes syncs fail or wait: the way to
// show what opgate does when an fsync fails, or what a reader sees while a
// commit is still on its way to the disk. Thread-safe.
#pragma once

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <condition_variable>
#include <memory>
#include <mutex>

#include "store/rocksdb/db.h"

namespace opgate::testing {

struct SyncControl {
  std::mutex mu;
  std::condition_variable cv;
  bool fail = false;  // syncs fail with an I/O error
  // A failed sync also loses what was written since the last good one (the
  // kernel dropped the dirty pages); otherwise it may reach the disk later.
  bool lose_unsynced = false;
  bool hold = false;  // syncs wait until released
  int waiting = 0;    // syncs waiting now
  void set_hold(bool on) {
    std::lock_guard lock(mu);
    hold = on;
    cv.notify_all();
  }
  void set_fail(bool on) {
    std::lock_guard lock(mu);
    fail = on;
  }
  // Waits until a sync is held.
  void wait_until_held() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return waiting > 0; });
  }
  rocksdb::IOStatus on_sync() {
    std::unique_lock lock(mu);
    if (hold) {
      ++waiting;
      cv.notify_all();
      cv.wait(lock, [&] { return !hold; });
      --waiting;
    }
    if (fail) return rocksdb::IOStatus::IOError("injected sync failure");
    return rocksdb::IOStatus::OK();
  }
};

class FaultFile final : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  FaultFile(std::unique_ptr<rocksdb::FSWritableFile> file, std::shared_ptr<SyncControl> control)
      : FSWritableFileOwnerWrapper(std::move(file)), control_(std::move(control)) {}
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
    if (auto s = control_->on_sync(); !s.ok()) return failed(s, o, d);
    return synced(FSWritableFileOwnerWrapper::Sync(o, d), o, d);
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
    if (auto s = control_->on_sync(); !s.ok()) return failed(s, o, d);
    return synced(FSWritableFileOwnerWrapper::Fsync(o, d), o, d);
  }

 private:
  rocksdb::IOStatus synced(rocksdb::IOStatus s, const rocksdb::IOOptions& o,
                           rocksdb::IODebugContext* d) {
    if (s.ok()) synced_size_ = GetFileSize(o, d);
    return s;
  }
  rocksdb::IOStatus failed(rocksdb::IOStatus s, const rocksdb::IOOptions& o,
                           rocksdb::IODebugContext* d) {
    bool lose = false;
    {
      std::lock_guard lock(control_->mu);
      lose = control_->lose_unsynced;
    }
    if (lose) {
      (void)FSWritableFileOwnerWrapper::Truncate(synced_size_, o, d);
      (void)FSWritableFileOwnerWrapper::Fsync(o, d);
    }
    return s;
  }
  std::shared_ptr<SyncControl> control_;
  uint64_t synced_size_ = 0;
};

// Only the WAL's syncs are affected (table files and the manifest are not).
class FaultFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  explicit FaultFileSystem(std::shared_ptr<SyncControl> control)
      : FileSystemWrapper(rocksdb::FileSystem::Default()), control_(std::move(control)) {}
  const char* Name() const override { return "opgate.FaultFileSystem"; }
  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* out,
                                    rocksdb::IODebugContext* d) override {
    auto s = FileSystemWrapper::NewWritableFile(name, o, out, d);
    if (s.ok() && name.ends_with(".log"))
      *out = std::make_unique<FaultFile>(std::move(*out), control_);
    return s;
  }

 private:
  std::shared_ptr<SyncControl> control_;
};

// Options that open a store on a FaultFileSystem steered by `control`.
inline store::rocks::OpenOptions with_faults(const std::shared_ptr<SyncControl>& control) {
  store::rocks::OpenOptions o;
  o.file_system = std::make_shared<FaultFileSystem>(control);
  return o;
}

}  // namespace opgate::testing
