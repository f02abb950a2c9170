// Terminal-safe text and the metrics registry's locking: a scrape never
// holds up the request path.
#include <doctest/doctest.h>

#include <future>
#include <latch>

#include "common/metrics.h"
#include "common/text.h"

using namespace opgate;

TEST_CASE("control characters are shown escaped, never sent to the terminal") {
  CHECK(printable("plain text, ünïcode") == "plain text, ünïcode");
  CHECK(printable("\x1b[2J\x1b]0;owned\x07") == "\\x1b[2J\\x1b]0;owned\\x07");
  CHECK(printable("a\nb\rc\td") == "a\\x0ab\\x0dc\\x09d");
  // Bidirectional controls and zero-width characters: shown, never applied.
  CHECK(printable("visa ending \u202e2424\u202c") == "visa ending \\u202e2424\\u202c");
  CHECK(printable("\u2066a\u2069\u2067b\u2068") == "\\u2066a\\u2069\\u2067b\\u2068");
  CHECK(printable("zero\u200bwidth\ufeff\u200f\u061c") == "zero\\u200bwidth\\ufeff\\u200f\\u061c");
  // Neighbours of those ranges are ordinary text.
  CHECK(printable("\u2029\u2030 \u2065x \u20ac") == "\u2029\u2030 \u2065x \u20ac");
  CHECK(printable("del\x7f") == "del\\x7f");
  CHECK(printable("csi\xc2\x9b"
                  "31m") == "csi\\u009b31m");  // C1 CSI in UTF-8
}

TEST_CASE("text is as long as its characters, not its bytes") {
  CHECK(character_count("") == 0);
  CHECK(character_count("refund") == 6);
  CHECK(character_count("ünïcode") == 7);         // two-byte characters
  CHECK(character_count("\u8fd4\u91d1") == 2);    // three bytes each
  CHECK(character_count("\U0001F4E6 box") == 5);  // four bytes, then ASCII
}

TEST_CASE("UTF-8 text is well-formed and holds no NUL") {
  CHECK(utf8_text(""));
  CHECK(utf8_text("demo-user:ORDER-100:full-refund:v1"));
  CHECK(utf8_text("caf\u00e9 \u8fd4\u91d1 \U0001F4E6"));
  for (std::string_view bad :
       {std::string_view("a\0b", 3), std::string_view("\xff"), std::string_view("\xc0\xaf"),
        std::string_view("\xe0\x80\xaf"), std::string_view("\xed\xa0\x80"),
        std::string_view("\xf4\x90\x80\x80"), std::string_view("\xc3"), std::string_view("\x80"),
        std::string_view("\xe2\x82")})
    CHECK_FALSE(utf8_text(bad));
}

TEST_CASE("a cut to a number of bytes never splits a character") {
  CHECK(utf8_prefix("refund", 10) == "refund");
  CHECK(utf8_prefix("refund", 3) == "ref");
  CHECK(utf8_prefix("caf\u00e9", 4) == "caf");  // é's two bytes do not fit: both go
  CHECK(utf8_prefix("caf\u00e9", 5) == "caf\u00e9");
  CHECK(utf8_prefix("\u8fd4\u91d1", 5) == "\u8fd4");  // three bytes each
  CHECK(utf8_prefix("\U0001F4E6", 3).empty());        // a four-byte character, cut inside
  CHECK(utf8_prefix("\U0001F4E6", 0).empty());
  const std::string long_text = std::string(63, 'a') + "\u00e9";  // é across byte 64
  CHECK(utf8_prefix(long_text, 64) == std::string(63, 'a'));
}

TEST_CASE("a slow gauge does not hold up counter increments while /metrics renders") {
  Metrics m;
  m.inc("opgate_requests_total");
  std::latch entered(1);
  std::promise<void> release;
  auto released = release.get_future().share();
  m.gauge("opgate_slow", [&] {
    entered.count_down();
    released.wait();
    return 1.0;
  });
  auto scrape = std::async(std::launch::async, [&] { return m.render(); });
  entered.wait();                           // the scrape is inside the gauge now
  m.inc("opgate_requests_total");           // an existing series
  m.inc("opgate_new_total", {{"a", "b"}});  // a new series
  CHECK(m.counter_value("opgate_requests_total") == 2);
  release.set_value();
  CHECK(scrape.get().find("opgate_slow 1") != std::string::npos);
}
