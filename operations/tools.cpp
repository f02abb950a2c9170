#include "operations/tools.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <boost/json.hpp>
#include <map>
#include <set>

#include "common/text.h"
#include "operations/keys.h"
#include "operations/orders.h"
#include "operations/proposals.h"
#include "operations/settlement.h"

namespace opgate::operations {

namespace json = boost::json;

json::array tool_definitions(const PolicyConfig& policy) {
  auto id_schema = [](std::string_view description) {
    return json::object{
        {"type", "string"}, {"pattern", "^[A-Za-z0-9._-]{1,64}$"}, {"description", description}};
  };
  auto function = [](std::string_view name, std::string_view description, json::object properties,
                     json::array required, bool strict) {
    return json::object{{"type", "function"},
                        {"name", name},
                        {"description", description},
                        {"parameters", json::object{{"type", "object"},
                                                    {"properties", std::move(properties)},
                                                    {"required", std::move(required)},
                                                    {"additionalProperties", false}}},
                        {"strict", strict}};
  };
  std::map<std::string_view, json::object> all;
  all["lookup_order"] = function(
      "lookup_order",
      "Look up one of the customer's orders, its delivery history and the server's refund "
      "policy for it. Read-only.",
      json::object{{"order_id", id_schema("The order id.")}}, json::array{"order_id"}, true);
  all["add_internal_note"] = function(
      "add_internal_note",
      "Add an internal note to an order for the support team; the customer never sees it. "
      "Cite as evidence the call ids of this session's lookup_order calls for the same order: "
      "the server refuses a note whose evidence it cannot find.",
      json::object{
          {"order_id", id_schema("The order id.")},
          {"text", json::object{{"type", "string"},
                                {"minLength", 1},
                                {"maxLength", static_cast<int64_t>(kNoteMaxChars)},
                                {"description", "The note."}}},
          {"evidence",
           json::object{{"type", "array"},
                        {"minItems", 1},
                        {"maxItems", policy.note_max_evidence},
                        {"items", id_schema("A call id of this session about this order.")},
                        {"description", "What the note rests on."}}}},
      json::array{"order_id", "text", "evidence"}, true);
  all["draft_customer_reply"] = function(
      "draft_customer_reply",
      "Draft a reply to the customer about an order. It is stored for a person on the support "
      "team to read, edit and send; nothing is sent to the customer by this tool.",
      json::object{{"order_id", id_schema("The order id.")},
                   {"text", json::object{{"type", "string"},
                                         {"minLength", 1},
                                         {"maxLength", static_cast<int64_t>(kDraftMaxChars)},
                                         {"description", "The reply, as it would be sent."}}}},
      json::array{"order_id", "text"}, true);
  all["request_refund"] = function(
      "request_refund",
      "Ask for a full refund of an order. The server computes the amount; a person must "
      "approve it before anything happens. The result reports the final outcome.",
      json::object{{"order_id", id_schema("The order id.")},
                   {"reason", json::object{{"type", "string"},
                                           {"maxLength", 500},
                                           {"description", "Why the customer wants it."}}}},
      json::array{"order_id"}, false);
  all["issue_account_credit"] = function(
      "issue_account_credit",
      "Propose an account credit for an order, in the order's currency. A person must approve "
      "it; large credits need a supervisor and some are refused by policy.",
      json::object{
          {"order_id", id_schema("The order id.")},
          {"amount_minor",
           json::object{
               {"type", "integer"}, {"minimum", 1}, {"description", "Amount in minor units."}}},
          {"currency", json::object{{"type", "string"}, {"pattern", "^[A-Z]{3}$"}}},
          {"reason_code",
           json::object{{"type", "string"},
                        {"enum", json::array{"DELIVERY_DELAY", "DAMAGED_ITEM", "GOODWILL"}}}}},
      json::array{"order_id", "amount_minor", "currency", "reason_code"}, true);
  all["cancel_order"] = function(
      "cancel_order",
      "Ask to cancel an order that was not delivered and refund what remains of it. The server "
      "computes the refund; a supervisor must approve it before anything happens. The result "
      "reports the final outcome.",
      json::object{{"order_id", id_schema("The order id.")},
                   {"reason", json::object{{"type", "string"},
                                           {"minLength", 1},
                                           {"maxLength", 500},
                                           {"description", "Why the customer wants it."}}}},
      json::array{"order_id", "reason"}, true);
  json::array tools;
  for (auto name : operations::kToolNames)
    if (policy.enabled(name)) tools.push_back(all.at(name));
  for (const auto& op : policy.declared) tools.push_back(declared_tool_definition(op));
  return tools;
}

std::string tool_definitions_json(const PolicyConfig& policy) {
  return json::serialize(tool_definitions(policy));
}

namespace {

pb::ToolResult success_result(const json::object& output) {
  pb::ToolResult r;
  r.set_success(true);
  r.set_output(json::serialize(output));
  return r;
}

struct ArgSpec {
  std::set<std::string> required;
  std::set<std::string> optional;
};

// Parses and checks the argument object's shape: an object, required keys
// present, no unknown keys. Error text names the problem, never internals.
std::optional<std::string> check_shape(std::string_view text, const ArgSpec& spec,
                                       json::object& out) {
  json::error_code ec;
  auto value = json::parse(text, ec);
  if (ec || !value.is_object()) return "The arguments must be a JSON object.";
  out = value.as_object();
  for (const auto& [k, v] : out) {
    std::string key(k);
    if (!spec.required.count(key) && !spec.optional.count(key))
      return fmt::format("Unknown argument '{}'; this tool does not accept it.",
                         utf8_prefix(key, 64));
  }
  for (const auto& key : spec.required)
    if (!out.contains(key)) return fmt::format("Missing required argument '{}'.", key);
  return std::nullopt;
}

std::optional<std::string> get_order_id(const json::object& args, std::string& out) {
  const auto& v = args.at("order_id");
  if (!v.is_string()) return "order_id must be a string.";
  out = std::string(v.as_string());
  if (!operations::valid_identifier(out))
    return "order_id must be 1-64 characters from A-Z, a-z, 0-9, '.', '_' and '-'.";
  return std::nullopt;
}

constexpr std::string_view kNotFound = "No order with that id was found for this customer.";

// The bound owner's order, or nothing: another owner's order is
// indistinguishable from a missing one.
Result<std::optional<OrderView>> owned_order(const OrderLookup& lookup, const std::string& order_id,
                                             const std::string& owner) {
  OPGATE_ASSIGN_OR_RETURN(auto view, lookup(order_id));
  if (!view || view->order.owner() != owner) return std::optional<OrderView>();
  return view;
}

ToolOutcome refuse(std::string error) { return {failure_result(std::move(error)), {}, {}, {}, {}}; }

Result<ToolOutcome> lookup_order(std::string_view args_text, const std::string& owner,
                                 const OrderLookup& lookup, const PolicyConfig& policy,
                                 int64_t now_s) {
  json::object args;
  if (auto e = check_shape(args_text, {{"order_id"}, {}}, args)) return refuse(*e);
  std::string order_id;
  if (auto e = get_order_id(args, order_id)) return refuse(*e);
  OPGATE_ASSIGN_OR_RETURN(auto view, owned_order(lookup, order_id, owner));
  if (!view) return refuse(std::string(kNotFound));
  const auto& order = view->order;
  const auto& funds = view->funds;
  auto decision = operations::decide_refund(order, funds, policy, now_s);
  json::object out{
      {"order", json::object{{"order_id", order.order_id()},
                             {"amount_minor", order.amount_minor()},
                             {"currency", order.currency()},
                             {"status", operations::order_status_text(order.status())},
                             {"payment_method", order.payment_method()},
                             {"placed_at", order.placed_at()},
                             // Free text from outside: data for the model, never policy input.
                             {"note", order.note()},
                             // Events as the business reports them: each detail is free
                             // text from outside (a carrier), data only; "delivered" is
                             // the server's reading of the statuses.
                             {"delivery", operations::deliveries_json(order)},
                             {"delivered", operations::delivered(order)}}},
      {"money", json::object{{"paid_minor", order.amount_minor()},
                             {"refunded_minor", order.refunded_minor() + funds.refunded_minor()},
                             {"credited_minor", funds.credited_minor()},
                             {"in_progress_minor", funds.reserved_minor()},
                             {"remaining_minor", operations::remaining_minor(order, funds)},
                             {"currency", order.currency()}}},
      {"refund_policy", json::object{{"refundable", decision.allowed},
                                     {"refundable_minor", decision.refundable_minor},
                                     {"currency", order.currency()},
                                     {"window_days", policy.refund_window_days},
                                     {"requires_approval", true},
                                     {"reason", decision.reason}}}};
  return ToolOutcome{success_result(out), {}, order.order_id(), {}, {}};
}

pb::Proposal base_proposal(const pb::Order& order, std::string_view kind) {
  pb::Proposal p;
  p.set_kind(std::string(kind));
  p.set_owner(order.owner());
  p.set_order_id(order.order_id());
  p.set_currency(order.currency());
  p.set_payment_intent(order.payment_intent());
  p.set_customer(order.customer());
  p.set_payment_method(order.payment_method());
  p.set_order_amount_minor(order.amount_minor());
  p.set_order_currency(order.currency());
  p.set_order_status(order.status());
  return p;
}

struct RefundArgs {
  std::string order_id;
  std::string reason;
};

// request_refund's arguments, or the refusal that names what is wrong.
std::optional<std::string> parse_refund_args(std::string_view args_text, RefundArgs& out) {
  json::object args;
  if (auto e = check_shape(args_text, {{"order_id"}, {"reason"}}, args)) return e;
  if (auto e = get_order_id(args, out.order_id)) return e;
  if (auto it = args.find("reason"); it != args.end()) {
    if (!it->value().is_string()) return "reason must be a string.";
    out.reason = std::string(it->value().as_string());
    if (character_count(out.reason) > 500) return "reason must be at most 500 characters.";
  }
  return std::nullopt;
}

Result<ToolOutcome> request_refund(std::string_view args_text, const std::string& owner,
                                   const OrderLookup& lookup, const PolicyConfig& policy,
                                   int64_t now_s) {
  RefundArgs parsed;
  if (auto e = parse_refund_args(args_text, parsed)) return refuse(*e);
  const std::string& order_id = parsed.order_id;
  const std::string& reason = parsed.reason;
  OPGATE_ASSIGN_OR_RETURN(auto view, owned_order(lookup, order_id, owner));
  if (!view) return refuse(std::string(kNotFound));
  auto decision = operations::decide_refund(view->order, view->funds, policy, now_s);
  if (!decision.allowed) return refuse(decision.reason);
  pb::Proposal p = base_proposal(view->order, operations::kFullRefund);
  p.set_amount_minor(decision.refundable_minor);
  p.set_reason(reason);
  p.set_tier(policy.tier("request_refund"));
  p.set_effect(effect_text(p));
  return ToolOutcome{{}, p, p.order_id(), {}, {}};
}

Result<ToolOutcome> issue_account_credit(std::string_view args_text, const std::string& owner,
                                         const OrderLookup& lookup, const PolicyConfig& policy,
                                         int64_t now_s) {
  json::object args;
  if (auto e = check_shape(args_text, {{"order_id", "amount_minor", "currency", "reason_code"}, {}},
                           args))
    return refuse(*e);
  std::string order_id;
  if (auto e = get_order_id(args, order_id)) return refuse(*e);
  const auto& amount = args.at("amount_minor");
  if (!amount.is_int64() && !amount.is_uint64())
    return refuse("amount_minor must be an integer number of minor units.");
  if (amount.is_uint64() && amount.as_uint64() > static_cast<uint64_t>(INT64_MAX))
    return refuse("amount_minor is too large.");
  const int64_t amount_minor = amount.to_number<int64_t>();
  const auto& currency = args.at("currency");
  const auto& code = args.at("reason_code");
  if (!currency.is_string() || currency.as_string().size() != 3)
    return refuse("currency must be a three-letter code.");
  if (!code.is_string() || code.as_string().size() > 64)
    return refuse("reason_code must be one of the allowed codes.");
  OPGATE_ASSIGN_OR_RETURN(auto view, owned_order(lookup, order_id, owner));
  if (!view) return refuse(std::string(kNotFound));
  std::string cur(currency.as_string());
  std::string reason_code(code.as_string());
  auto decision = operations::decide_credit(view->order, view->funds, amount_minor, cur,
                                            reason_code, policy, now_s);
  if (!decision.allowed) return refuse(decision.reason);
  pb::Proposal p = base_proposal(view->order, operations::kAccountCredit);
  p.set_amount_minor(amount_minor);
  p.set_reason(reason_code);
  p.set_tier(decision.tier);
  p.set_effect(effect_text(p));
  return ToolOutcome{{}, p, p.order_id(), {}, {}};
}

Result<ToolOutcome> cancel_order(std::string_view args_text, const std::string& owner,
                                 const OrderLookup& lookup, const PolicyConfig& policy,
                                 int64_t now_s) {
  json::object args;
  if (auto e = check_shape(args_text, {{"order_id", "reason"}, {}}, args)) return refuse(*e);
  std::string order_id;
  if (auto e = get_order_id(args, order_id)) return refuse(*e);
  const auto& reason = args.at("reason");
  if (!reason.is_string() || reason.as_string().empty() ||
      character_count(reason.as_string()) > 500)
    return refuse("reason must be text of 1 to 500 characters.");
  OPGATE_ASSIGN_OR_RETURN(auto view, owned_order(lookup, order_id, owner));
  if (!view) return refuse(std::string(kNotFound));
  auto decision = operations::decide_cancel(view->order, view->funds, policy, now_s);
  if (!decision.allowed) return refuse(decision.reason);
  pb::Proposal p = base_proposal(view->order, operations::kCancelOrder);
  p.set_amount_minor(decision.refund_minor);
  p.set_reason(std::string(reason.as_string()));
  p.set_tier(policy.tier("cancel_order"));
  p.set_effect(effect_text(p));
  return ToolOutcome{{}, p, order_id, {}, {}};
}

// A declared operation: the arguments checked against its schema, the
// subject order the owner's, and when it moves money, an amount the order
// still has (invariant 10). The proposal carries the checked arguments.
Result<ToolOutcome> declared_operation(const DeclaredOperation& op, std::string_view args_text,
                                       const std::string& owner, const OrderLookup& lookup) {
  auto checked = check_declared_arguments(op, args_text);
  if (auto* refusal = std::get_if<std::string>(&checked)) return refuse(*refusal);
  const auto& args = std::get<json::object>(checked);
  const std::string order_id(args.at("order_id").as_string());
  OPGATE_ASSIGN_OR_RETURN(auto view, owned_order(lookup, order_id, owner));
  if (!view) return refuse(std::string(kNotFound));
  pb::Proposal p = base_proposal(view->order, op.name);
  p.set_money(std::string(to_string(op.money)));
  p.set_arguments_json(json::serialize(args));
  if (op.money != Money::none) {
    const int64_t amount = args.at(op.amount_argument).as_int64();
    if (auto refusal = money_refusal(view->order, view->funds, amount)) return refuse(*refusal);
    p.set_amount_minor(amount);
  }
  p.set_tier(declared_tier(op, p.amount_minor(), p.currency()));
  p.set_effect(render_effect(op, args, format_money(p.amount_minor(), p.currency()), order_id,
                             p.customer(), p.payment_method()));
  return ToolOutcome{{}, p, order_id, {}, {}};
}

// The evidence rule: every reference is a call of this session that showed
// or acted on this same order (lookup_order answered it, or a proposal was
// made for it). Anything else refuses the note as a whole.
Result<ToolOutcome> add_internal_note(std::string_view args_text, const std::string& owner,
                                      const OrderLookup& lookup, const PolicyConfig& policy,
                                      const CallsLookup& session_calls) {
  json::object args;
  if (auto e = check_shape(args_text, {{"order_id", "text", "evidence"}, {}}, args))
    return refuse(*e);
  Note note;
  if (auto e = get_order_id(args, note.order_id)) return refuse(*e);
  const auto& text = args.at("text");
  if (!text.is_string() || text.as_string().empty() || text.as_string().size() > kNoteMaxChars)
    return refuse(fmt::format("text must be 1 to {} characters.", kNoteMaxChars));
  note.text = std::string(text.as_string());
  const auto& evidence = args.at("evidence");
  if (!evidence.is_array() || evidence.as_array().empty() ||
      evidence.as_array().size() > static_cast<size_t>(policy.note_max_evidence))
    return refuse(
        fmt::format("evidence must list 1 to {} call ids of this session's calls about the order.",
                    policy.note_max_evidence));
  for (const auto& ref : evidence.as_array()) {
    if (!ref.is_string() || !operations::valid_identifier(std::string(ref.as_string())))
      return refuse("Each piece of evidence must be a call id of this session.");
    note.evidence.emplace_back(ref.as_string());
  }
  OPGATE_ASSIGN_OR_RETURN(auto view, owned_order(lookup, note.order_id, owner));
  if (!view) return refuse(std::string(kNotFound));
  if (!session_calls) return make_error(errc::internal, "add_internal_note needs the session.");
  for (const auto& ref : note.evidence) {
    OPGATE_ASSIGN_OR_RETURN(auto it, session_calls(ref));
    if (!it)
      return refuse(fmt::format(
          "Evidence '{}' is not a call of this session; cite the call ids of your lookup_order "
          "calls for this order. The note was not stored.",
          ref));
    if (it->name() != "lookup_order")
      return refuse(fmt::format(
          "Evidence '{}' is not a lookup_order call; cite the calls that looked this order up. "
          "The note was not stored.",
          ref));
    if (it->order_id() != note.order_id)
      return refuse(fmt::format(
          "Evidence '{}' is not about order {}; cite calls that looked this order up. The note "
          "was not stored.",
          ref, note.order_id));
  }
  std::string order_id = note.order_id;
  return ToolOutcome{{}, {}, order_id, std::move(note), {}};
}

// Drafting is allowed at once: it stores text for a person and sends
// nothing. The order must be the owner's, as for every tool.
Result<ToolOutcome> draft_customer_reply(std::string_view args_text, const std::string& owner,
                                         const OrderLookup& lookup) {
  json::object args;
  if (auto e = check_shape(args_text, {{"order_id", "text"}, {}}, args)) return refuse(*e);
  DraftReply draft;
  if (auto e = get_order_id(args, draft.order_id)) return refuse(*e);
  const auto& text = args.at("text");
  if (!text.is_string() || text.as_string().empty() || text.as_string().size() > kDraftMaxChars)
    return refuse(fmt::format("text must be 1 to {} characters.", kDraftMaxChars));
  draft.text = std::string(text.as_string());
  OPGATE_ASSIGN_OR_RETURN(auto view, owned_order(lookup, draft.order_id, owner));
  if (!view) return refuse(std::string(kNotFound));
  std::string order_id = draft.order_id;
  return ToolOutcome{{}, {}, order_id, {}, std::move(draft)};
}

}  // namespace

pb::ToolResult draft_result(const DraftReply& draft, std::string_view draft_id) {
  return success_result(json::object{{"status", "drafted"},
                                     {"draft_id", draft_id},
                                     {"order_id", draft.order_id},
                                     {"sent", false},
                                     {"next",
                                      "A person on the support team reads it and sends "
                                      "it, or not. Do not tell the customer it was "
                                      "sent."}});
}

pb::ToolResult note_result(const Note& note, std::string_view note_id) {
  json::array cited;
  for (const auto& ref : note.evidence) cited.push_back(json::string(ref));
  return success_result(json::object{{"status", "noted"},
                                     {"note_id", note_id},
                                     {"order_id", note.order_id},
                                     {"evidence", std::move(cited)},
                                     {"visible_to_customer", false}});
}

std::optional<std::string> proposal_kind(std::string_view tool, const PolicyConfig& policy) {
  if (!policy.offers(tool) || !policy.proposes(tool)) return std::nullopt;
  if (tool == "request_refund") return std::string(kFullRefund);
  if (tool == "issue_account_credit") return std::string(kAccountCredit);
  if (tool == "cancel_order") return std::string(kCancelOrder);
  if (const auto* declared = policy.declared_operation(tool)) return declared->name;
  return std::nullopt;
}

std::optional<std::string> refund_order_id(std::string_view arguments_json) {
  RefundArgs parsed;
  if (parse_refund_args(arguments_json, parsed)) return std::nullopt;
  return parsed.order_id;
}

Result<ToolOutcome> dispatch_tool(std::string_view name, std::string_view arguments_json,
                                  const std::string& owner, const OrderLookup& lookup,
                                  const PolicyConfig& policy, int64_t now_s,
                                  const CallsLookup& session_calls) {
  if (!policy.offers(name)) {
    std::vector<std::string_view> offered;
    for (auto tool : operations::kToolNames)
      if (policy.enabled(tool)) offered.push_back(tool);
    for (const auto& op : policy.declared) offered.push_back(op.name);
    return refuse(
        fmt::format("Unknown tool; the available tools are {}.", fmt::join(offered, ", ")));
  }
  auto outcome = [&]() -> Result<ToolOutcome> {
    if (const auto* op = policy.declared_operation(name))
      return declared_operation(*op, arguments_json, owner, lookup);
    if (name == "lookup_order") return lookup_order(arguments_json, owner, lookup, policy, now_s);
    if (name == "add_internal_note")
      return add_internal_note(arguments_json, owner, lookup, policy, session_calls);
    if (name == "draft_customer_reply") return draft_customer_reply(arguments_json, owner, lookup);
    if (name == "request_refund")
      return request_refund(arguments_json, owner, lookup, policy, now_s);
    if (name == "issue_account_credit")
      return issue_account_credit(arguments_json, owner, lookup, policy, now_s);
    return cancel_order(arguments_json, owner, lookup, policy, now_s);
  }();
  // The order service could not answer: a temporary refusal the model can
  // retry, never a guess from stale data.
  if (!outcome && outcome.error().is(errc::orders_unavailable))
    return refuse(
        "The order service is unavailable right now, so nothing was looked up or done. Try "
        "again in a minute.");
  return outcome;
}

std::optional<std::string> order_id_argument(std::string_view arguments_json) {
  json::error_code ec;
  auto v = json::parse(arguments_json, ec);
  if (ec || !v.is_object()) return std::nullopt;
  auto* id = v.as_object().if_contains("order_id");
  if (!id || !id->is_string() || !operations::valid_identifier(id->as_string()))
    return std::nullopt;
  return std::string(id->as_string());
}

}  // namespace opgate::operations
