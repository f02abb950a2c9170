#include "operations/evidence.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json.hpp>
#include <map>
#include <set>

#include "common/crypto.h"
#include "operations/settlement.h"
#include "operations/state_machine.h"
#include "operations/transitions.h"
#include "operations/views.h"
#include "store/audit_chain.h"

namespace opgate::operations {

namespace json = boost::json;

namespace {

// The calls of the session around the operation that the pack keeps: those
// about its order (what the agent was shown), at most this many.
constexpr size_t kTranscriptCalls = 50;
// A proof longer than this many records is refused (export sooner).
constexpr uint64_t kMaxProofRecords = 2'000'000;

Status proof_within_bound(uint64_t from, uint64_t head) {
  if (head - from + 1 <= kMaxProofRecords) return Status::Ok();
  return make_error(errc::conflict,
                    fmt::format("The proof would span {} audit records (at most {}).",
                                head - from + 1, kMaxProofRecords));
}

// Every field the chain hash covers, exactly: the record as the API shows
// it, with its details as the stored text instead of parsed.
json::object record_json(const pb::AuditRecord& r) {
  json::object o = audit_json(r);
  o.erase("details");
  o["details_json"] = r.details_json();
  o["hash_version"] = r.hash_version();
  o["prev_hash"] = crypto::to_hex(r.prev_hash());
  return o;
}

const json::value* field(const json::value& v, std::string_view key) {
  return v.is_object() ? v.as_object().if_contains(key) : nullptr;
}

std::optional<std::string> text(const json::value& v, std::string_view key) {
  const auto* f = field(v, key);
  if (!f || !f->is_string()) return std::nullopt;
  return std::string(f->as_string());
}

std::optional<uint64_t> number(const json::value& v, std::string_view key) {
  const auto* f = field(v, key);
  if (!f || !(f->is_int64() || f->is_uint64())) return std::nullopt;
  if (f->is_int64() && f->as_int64() < 0) return std::nullopt;
  return f->to_number<uint64_t>();
}

std::optional<std::string> raw_hex(const json::value& v, std::string_view key) {
  auto t = text(v, key);
  if (!t) return std::nullopt;
  return crypto::from_hex(*t);
}

std::optional<pb::AuditRecord> record_from_json(const json::value& v) {
  if (!v.is_object()) return std::nullopt;
  pb::AuditRecord r;
  const auto seq = number(v, "seq"), at = number(v, "at_ms"), version = number(v, "hash_version");
  const auto principal = text(v, "principal"), key = text(v, "operation_key"),
             action = text(v, "action"), from = text(v, "from"), to = text(v, "to"),
             fingerprint = text(v, "fingerprint"), details = text(v, "details_json");
  const auto prev = raw_hex(v, "prev_hash"), hash = raw_hex(v, "hash");
  if (!seq || !at || !version || !principal || !key || !action || !from || !to || !fingerprint ||
      !details || !prev || !hash || v.as_object().size() != 12)
    return std::nullopt;
  r.set_seq(*seq);
  r.set_at_ms(static_cast<int64_t>(*at));
  r.set_hash_version(static_cast<uint32_t>(*version));
  r.set_principal(*principal);
  r.set_operation_key(*key);
  r.set_action(*action);
  r.set_from_state(*from);
  r.set_to_state(*to);
  r.set_fingerprint(*fingerprint);
  r.set_details_json(*details);
  r.set_prev_hash(*prev);
  r.set_hash(*hash);
  return r;
}

json::value details_of(const pb::AuditRecord& r) {
  json::error_code ec;
  auto v = json::parse(r.details_json(), ec);
  return ec ? json::value(r.details_json()) : v;
}

// What a reader wants without walking the records: the decisions and the
// provider's (or executor's) side, each pointing at its record.
void summarise(const std::vector<pb::AuditRecord>& records, json::object& body) {
  static const std::set<std::string_view> kDecisions = {"approve",         "approval_recorded",
                                                        "approval_lapsed", "deny",
                                                        "narrow",          "expire",
                                                        "reject",          "retier",
                                                        "escalate",        "resolve_succeeded",
                                                        "resolve_failed"};
  static const std::set<std::string_view> kProvider = {
      "claim",      "provider_succeeded",  "provider_refused", "provider_indeterminate",
      "restart",    "reconcile_succeeded", "reconcile_failed", "reconcile_absent",
      "late_answer"};
  json::array decisions, provider, policy;
  for (const auto& r : records) {
    json::object row = audit_json(r);
    const json::value details = row.at("details");
    if (const auto* sha = field(details, "policy_sha256"))
      policy.push_back(json::object{
          {"seq", r.seq()},
          {"action", r.action()},
          {"tier", field(details, "tier") ? *field(details, "tier") : nullptr},
          {"approvals_needed",
           field(details, "approvals_needed") ? *field(details, "approvals_needed") : nullptr},
          {"policy_sha256", *sha}});
    if (kDecisions.count(r.action())) {
      row["narrowed"] =
          r.action() == "narrow" || field(details, "original_amount_minor") != nullptr;
      decisions.push_back(std::move(row));
    } else if (kProvider.count(r.action())) {
      provider.push_back(std::move(row));
    }
  }
  body["decisions"] = std::move(decisions);
  body["provider"] = std::move(provider);
  body["policy_recorded"] = std::move(policy);
}

// Whether a record written before digests may be shown whole to `principal`.
Result<bool> shown_whole(store::Reader& reader, const pb::AuditRecord& r,
                         const Principal& principal) {
  if (principal.sees_every_owner()) return true;
  // Only an operation names its owner (a note's, a passkey's or an agent
  // token's key begins with a fixed word): the stored one's.
  if (r.operation_key().empty()) return false;
  OPGATE_ASSIGN_OR_RETURN(const auto of, reader.operation(r.operation_key()));
  return of && principal.may_act_for(of->proposal().owner());
}

Error unseen_record(uint64_t seq) {
  return make_error(
      errc::conflict,
      fmt::format("The proof passes over audit record {}, written before records could be "
                  "proven by digest, of an operation this token may not see; export it "
                  "with a token that sees every owner.",
                  seq));
}

// Refuses, before the export is audited, a proof over records `from` to
// `to` that would pass over a record the principal may not be shown.
Status proof_shown(store::Reader& reader, const Principal& principal, uint64_t from, uint64_t to) {
  for (uint64_t after = from - 1; after < to;) {
    OPGATE_ASSIGN_OR_RETURN(auto page, reader.audit(after, 1000));
    for (const auto& r : page) {
      if (r.seq() > to) return Status::Ok();
      after = r.seq();
      if (r.hash_version() == 2) continue;
      OPGATE_ASSIGN_OR_RETURN(const bool shown, shown_whole(reader, r, principal));
      if (!shown) return unseen_record(r.seq());
    }
    if (page.size() < 1000) break;
  }
  return Status::Ok();
}

// What an export vouches for: the operation and its audit records as the
// body was built from them, and the body.
struct Body {
  pb::Operation op;
  std::vector<pb::AuditRecord> records;
  std::string text;
};

Result<Body> build_body(store::Reader& reader, const std::string& key, const Principal& principal,
                        const PolicyConfig& policy) {
  OPGATE_ASSIGN_OR_RETURN(const pb::Operation op, [&]() -> Result<pb::Operation> {
    OPGATE_ASSIGN_OR_RETURN(auto found, reader.operation(key));
    if (!found || !principal.may_act_for(found->proposal().owner()))
      return make_error(errc::not_found, "No operation with that key.");
    return std::move(*found);
  }());

  json::object body{{"operation", operation_json(op, false)}, {"exported_by", principal.name}};
  // The calls that proposed or asked about it, and what the agent was shown
  // about the same order in those sessions.
  json::array calls, transcript;
  std::set<std::string> sessions, linked;
  for (const auto& ref : op.calls()) {
    OPGATE_ASSIGN_OR_RETURN(auto call, reader.call(ref));
    if (call) calls.push_back(call_json(*call));
    sessions.insert(ref.session_id());
    linked.insert(ref.session_id() + "/" + ref.call_id());
  }
  for (const auto& session : sessions) {
    OPGATE_ASSIGN_OR_RETURN(auto all, reader.calls_of(session));
    std::vector<const pb::ToolCall*> about;
    for (const auto& c : all)
      if (!linked.count(c.session_id() + "/" + c.call_id()) &&
          (c.order_id() == op.proposal().order_id() ||
           c.arguments_json().find("\"" + op.proposal().order_id() + "\"") != std::string::npos))
        about.push_back(&c);
    if (about.size() > kTranscriptCalls)
      about.erase(about.begin(), about.end() - kTranscriptCalls);  // the latest
    for (const auto* c : about) transcript.push_back(call_json(*c));
  }
  body["calls"] = std::move(calls);
  body["transcript"] = std::move(transcript);
  body["policy_at_export"] = policy_json(policy);
  body["policy_at_export_sha256"] = policy_sha256(policy);
  if (is(op, State::settled)) {
    const auto result = settled_result(op);
    json::error_code ec;
    body["result"] = json::parse(result.output(), ec);
    if (ec) body["result"] = result.output();
  }
  OPGATE_ASSIGN_OR_RETURN(auto before, reader.audit_of(key));
  summarise(before, body);
  return Body{op, std::move(before), json::serialize(body)};
}

}  // namespace

Result<std::string> export_evidence(store::Storage& storage, const std::string& key,
                                    const Principal& principal, const PolicyConfig& policy) {
  auto& reader = storage.reader();
  std::string body_text, body_sha256;
  for (int attempt = 1;; ++attempt) {
    OPGATE_ASSIGN_OR_RETURN(const Body built, build_body(reader, key, principal, policy));
    // A proof too long to build, or one over a record the token may not be
    // shown, is refused before the export is audited.
    if (!built.records.empty()) {
      OPGATE_ASSIGN_OR_RETURN(const store::AuditHead now, reader.audit_head());
      OPGATE_TRY(proof_within_bound(built.records.front().seq(), now.seq + 1));
      OPGATE_TRY(proof_shown(reader, principal, built.records.front().seq(), now.seq));
    }
    body_text = built.text;
    body_sha256 = crypto::sha256_hex(body_text);
    // The export is audited, with the body's hash: from here on the chain
    // vouches for the body too. Only while the operation and its records
    // are still what the body was built from: one settled meanwhile is
    // exported again, as it is now.
    bool changed = false;
    OPGATE_TRY(storage.transact([&](store::Transaction& txn) -> Status {
      OPGATE_ASSIGN_OR_RETURN(auto op_now, txn.operation(key));
      OPGATE_ASSIGN_OR_RETURN(auto records_now, txn.audit_of(key));
      changed = !op_now || op_now->SerializeAsString() != built.op.SerializeAsString() ||
                records_now.size() != built.records.size();
      if (changed) return Status::Ok();
      pb::AuditRecord r;
      r.set_principal(principal.name);
      r.set_operation_key(key);
      r.set_action("evidence_exported");
      r.set_from_state(std::string(state_text(built.op)));
      r.set_to_state(std::string(state_text(built.op)));
      r.set_fingerprint(built.op.fingerprint());
      r.set_details_json(details({{"body_sha256", body_sha256}}));
      txn.append_audit(std::move(r));
      return Status::Ok();
    }));
    if (!changed) break;
    if (attempt == 3)
      return make_error(errc::conflict,
                        "The operation changed while it was being exported; export it again.");
  }

  OPGATE_ASSIGN_OR_RETURN(auto records, reader.audit_of(key));
  if (records.empty()) return make_error(errc::internal, "the operation has no audit records");
  OPGATE_ASSIGN_OR_RETURN(const store::AuditHead head, reader.audit_head());
  const uint64_t from = records.front().seq();
  OPGATE_TRY(proof_within_bound(from, head.seq));
  std::set<uint64_t> own;
  for (const auto& r : records) own.insert(r.seq());
  // The proof: every record from the key's first to the head, its own in
  // full (in "records"), every other by the digest of its fields.
  json::array links;
  uint64_t after = from - 1;
  store::AuditHead reached{from - 1, records.front().prev_hash()};
  while (after < head.seq) {
    OPGATE_ASSIGN_OR_RETURN(auto page, reader.audit(after, 1000));
    if (page.empty()) break;
    for (const auto& r : page) {
      if (r.seq() > head.seq) break;
      after = r.seq();
      reached = {r.seq(), r.hash()};
      if (own.count(r.seq())) {
        links.push_back(json::object{{"seq", r.seq()}});
      } else if (r.hash_version() == 2) {
        links.push_back(json::object{{"seq", r.seq()},
                                     {"digest", crypto::to_hex(store::audit_fields_digest(r))}});
      } else {
        // Written before digests: shown whole, to a token that may see it
        // (proof_shown checked them before the export was audited).
        OPGATE_ASSIGN_OR_RETURN(const bool shown, shown_whole(reader, r, principal));
        if (!shown) return unseen_record(r.seq());
        links.push_back(json::object{{"seq", r.seq()}, {"record", record_json(r)}});
      }
    }
    if (page.size() < 1000) break;
  }
  json::array own_records;
  for (const auto& r : records)
    if (r.seq() <= reached.seq) own_records.push_back(record_json(r));
  json::object pack{
      {"format", kEvidenceFormat},
      {"body", json::parse(body_text)},
      {"body_sha256", body_sha256},
      {"audit", json::object{{"records", std::move(own_records)},
                             {"from_seq", from},
                             {"links", std::move(links)},
                             {"head", json::object{{"seq", reached.seq},
                                                   {"hash", crypto::to_hex(reached.hash)}}}}}};
  return json::serialize(pack) + "\n";
}

EvidenceCheck verify_evidence(std::string_view text_in,
                              const std::optional<WitnessedHead>& witness) {
  EvidenceCheck out;
  auto fail = [&](std::string problem) {
    out.ok = false;
    out.problem = std::move(problem);
    return out;
  };
  if (text_in.empty() || text_in.back() != '\n')
    return fail("the file does not end as a pack does");
  const std::string_view doc = text_in.substr(0, text_in.size() - 1);
  json::error_code ec;
  const json::value pack = json::parse(doc, ec);
  if (ec || !pack.is_object()) return fail("the file is not a JSON document");
  // Any other spelling of the same document is a changed byte too.
  if (json::serialize(pack) != doc) return fail("the file is not in the form it was exported in");
  if (text(pack, "format") != kEvidenceFormat) return fail("not an opgate evidence pack");
  const auto* body = field(pack, "body");
  const auto body_sha256 = text(pack, "body_sha256");
  const auto* audit = field(pack, "audit");
  if (!body || !body->is_object() || !body_sha256 || !audit)
    return fail("the pack lacks its body, its hash or its audit records");
  if (crypto::sha256_hex(json::serialize(*body)) != *body_sha256)
    return fail("the body does not match its hash: it was changed");
  const auto key = text(*field(*body, "operation"), "key");
  if (!key) return fail("the body names no operation");
  out.operation_key = *key;

  // The key's records, by seq.
  const auto* records = field(*audit, "records");
  const auto* links = field(*audit, "links");
  const auto from = number(*audit, "from_seq");
  const auto* head = field(*audit, "head");
  if (!records || !records->is_array() || !links || !links->is_array() || !from || !head)
    return fail("the audit section is incomplete");
  std::map<uint64_t, pb::AuditRecord> own;
  bool exported = false;
  for (const auto& v : records->as_array()) {
    auto r = record_from_json(v);
    if (!r) return fail("an audit record is malformed");
    if (r->operation_key() != *key)
      return fail(fmt::format("audit record {} is about another operation", r->seq()));
    // Each record once: a second copy of one would never be hash-checked
    // (the walk below checks the records by seq), yet could vouch for a body.
    const uint64_t seq = r->seq();
    exported = exported || (r->action() == "evidence_exported" &&
                            text(details_of(*r), "body_sha256") == *body_sha256);
    if (!own.emplace(seq, std::move(*r)).second)
      return fail(fmt::format("audit record {} appears twice", seq));
  }
  out.records = own.size();
  if (own.empty() || own.begin()->first != *from)
    return fail("the proof does not start at the operation's first audit record");
  if (!exported) return fail("no audit record of this export vouches for the body");

  // Walk the chain from the first record to the head.
  std::string hash = own.begin()->second.prev_hash();
  uint64_t expect = *from;
  std::optional<std::string> witnessed_hash;
  for (const auto& link : links->as_array()) {
    const auto seq = number(link, "seq");
    if (!seq || *seq != expect)
      return fail(fmt::format("record {} is missing from the proof", expect));
    if (auto it = own.find(*seq); it != own.end()) {
      if (it->second.prev_hash() != hash ||
          store::audit_hash(it->second, hash) != it->second.hash())
        return fail(fmt::format("audit record {} was altered: its hash does not match", *seq));
      hash = it->second.hash();
    } else if (auto digest = raw_hex(link, "digest")) {
      if (digest->size() != 32) return fail(fmt::format("record {}'s digest is malformed", *seq));
      hash = store::audit_link(hash, *digest);
    } else if (const auto* full = field(link, "record")) {
      auto r = record_from_json(*full);
      if (!r || r->seq() != *seq || store::audit_hash(*r, hash) != r->hash())
        return fail(fmt::format("audit record {} does not link", *seq));
      hash = r->hash();
    } else {
      return fail(fmt::format("record {} is neither the operation's nor proven", *seq));
    }
    if (witness && witness->seq == *seq) witnessed_hash = hash;
    ++expect;
  }
  if (expect - 1 < own.rbegin()->first)
    return fail("the proof ends before the operation's last record");
  const auto head_seq = number(*head, "seq");
  const auto head_hash = raw_hex(*head, "hash");
  if (!head_seq || !head_hash || *head_seq != expect - 1 || *head_hash != hash)
    return fail("the chain does not reach the head the pack names");
  out.head = {*head_seq, *head_hash};
  if (witness) {
    if (!witnessed_hash)
      return fail(fmt::format("the witnessed head {} is outside the proof (records {} to {})",
                              witness->seq, *from, *head_seq));
    if (*witnessed_hash != witness->hash)
      return fail(fmt::format("record {} is not the one the witness saw", witness->seq));
    out.witness_checked = true;
  }
  out.ok = true;
  return out;
}

}  // namespace opgate::operations
