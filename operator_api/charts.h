// Charts for the report, drawn on the server as SVG (the console shows them
// as images: no script, no outside resource, the console's CSP unchanged).
// Labels are the data's (principals, reasons): escaped as XML text. Pure.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace opgate::operator_api {

// A horizontal bar chart: one bar per (label, value), scaled to the largest.
std::string bar_chart_svg(std::string_view title,
                          const std::vector<std::pair<std::string, int64_t>>& bars);

}  // namespace opgate::operator_api
