#include "operations/payment_provider.h"

#include "common/text.h"

namespace opgate::operations {

std::string_view to_string(Verdict v) {
  switch (v) {
    case Verdict::succeeded:
      return "succeeded";
    case Verdict::pending:
      return "pending";
    case Verdict::refused:
      return "refused";
    case Verdict::indeterminate:
      break;
  }
  return "indeterminate";
}

PaymentResult fit_for_records(PaymentResult answer) {
  auto fit = [](std::string& text, size_t max_bytes) {
    text.resize(utf8_prefix(text, max_bytes).size());
  };
  fit(answer.object_id, 255);
  fit(answer.provider_status, 64);
  fit(answer.error, 500);
  fit(answer.attention, 500);
  return answer;
}

}  // namespace opgate::operations
