#include "operations/order_service.h"

namespace opgate::operations {

std::string_view read_name(OrderRead read) {
  switch (read) {
    case OrderRead::found:
      return "found";
    case OrderRead::absent:
      return "absent";
    case OrderRead::unavailable:
      break;
  }
  return "unavailable";
}

}  // namespace opgate::operations
