// The MCP front door: any agent runtime reaches opgate's tools over the
// Model Context Protocol (Streamable HTTP at /mcp with "Authorization:
// Bearer TOKEN", or at /mcp/{TOKEN}, a capability URL). The agent token is
// the binding: every call acts for its one owner. Tools answer as for a
// session: a lookup at once, a refund or credit as an exact pending
// proposal; called as a task, the call is followed until its operation
// settles and then yields the verified result. Tasks are the tool calls the
// store keeps (in the proposal's own transaction), readable from any MCP
// session of the token, on any node, after restarts.
//
// What it checks before anything else: the Host and Origin (DNS
// rebinding: 403), the token (401), the session id and protocol version
// (400, or 404 for a session this token was not given).
//
// Thread-safety: handle() from the listener's threads; a tasks/result on a
// task still working is answered later, from the front door's own thread.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/live.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "http/message.h"
#include "http/router.h"
#include "mcp/call_committer.h"
#include "mcp/protocol.h"
#include "operations/order_service.h"
#include "operations/policy.h"
#include "store/port.h"

namespace opgate::mcp {

struct Access {
  // Origins (scheme://host[:port]) browsers may call from; a request from
  // the listener's own origin is always allowed.
  std::vector<std::string> allowed_origins;
  // Host header values (the host part) accepted; empty accepts any.
  std::vector<std::string> allowed_hosts;
};

struct FrontDoorOptions {
  // What tasks/get tells clients to wait between polls.
  int64_t poll_interval_ms = 2000;
  // tasks/result requests waiting for their operation at once; past this
  // they are refused (the client polls tasks/get instead).
  size_t max_waiting = 1024;
  // And per agent token: one agent cannot take every waiting place (each
  // also holds its connection open).
  size_t max_waiting_per_token = 64;
  // How long a tasks/result waits before it answers that the task is still
  // working: under the official SDK's request timeout (60 s), so that the
  // client hears it, and a client gone after its own timeout holds its
  // place no longer than this (its departure is not noticed).
  std::chrono::milliseconds longest_wait{50 * 1000};
  // How often waiting tasks are looked at.
  std::chrono::milliseconds recheck{250};
};

class FrontDoor {
 public:
  // `orders`: the business's order service (nullptr for embedded orders).
  // `wake`: called after a proposal, so the dispatcher notices it at once.
  FrontDoor(store::Storage& storage, const Live<operations::PolicyConfig>& policy,
            const Live<Access>& access, operations::OrderService* orders, Metrics& metrics,
            const Clock& clock, std::function<void()> wake, FrontDoorOptions options = {});
  ~FrontDoor();
  FrontDoor(const FrontDoor&) = delete;
  FrontDoor& operator=(const FrontDoor&) = delete;

  void handle(http::Request&& request, http::Respond respond);
  // Answers every waiting tasks/result (the daemon is draining) and stops
  // the thread that watches them.
  void stop() EXCLUDES(mu_);

 private:
  struct Caller;
  struct Waiting {
    pb::CallRef ref;
    json::value id;
    http::Respond respond;
    std::string session;
    int64_t deadline_ms = 0;
    std::string token_sha256;  // answered only while it still authenticates
    uint64_t number = 0;       // set by park()
  };
  http::Response answer(const http::Request& request, http::Respond& respond, bool& parked);
  std::optional<http::Response> refuse_origin(const http::Request& request) const;
  http::Response dispatch(const Message& m, const Caller& caller, const std::string& session,
                          http::Respond& respond, bool& parked);
  http::Response reply(std::string_view method, const json::value& id, std::string_view token_id,
                       Result<json::object> result);
  using ToolAnswered = std::function<void(Result<json::object>)>;
  // Answers through `done`: at once when the call is refused before it is
  // recorded, else once its answer is durable (on the committer's thread).
  void call_tool(const Caller& caller, const json::object& params, ToolAnswered done);
  Result<json::object> shape_answer(const std::string& name, bool as_task,
                                    const operations::PolicyConfig& policy,
                                    const CallAnswer& answer);
  Result<json::object> get_operation(const Caller& caller, const json::object& arguments);
  Result<json::object> get_task(const Caller& caller, const json::object& params);
  Result<json::object> list_tasks(const Caller& caller, const json::object& params);
  Result<json::object> cancel_task(const Caller& caller, const json::object& params);
  // The task's result if it has ended; nothing while it works.
  Result<std::optional<json::object>> task_result(const pb::CallRef& ref);
  // Parks a tasks/result until its task ends; false if too many wait.
  // Why a tasks/result cannot wait (too many wait, or too many of its
  // token's), or nothing once it waits, answered later with `respond`
  // (taken only then).
  std::optional<std::string> park(Waiting waiting, http::Respond& respond) EXCLUDES(mu_);
  void watch() EXCLUDES(mu_);

  store::Storage& storage_;
  const Live<operations::PolicyConfig>& policy_;
  const Live<Access>& access_;
  operations::OrderService* orders_;
  Metrics& metrics_;
  const Clock& clock_;
  std::function<void()> wake_;
  FrontDoorOptions options_;

  Mutex mu_;
  CondVar cv_;
  // Every parked tasks/result until it is answered, also while the
  // watcher reads its task: so the bounds count each one.
  std::vector<Waiting> waiting_ GUARDED_BY(mu_);
  uint64_t parked_ GUARDED_BY(mu_) = 0;  // tasks/result ever parked: their numbers
  bool stopping_ GUARDED_BY(mu_) = false;
  CallCommitter committer_;
  std::thread watcher_;
};

}  // namespace opgate::mcp
