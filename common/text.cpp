#include "common/text.h"

#include <fmt/format.h>

namespace opgate {

namespace {

// Unicode format characters that change how the text around them is shown
// without showing themselves: the bidirectional embeddings, overrides and
// isolates (U+202A-202E, U+2066-2069) and marks (U+061C, U+200E, U+200F),
// zero-width characters (U+200B-200D, U+2060-2064, U+FEFF) and the
// deprecated format controls U+206A-206F. "visa ending 4242" with an
// override inside can read as another string.
bool hidden_format(char32_t c) {
  return c == 0x061c || (c >= 0x200b && c <= 0x200f) || (c >= 0x202a && c <= 0x202e) ||
         (c >= 0x2060 && c <= 0x2064) || (c >= 0x2066 && c <= 0x206f) || c == 0xfeff;
}

bool continuation(unsigned char c) { return (c & 0xc0) == 0x80; }

}  // namespace

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const auto next = [&](size_t k) {
      return i + k < text.size() ? static_cast<unsigned char>(text[i + k]) : 0;
    };
    if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else if (c == 0xc2 && next(1) >= 0x80 && next(1) <= 0x9f) {
      out += fmt::format("\\u{:04x}", next(1));  // C1
      ++i;
    } else if ((c & 0xe0) == 0xc0 && continuation(next(1)) &&
               hidden_format(static_cast<char32_t>(((c & 0x1f) << 6) | (next(1) & 0x3f)))) {
      out += fmt::format("\\u{:04x}", ((c & 0x1f) << 6) | (next(1) & 0x3f));
      ++i;
    } else if ((c & 0xf0) == 0xe0 && continuation(next(1)) && continuation(next(2)) &&
               hidden_format(static_cast<char32_t>(((c & 0x0f) << 12) | ((next(1) & 0x3f) << 6) |
                                                   (next(2) & 0x3f)))) {
      out +=
          fmt::format("\\u{:04x}", ((c & 0x0f) << 12) | ((next(1) & 0x3f) << 6) | (next(2) & 0x3f));
      i += 2;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::optional<int64_t> whole_number(std::string_view text) {
  if (text.empty() || text.size() > 18) return std::nullopt;
  int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

size_t character_count(std::string_view utf8) {
  size_t n = 0;
  for (unsigned char c : utf8) n += !continuation(c);  // each lead byte begins one
  return n;
}

bool utf8_text(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c == 0) return false;
    if (c < 0x80) {
      ++i;
      continue;
    }
    // The length its lead byte gives, and the least code point that length
    // may carry (a smaller one is an overlong form).
    size_t n = 0;
    uint32_t cp = 0, least = 0;
    if ((c & 0xe0) == 0xc0) {
      n = 2, cp = c & 0x1f, least = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      n = 3, cp = c & 0x0f, least = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      n = 4, cp = c & 0x07, least = 0x10000;
    } else {
      return false;
    }
    if (i + n > bytes.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(bytes[i + k]);
      if (!continuation(b)) return false;
      cp = (cp << 6) | (b & 0x3f);
    }
    if (cp < least || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n;
  }
  return true;
}

std::string_view utf8_prefix(std::string_view utf8, size_t max_bytes) {
  if (utf8.size() <= max_bytes) return utf8;
  size_t end = max_bytes;
  // Back off the continuation bytes of a character the cut splits.
  while (end > 0 && continuation(static_cast<unsigned char>(utf8[end]))) --end;
  return utf8.substr(0, end);
}

}  // namespace opgate
