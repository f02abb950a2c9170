// The console's sign-in sessions: a random 256-bit id (the cookie's value)
// maps to the principal it signed in as, the hash of the token it signed in
// with, its CSRF token and its times. A session ends when it has not been
// seen for the idle lifetime, when its absolute lifetime is over, or on
// sign-out. Only the SHA-256 of each id is kept, and ids are compared in
// constant time. The store is bounded: at its limit a new session pushes
// out the expired ones, then the one seen least recently. Time comes from
// the injected Clock. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/mutex.h"

namespace opgate::console {

struct SessionLimits {
  int64_t idle_ms = 30 * 60 * 1000;           // unseen this long: ended
  int64_t absolute_ms = 12 * 60 * 60 * 1000;  // this long after sign-in: ended
  size_t max_sessions = 10000;
  // One principal's sessions: past it, its own least recently used ends,
  // so that signing in in a loop never pushes out anyone else's.
  size_t max_per_principal = 32;
};

struct Session {
  std::string principal;     // the principal's name
  std::string token_sha256;  // of the token it signed in with, lowercase hex
  std::string csrf_token;    // 64 hex digits
  int64_t created_ms = 0;
  int64_t last_seen_ms = 0;
};

// A session id is 64 lowercase hex digits (256 random bits).
bool valid_session_id(std::string_view id);

class SessionStore {
 public:
  // `random_hex(n)` returns n random bytes as hex; crypto::random_hex by
  // default.
  SessionStore(const Clock& clock, SessionLimits limits,
               std::function<std::string(size_t)> random_hex = {});

  struct Created {
    std::string id;  // the cookie's value
    Session session;
  };
  Created create(std::string principal, std::string token_sha256) EXCLUDES(mu_);

  // The live session with this id, without refreshing it; nothing for an
  // unknown, malformed or ended id (an ended one is removed).
  std::optional<Session> find(std::string_view id) EXCLUDES(mu_);
  // Marks the session seen now (it was used).
  void touch(std::string_view id) EXCLUDES(mu_);
  // Ends the session; false if there was none.
  bool remove(std::string_view id) EXCLUDES(mu_);
  size_t size() const EXCLUDES(mu_);
  const SessionLimits& limits() const { return limits_; }

 private:
  bool live(const Session& s, int64_t now) const REQUIRES(mu_);
  void make_room(int64_t now, const std::string& principal) REQUIRES(mu_);
  // Ends the least recently seen session of principal `of`, or of all.
  void end_least_recent(const std::string* of) REQUIRES(mu_);

  const Clock& clock_;
  const SessionLimits limits_;
  std::function<std::string(size_t)> random_hex_;
  mutable Mutex mu_;
  // By the SHA-256 of the id (raw bytes).
  std::map<std::string, Session> sessions_ GUARDED_BY(mu_);
};

}  // namespace opgate::console
