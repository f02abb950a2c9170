#include "console/sessions.h"

#include "common/crypto.h"

namespace opgate::console {

namespace {
constexpr size_t kIdBytes = 32;  // 256 bits
}  // namespace

bool valid_session_id(std::string_view id) {
  if (id.size() != kIdBytes * 2) return false;
  for (char c : id)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

SessionStore::SessionStore(const Clock& clock, SessionLimits limits,
                           std::function<std::string(size_t)> random_hex)
    : clock_(clock), limits_(limits), random_hex_(std::move(random_hex)) {
  if (!random_hex_) random_hex_ = [](size_t n) { return crypto::random_hex(n); };
}

bool SessionStore::live(const Session& s, int64_t now) const {
  return now - s.last_seen_ms < limits_.idle_ms && now - s.created_ms < limits_.absolute_ms;
}

void SessionStore::make_room(int64_t now, const std::string& principal) {
  size_t own = 0;
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (!live(it->second, now)) {
      it = sessions_.erase(it);
      continue;
    }
    if (it->second.principal == principal) ++own;
    ++it;
  }
  for (; own >= limits_.max_per_principal && own > 0; --own) end_least_recent(&principal);
  // Full: the principal's own go first, then the least recent of all.
  for (; !sessions_.empty() && sessions_.size() >= limits_.max_sessions; own -= own > 0)
    end_least_recent(own > 0 ? &principal : nullptr);
}

void SessionStore::end_least_recent(const std::string* of) {
  auto oldest = sessions_.end();
  for (auto it = sessions_.begin(); it != sessions_.end(); ++it)
    if ((!of || it->second.principal == *of) &&
        (oldest == sessions_.end() || it->second.last_seen_ms < oldest->second.last_seen_ms))
      oldest = it;
  if (oldest != sessions_.end()) sessions_.erase(oldest);
}

SessionStore::Created SessionStore::create(std::string principal, std::string token_sha256) {
  const int64_t now = clock_.now_ms();
  Created out;
  out.id = random_hex_(kIdBytes);
  out.session =
      Session{std::move(principal), std::move(token_sha256), random_hex_(kIdBytes), now, now};
  MutexLock lock(mu_);
  make_room(now, out.session.principal);
  sessions_[crypto::sha256(out.id)] = out.session;
  return out;
}

std::optional<Session> SessionStore::find(std::string_view id) {
  if (!valid_session_id(id)) return std::nullopt;
  // Found by the SHA-256 of the id: how long a lookup takes says nothing
  // about the ids that are stored.
  const std::string digest = crypto::sha256(id);
  MutexLock lock(mu_);
  auto it = sessions_.find(digest);
  if (it == sessions_.end() || !crypto::equal_constant_time(it->first, digest)) return std::nullopt;
  if (!live(it->second, clock_.now_ms())) {
    sessions_.erase(it);
    return std::nullopt;
  }
  return it->second;
}

void SessionStore::touch(std::string_view id) {
  if (!valid_session_id(id)) return;
  const std::string digest = crypto::sha256(id);
  MutexLock lock(mu_);
  auto it = sessions_.find(digest);
  const int64_t now = clock_.now_ms();
  if (it != sessions_.end() && live(it->second, now)) it->second.last_seen_ms = now;
}

bool SessionStore::remove(std::string_view id) {
  if (!valid_session_id(id)) return false;
  const std::string digest = crypto::sha256(id);
  MutexLock lock(mu_);
  return sessions_.erase(digest) > 0;
}

size_t SessionStore::size() const {
  MutexLock lock(mu_);
  return sessions_.size();
}

}  // namespace opgate::console
