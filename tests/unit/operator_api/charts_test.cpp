// The report's charts: SVG whose labels are text, never markup.
#include "operator_api/charts.h"

#include <doctest/doctest.h>

using namespace opgate;

TEST_CASE("a bar chart is SVG with one bar per label, scaled to the largest; labels escaped") {
  auto svg = operator_api::bar_chart_svg("Approvals",
                                         {{"alice", 10}, {"<script>alert(1)</script>&bob\x1b", 5}});
  CHECK(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0);
  CHECK(svg.find("<script>") == std::string::npos);
  CHECK(svg.find("&lt;script&gt;alert(1)&lt;/script&gt;&amp;bob") != std::string::npos);
  CHECK(svg.find('\x1b') == std::string::npos);
  CHECK(svg.find("width=\"300\"") != std::string::npos);  // the largest: 560 - 200 - 60
  CHECK(svg.find("width=\"150\"") != std::string::npos);  // half of it
  auto empty = operator_api::bar_chart_svg("Nothing", {});
  CHECK(empty.find("nothing in this window") != std::string::npos);
}
