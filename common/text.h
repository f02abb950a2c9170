// Text that came from outside (customers, models, the platform) made safe
// to print on a terminal. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace opgate {

// Control characters (C0, DEL and the C1 range in UTF-8) shown escaped as
// \xNN or \uNNNN, never sent: a terminal would act on them (colours,
// cursor moves, window titles, clearing the screen). Unicode format
// characters that reorder or hide text (bidirectional controls such as
// U+202E, zero-width characters) are escaped as \uNNNN too, so what is
// shown is what the text holds.
std::string printable(std::string_view text);

// Whether `bytes` is well-formed UTF-8 (no overlong forms, surrogates or
// code points past U+10FFFF) without a NUL: text a database's text column,
// a log or a terminal takes as it is.
bool utf8_text(std::string_view bytes);

// The number `text` writes in decimal digits alone (no sign, space, point
// or exponent), at most 18 of them so that it fits: std::stoll would read
// "12abc" as 12, "1.7e12" as 1 and wrap "-1" for an unsigned count.
std::optional<int64_t> whole_number(std::string_view text);

// The characters (Unicode code points) of valid UTF-8 text, as JSON
// Schema's minLength and maxLength count them: not its bytes.
size_t character_count(std::string_view utf8);

// The longest start of valid UTF-8 text that fits in `max_bytes` and ends
// on a character's boundary: a cut that never splits a character, so what
// is kept (stored, shown) is valid UTF-8 still.
std::string_view utf8_prefix(std::string_view utf8, size_t max_bytes);

// &, <, >, " and ' as character references: text safe inside HTML or XML
// markup (attribute values included).
std::string html_escape(std::string_view text);

}  // namespace opgate
