#include "operator_api/charts.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/text.h"

namespace opgate::operator_api {

namespace {

// At most 80 bytes (cut between characters), without the control characters
// XML text cannot hold, escaped.
std::string xml_text(std::string_view text) {
  std::string kept;
  for (char c : utf8_prefix(text, 80))
    if (static_cast<unsigned char>(c) >= 0x20) kept += c;
  return html_escape(kept);
}

}  // namespace

std::string bar_chart_svg(std::string_view title,
                          const std::vector<std::pair<std::string, int64_t>>& bars) {
  constexpr int kWidth = 560, kLabel = 200, kBar = 22, kGap = 8, kTop = 34;
  const int height = kTop + static_cast<int>(std::max<size_t>(bars.size(), 1)) * (kBar + kGap);
  int64_t largest = 1;
  for (const auto& [label, value] : bars) largest = std::max(largest, value);
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"sans-serif\" font-size=\"13\" role=\"img\" aria-label=\"{}\">"
      "<text x=\"0\" y=\"18\" font-weight=\"bold\">{}</text>",
      kWidth, height, kWidth, height, xml_text(title), xml_text(title));
  if (bars.empty())
    svg += fmt::format("<text x=\"0\" y=\"{}\" fill=\"#666\">nothing in this window</text>",
                       kTop + 15);
  int y = kTop;
  for (const auto& [label, value] : bars) {
    const int length =
        static_cast<int>((kWidth - kLabel - 60) * std::max<int64_t>(value, 0) / largest);
    svg += fmt::format(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>"
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#2b59c3\"/>"
        "<text x=\"{}\" y=\"{}\">{}</text>",
        kLabel - 8, y + 15, xml_text(label), kLabel, y, std::max(length, 1), kBar,
        kLabel + length + 6, y + 15, value);
    y += kBar + kGap;
  }
  return svg + "</svg>";
}

}  // namespace opgate::operator_api
