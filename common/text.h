// Text that came from outside (customers, models, the platform) made safe
// to print on a terminal. Pure; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace opgate {

// Control characters (C0, DEL and the C1 range in UTF-8) shown escaped as
// \xNN or \uNNNN, never sent: a terminal would act on them (colours,
// cursor moves, window titles, clearing the screen).
std::string printable(std::string_view text);

}  // namespace opgate
