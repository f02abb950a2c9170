// `opgate-sim executor`: a declared operation's executor (operations/
// declared.h), as a team would write one. POST /{operation} with a bearer
// token, an Idempotency-Key equal to the body's operation_key and the body
// {"operation_key","owner","order_id","arguments","amount_minor","currency"}
// carries the operation out once per key and answers {"status":
// "succeeded"|"failed","id","detail"}; the same key again replays that
// answer (a different body under it: 409). GET /{operation}/{key} answers
// the same body, or 404 if the key never executed. Fault injection
// (subject: the operation key) takes the transport faults and "decline"
// (the execution fails, definitively). Admin: GET /_sim/executions, GET
// /_sim/stats, POST|GET|DELETE /_sim/faults, POST /_sim/reset.
// Thread-safe.
#pragma once

#include <boost/json.hpp>
#include <map>
#include <string>

#include "common/mutex.h"
#include "http/message.h"
#include "http/router.h"
#include "sim/faults.h"

namespace opgate::sim {

class ExecutorSim {
 public:
  // `token`: the only accepted bearer token; empty accepts any.
  explicit ExecutorSim(std::string token);
  ExecutorSim(const ExecutorSim&) = delete;
  ExecutorSim& operator=(const ExecutorSim&) = delete;

  http::Response handle(http::Request&& request) EXCLUDES(mu_);

 private:
  http::Response execute(const http::Request& request, const std::string& operation) EXCLUDES(mu_);
  http::Response lookup(const http::Request& request, const std::string& key) EXCLUDES(mu_);

  struct Execution {
    std::string operation;
    std::string request_body;  // what was asked, as sent
    boost::json::object request;
    boost::json::object answer;
  };

  std::string token_;
  FaultTable faults_;
  http::Router admin_;
  Mutex mu_;
  std::map<std::string, Execution> executions_ GUARDED_BY(mu_);  // by operation key
  int64_t requests_ GUARDED_BY(mu_) = 0;
  std::map<std::string, int64_t> posts_ GUARDED_BY(mu_);  // requests by operation key
  int64_t next_id_ GUARDED_BY(mu_) = 1;
};

}  // namespace opgate::sim
