#include "operations/payment_provider.h"

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

}  // namespace opgate::operations
