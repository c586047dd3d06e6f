#include "loom/report/plot.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "fmt/format.h"
#include "loom/common/utf8.h"

namespace loom {
namespace {

// Chart geometry in SVG user units (pixels at 100% zoom). Every chart is
// `kChartWidth` wide; the plot area sits at (`kPlotLeft`, `kPlotTop`) and the
// legend to its right.
constexpr double kChartWidth = 900;
constexpr double kPlotLeft = 70;
constexpr double kPlotWidth = 640;
constexpr double kPlotTop = 36;
constexpr double kPlotHeight = 220;
constexpr double kPlotBottomMargin = 48;
constexpr double kLegendLeft = kPlotLeft + kPlotWidth + 18;
constexpr double kLegendRowHeight = 18;
constexpr int kLegendMaxChars = 20;
// The heading above the charts in the standalone SVG document.
constexpr double kSvgHeaderHeight = 60;

// Step functions with too many points are reduced to one value per pixel
// column, each drawn as a horizontal segment of two points.
constexpr int kStepBuckets = static_cast<int>(kPlotWidth);
static_assert(2 * kStepBuckets <= kMaxPlotPointsPerLine);

// Colours that stay distinct on white and for the common colour-vision
// deficiencies first; after ten policies they repeat with a dash pattern.
constexpr std::array<const char*, 10> kPalette = {
    "#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00",
    "#56b4e9", "#000000", "#8c564b", "#7f7f7f", "#bcbd22"};
constexpr std::array<const char*, 4> kDashes = {"", "6 3", "2 2", "8 3 2 3"};

constexpr char kFontFamily[] = "system-ui, -apple-system, Segoe UI, sans-serif";

// A point in SVG coordinates.
struct Pixel {
  double x = 0;
  double y = 0;
};

struct Tick {
  double value = 0;  // In axis data units (seconds, fraction, jobs).
  std::string label;
};

// A chart axis. Invariant: `hi > lo`, and `lo > 0` when `log` is set.
struct Axis {
  double lo = 0;
  double hi = 1;
  bool log = false;
  std::vector<Tick> ticks;
  std::string title;
};

// Returns `text` as valid UTF-8 that XML 1.0 accepts: invalid byte sequences
// and the non-characters U+FFFE and U+FFFF become U+FFFD, and control
// characters other than tab and newline become spaces.
std::string SanitizeUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      out.push_back(c < 0x20 && c != '\t' && c != '\n' ? ' ' : text[i]);
      ++i;
      continue;
    }
    const size_t len = Utf8CharLength(text, i);
    const bool non_character = len == 3 && c == 0xEF && text[i + 1] == '\xBF' &&
                               (text[i + 2] == '\xBE' || text[i + 2] == '\xBF');
    if (len == 0 || non_character) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    out.append(text.substr(i, len));
    i += len;
  }
  return out;
}

// Shortens valid UTF-8 `text` to at most `max_chars` code points, ending it
// with an ellipsis when anything was cut.
std::string Truncate(std::string text, int max_chars) {
  int chars = 0;
  size_t cut = std::string::npos;
  for (size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) continue;
    if (chars == max_chars - 1) cut = i;
    if (++chars > max_chars) {
      text.resize(cut);
      text += "\xE2\x80\xA6";  // U+2026 HORIZONTAL ELLIPSIS.
      break;
    }
  }
  return text;
}

// Escapes valid UTF-8 for XML and HTML text and attribute values.
std::string Escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
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
        out.push_back(c);
    }
  }
  return out;
}

// Escaped, sanitised text for the document.
std::string Text(std::string_view text) { return Escape(SanitizeUtf8(text)); }

std::string SeriesLabel(const PlotSeries& s, size_t index) {
  if (s.name.empty()) return fmt::format("policy {}", index + 1);
  return s.name;
}

const char* SeriesColor(size_t index) {
  return kPalette[index % kPalette.size()];
}

const char* SeriesDash(size_t index) {
  return kDashes[(index / kPalette.size()) % kDashes.size()];
}

// Formats a tick value without trailing zeros or float noise (`0.3`, `45`).
std::string FormatNumber(double v) {
  if (std::fabs(v) < 1e-9) return "0";
  return fmt::format("{:.6g}", v);
}

// Formats a count compactly (`950`, `12k`, `1.5M`).
std::string FormatCount(double v) {
  const double a = std::fabs(v);
  if (a < 1e4) return FormatNumber(v);
  if (a < 1e6) return FormatNumber(v / 1e3) + "k";
  return FormatNumber(v / 1e6) + "M";
}

// Returns 1, 2 or 5 times a power of ten, at least `raw`.
double NiceStep(double raw) {
  if (!(raw > 0) || !std::isfinite(raw)) return 1;
  const double base = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / base;
  const double nice = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
  return nice * base;
}

// Adds ticks at the multiples of `step` within [lo, hi]; values and bounds
// are in display units, `scale` converts them to axis data units.
template <typename Format>
void AddLinearTicks(Axis& axis, double lo, double hi, double step, double scale,
                    Format format) {
  const double first = std::ceil(lo / step - 1e-9);
  for (int k = 0; k < 100; ++k) {
    const double v = (first + k) * step;
    if (v > hi + step * 1e-9) break;
    axis.ticks.push_back({v * scale, format(v)});
  }
}

// A linear time axis over [lo_s, hi_s] seconds, labelled in hours when it
// spans more than two hours and in minutes otherwise.
Axis TimeAxis(double lo_s, double hi_s) {
  Axis axis;
  if (!std::isfinite(lo_s) || !std::isfinite(hi_s) ||
      !std::isfinite(hi_s - lo_s) || !(hi_s > lo_s)) {
    lo_s = std::isfinite(lo_s) ? std::min(lo_s, 0.0) : 0.0;
    hi_s = lo_s + 60;
  }
  axis.lo = lo_s;
  axis.hi = hi_s;
  const bool hours = hi_s - lo_s > 2 * 3600;
  const double unit = hours ? 3600 : 60;
  axis.title = hours ? "time since first submit (hours)"
                     : "time since first submit (minutes)";
  const double step = NiceStep((hi_s - lo_s) / unit / 6);
  AddLinearTicks(axis, lo_s / unit, hi_s / unit, step, unit, FormatNumber);
  return axis;
}

// A 0-100% axis for fractions in [0, 1].
Axis FractionAxis(std::string title) {
  Axis axis;
  axis.title = std::move(title);
  AddLinearTicks(axis, 0, 1, 0.25, 1,
                 [](double v) { return FormatNumber(v * 100) + "%"; });
  return axis;
}

// A linear count axis from zero to a round number at least `max_value`.
Axis CountAxis(double max_value, std::string title) {
  Axis axis;
  axis.title = std::move(title);
  if (!(max_value > 0) || !std::isfinite(max_value)) max_value = 1;
  const double step = std::max(1.0, NiceStep(max_value / 5));
  axis.hi = std::ceil(max_value / step) * step;
  if (!std::isfinite(axis.hi) || !(axis.hi > 0)) axis.hi = max_value;
  AddLinearTicks(axis, 0, axis.hi, step, 1, FormatCount);
  return axis;
}

struct NiceDuration {
  double seconds;
  const char* label;
  bool major;
};

// Round durations for the log-scale JCT axis; majors alone are used when
// the axis spans many of them.
constexpr NiceDuration kDurations[] = {
    {0.001, "1ms", true},    {0.01, "10ms", true},  {0.1, "100ms", true},
    {1, "1s", true},         {2, "2s", false},      {5, "5s", false},
    {10, "10s", true},       {30, "30s", false},    {60, "1m", true},
    {120, "2m", false},      {300, "5m", false},    {600, "10m", true},
    {1800, "30m", false},    {3600, "1h", true},    {7200, "2h", false},
    {18000, "5h", false},    {36000, "10h", false}, {86400, "1d", true},
    {172800, "2d", false},   {604800, "7d", true},  {2592000, "30d", true},
    {31536000, "365d", true}};

// A log-scale duration axis covering [min_s, max_s], both positive or NaN
// when there are no positive durations.
Axis DurationAxis(double min_s, double max_s) {
  Axis axis;
  axis.log = true;
  axis.title = "job completion time (log scale)";
  if (!(min_s > 0) || !(max_s >= min_s) || !std::isfinite(max_s)) {
    min_s = 60;
    max_s = 3600;
  }
  const double floor_s = kDurations[0].seconds;
  min_s = std::max(min_s, floor_s);
  max_s = std::max(max_s, floor_s);
  axis.lo = floor_s;
  axis.hi = max_s;
  for (const NiceDuration& d : kDurations) {
    if (d.seconds <= min_s) axis.lo = d.seconds;
  }
  for (const NiceDuration& d : kDurations) {
    if (d.seconds >= max_s) {
      axis.hi = d.seconds;
      break;
    }
  }
  if (!(axis.hi > axis.lo)) {
    // A single value on a round duration: widen to the next one.
    axis.hi = axis.lo * 10;
    for (const NiceDuration& d : kDurations) {
      if (d.seconds > axis.lo) {
        axis.hi = d.seconds;
        break;
      }
    }
  }
  std::vector<const NiceDuration*> in_range;
  for (const NiceDuration& d : kDurations) {
    if (d.seconds >= axis.lo * (1 - 1e-9) &&
        d.seconds <= axis.hi * (1 + 1e-9)) {
      in_range.push_back(&d);
    }
  }
  const bool majors_only = in_range.size() > 9;
  for (const NiceDuration* d : in_range) {
    if (majors_only && !d->major) continue;
    axis.ticks.push_back({d->seconds, d->label});
  }
  return axis;
}

// Maps `v` to its position along `axis` in [0, 1], clipping to the axis.
double Fraction(const Axis& axis, double v) {
  double f = 0;
  if (axis.log) {
    v = std::max(v, axis.lo);
    f = (std::log(v) - std::log(axis.lo)) /
        (std::log(axis.hi) - std::log(axis.lo));
  } else {
    f = (v - axis.lo) / (axis.hi - axis.lo);
  }
  if (!std::isfinite(f)) return v > axis.lo ? 1 : 0;
  return std::clamp(f, 0.0, 1.0);
}

double PixelX(const Axis& axis, double v) {
  return kPlotLeft + kPlotWidth * Fraction(axis, v);
}

double PixelY(const Axis& axis, double v) {
  return kPlotTop + kPlotHeight * (1 - Fraction(axis, v));
}

// Appends a point rounded to the written precision, dropping repeats and
// merging it into a straight horizontal or vertical run.
void AppendPixel(std::vector<Pixel>& line, double x, double y) {
  const Pixel p{std::round(x * 10) / 10, std::round(y * 10) / 10};
  if (!line.empty() && line.back().x == p.x && line.back().y == p.y) return;
  if (line.size() >= 2) {
    const Pixel& a = line[line.size() - 2];
    const Pixel& b = line.back();
    const auto between = [](double u, double v, double w) {
      return (u <= v && v <= w) || (u >= v && v >= w);
    };
    if ((a.y == b.y && b.y == p.y && between(a.x, b.x, p.x)) ||
        (a.x == b.x && b.x == p.x && between(a.y, b.y, p.y))) {
      line.back() = p;
      return;
    }
  }
  line.push_back(p);
}

using Points = std::vector<std::pair<double, double>>;

// Drops points with a non-finite coordinate or a time before the previous
// kept point.
Points CleanSteps(const Points& points) {
  Points out;
  out.reserve(points.size());
  for (const auto& [t, v] : points) {
    if (!std::isfinite(t) || !std::isfinite(v)) continue;
    if (!out.empty() && t < out.back().first) continue;
    out.emplace_back(t, v);
  }
  return out;
}

enum class Reduce { kTimeWeightedMean, kMax };

// Draws the step function `points` (cleaned). When it has too many points,
// each pixel column shows the time-weighted mean or the maximum of the
// values held during it.
std::vector<Pixel> StepLine(const Points& points, Reduce reduce, const Axis& x,
                            const Axis& y) {
  std::vector<Pixel> line;
  const size_t n = points.size();
  if (n == 0) return line;
  const auto emit = [&](double t, double v) {
    AppendPixel(line, PixelX(x, t), PixelY(y, v));
  };
  if (2 * n - 1 <= static_cast<size_t>(kMaxPlotPointsPerLine)) {
    for (size_t i = 0; i < n; ++i) {
      emit(points[i].first, points[i].second);
      if (i + 1 < n) emit(points[i + 1].first, points[i].second);
    }
    return line;
  }

  constexpr int kBuckets = kStepBuckets;
  const double width = (x.hi - x.lo) / kBuckets;
  const auto bucket_of = [&](double t) {
    const double b = std::floor((t - x.lo) / width);
    return static_cast<int>(std::clamp(b, 0.0, kBuckets - 1.0));
  };
  const auto bucket_start = [&](int b) { return x.lo + b * width; };
  const auto bucket_end = [&](int b) {
    return b == kBuckets - 1 ? x.hi : x.lo + (b + 1) * width;
  };
  std::vector<double> sum(kBuckets, 0.0);
  std::vector<double> weight(kBuckets, 0.0);
  std::vector<double> peak(kBuckets, -std::numeric_limits<double>::infinity());
  std::vector<double> last(kBuckets, 0.0);
  std::vector<bool> seen(kBuckets, false);
  for (size_t i = 0; i < n; ++i) {
    const double t0 = points[i].first;
    const double t1 = i + 1 < n ? points[i + 1].first : t0;
    const double v = points[i].second;
    const int b0 = bucket_of(t0);
    const int b1 = bucket_of(t1);
    for (int b = b0; b <= b1; ++b) {
      const double overlap =
          std::min(bucket_end(b), t1) - std::max(bucket_start(b), t0);
      if (b > b0 && !(overlap > 0)) continue;
      seen[b] = true;
      peak[b] = std::max(peak[b], v);
      last[b] = v;
      if (overlap > 0) {
        sum[b] += v * overlap;
        weight[b] += overlap;
      }
    }
  }
  const double first_t = points.front().first;
  const double last_t = points.back().first;
  for (int b = 0; b < kBuckets; ++b) {
    if (!seen[b]) continue;
    double value = peak[b];
    if (reduce == Reduce::kTimeWeightedMean) {
      value = weight[b] > 0 ? sum[b] / weight[b] : last[b];
    }
    emit(std::max(bucket_start(b), first_t), value);
    emit(std::min(bucket_end(b), last_t), value);
  }
  return line;
}

// Draws the empirical CDF of `sorted` (ascending, non-negative) as a step
// line, keeping a point only where it moves at least a pixel.
std::vector<Pixel> CdfLine(const std::vector<double>& sorted, const Axis& x,
                           const Axis& y) {
  std::vector<Pixel> line;
  const size_t n = sorted.size();
  if (n == 0) return line;
  double last_x = PixelX(x, sorted[0]);
  double last_y = PixelY(y, 0);
  AppendPixel(line, last_x, last_y);
  for (size_t i = 0; i < n; ++i) {
    const double px = PixelX(x, sorted[i]);
    const double py = PixelY(y, static_cast<double>(i + 1) / n);
    if (i + 1 < n && std::fabs(px - last_x) < 1 && std::fabs(py - last_y) < 1) {
      continue;
    }
    // Run level to the new value, then rise: the CDF is a step function.
    if (px - last_x >= 2) AppendPixel(line, px, last_y);
    AppendPixel(line, px, py);
    last_x = px;
    last_y = py;
  }
  return line;
}

// One chart: axes, and one line per series (possibly empty).
struct Chart {
  std::string title;
  Axis x;
  Axis y;
  std::vector<std::vector<Pixel>> lines;
  double marker_s = 0;  // Drawn when positive.
};

double ChartHeight(size_t series_count) {
  const double legend = 8 + kLegendRowHeight * series_count;
  return kPlotTop + std::max(kPlotHeight, legend) + kPlotBottomMargin;
}

using Out = std::back_insert_iterator<std::string>;

void RenderAxes(Out out, const Chart& chart) {
  const double left = kPlotLeft;
  const double right = kPlotLeft + kPlotWidth;
  const double top = kPlotTop;
  const double bottom = kPlotTop + kPlotHeight;
  fmt::format_to(out,
                 "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" "
                 "fill=\"#fafafa\" stroke=\"none\"/>\n",
                 left, top, kPlotWidth, kPlotHeight);
  fmt::format_to(out, "<g class=\"grid\" stroke=\"#e3e3e3\">\n");
  for (const Tick& tick : chart.y.ticks) {
    const double py = PixelY(chart.y, tick.value);
    fmt::format_to(out,
                   "<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\"/>\n",
                   left, right, py, py);
  }
  for (const Tick& tick : chart.x.ticks) {
    const double px = PixelX(chart.x, tick.value);
    fmt::format_to(out,
                   "<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{}\" y2=\"{}\"/>\n",
                   px, px, top, bottom);
  }
  fmt::format_to(out, "</g>\n");
  fmt::format_to(out,
                 "<path class=\"axis\" d=\"M{} {}V{}H{}\" fill=\"none\" "
                 "stroke=\"#444\"/>\n",
                 left, top, bottom, right);
  fmt::format_to(out, "<g class=\"ticks\" fill=\"#444\" font-size=\"11\">\n");
  for (const Tick& tick : chart.y.ticks) {
    fmt::format_to(out,
                   "<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\" "
                   "dominant-baseline=\"middle\">{}</text>\n",
                   left - 6, PixelY(chart.y, tick.value), Text(tick.label));
  }
  for (const Tick& tick : chart.x.ticks) {
    fmt::format_to(out,
                   "<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}"
                   "</text>\n",
                   PixelX(chart.x, tick.value), bottom + 16, Text(tick.label));
  }
  fmt::format_to(out, "</g>\n");
  fmt::format_to(out,
                 "<text class=\"axis-title\" x=\"{}\" y=\"{}\" "
                 "text-anchor=\"middle\" fill=\"#333\">{}</text>\n",
                 left + kPlotWidth / 2, bottom + 36, Text(chart.x.title));
  fmt::format_to(out,
                 "<text class=\"axis-title\" transform=\"translate({} {}) "
                 "rotate(-90)\" text-anchor=\"middle\" fill=\"#333\">{}"
                 "</text>\n",
                 16, top + kPlotHeight / 2, Text(chart.y.title));
}

void RenderMarker(Out out, const Chart& chart) {
  if (!(chart.marker_s > 0) || !std::isfinite(chart.marker_s)) return;
  const double px = PixelX(chart.x, chart.marker_s);
  fmt::format_to(out,
                 "<g class=\"marker\"><line x1=\"{0:.1f}\" x2=\"{0:.1f}\" "
                 "y1=\"{1}\" y2=\"{2}\" stroke=\"#555\" "
                 "stroke-dasharray=\"5 4\"/>",
                 px, kPlotTop, kPlotTop + kPlotHeight);
  const bool right_half = px > kPlotLeft + kPlotWidth / 2;
  fmt::format_to(out,
                 "<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"{}\" "
                 "font-size=\"11\" fill=\"#555\">arrivals end</text></g>\n",
                 right_half ? px - 4 : px + 4, kPlotTop + 12,
                 right_half ? "end" : "start");
}

void RenderLines(Out out, const Chart& chart,
                 const std::vector<PlotSeries>& series) {
  for (size_t i = 0; i < chart.lines.size(); ++i) {
    const std::vector<Pixel>& line = chart.lines[i];
    if (line.empty()) continue;
    const std::string name = Text(SeriesLabel(series[i], i));
    const char* dash = SeriesDash(i);
    fmt::format_to(out,
                   "<polyline class=\"series\" fill=\"none\" stroke=\"{}\" "
                   "stroke-width=\"1.6\" stroke-linejoin=\"round\"{} "
                   "points=\"",
                   SeriesColor(i),
                   *dash ? fmt::format(" stroke-dasharray=\"{}\"", dash) : "");
    for (size_t k = 0; k < line.size(); ++k) {
      fmt::format_to(out, "{}{:.1f},{:.1f}", k == 0 ? "" : " ", line[k].x,
                     line[k].y);
    }
    fmt::format_to(out, "\"><title>{}</title></polyline>\n", name);
    if (line.size() == 1) {
      fmt::format_to(out,
                     "<circle class=\"point\" cx=\"{:.1f}\" cy=\"{:.1f}\" "
                     "r=\"3\" fill=\"{}\"><title>{}</title></circle>\n",
                     line[0].x, line[0].y, SeriesColor(i), name);
    }
  }
}

void RenderLegend(Out out, const Chart& chart,
                  const std::vector<PlotSeries>& series) {
  fmt::format_to(out, "<g class=\"legend\">\n");
  for (size_t i = 0; i < series.size(); ++i) {
    const double y = kPlotTop + 8 + kLegendRowHeight * i;
    const bool empty = chart.lines[i].empty();
    const char* dash = SeriesDash(i);
    fmt::format_to(out,
                   "<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" "
                   "stroke=\"{}\" stroke-width=\"3\"{}/>",
                   kLegendLeft, kLegendLeft + 22, y, y, SeriesColor(i),
                   *dash ? fmt::format(" stroke-dasharray=\"{}\"", dash) : "");
    const std::string label = SanitizeUtf8(SeriesLabel(series[i], i));
    fmt::format_to(out,
                   "<text x=\"{}\" y=\"{}\" dominant-baseline=\"middle\" "
                   "fill=\"{}\"><title>{}</title>{}{}</text>\n",
                   kLegendLeft + 28, y, empty ? "#888" : "#222", Escape(label),
                   Escape(Truncate(label, kLegendMaxChars)),
                   empty ? " (no data)" : "");
  }
  fmt::format_to(out, "</g>\n");
}

// Writes the chart's content, positioned at the origin.
void RenderChart(Out out, const Chart& chart,
                 const std::vector<PlotSeries>& series) {
  fmt::format_to(out,
                 "<text class=\"chart-title\" x=\"{}\" y=\"22\" "
                 "font-size=\"15\" font-weight=\"bold\" fill=\"#222\">{}"
                 "</text>\n",
                 kPlotLeft, Text(chart.title));
  RenderAxes(out, chart);
  RenderMarker(out, chart);
  RenderLines(out, chart, series);
  RenderLegend(out, chart, series);
}

std::vector<Chart> BuildCharts(const PlotInfo& info,
                               const std::vector<PlotSeries>& series) {
  std::vector<Points> utilization;
  std::vector<Points> queue;
  std::vector<std::vector<double>> jct;
  double t_lo = 0;
  double t_hi = -std::numeric_limits<double>::infinity();
  double queue_max = 0;
  double jct_min = std::numeric_limits<double>::infinity();
  double jct_max = 0;
  for (const PlotSeries& s : series) {
    utilization.push_back(CleanSteps(s.utilization));
    queue.push_back(CleanSteps(s.queue_length));
    for (const Points* points : {&utilization.back(), &queue.back()}) {
      if (points->empty()) continue;
      t_lo = std::min(t_lo, points->front().first);
      t_hi = std::max(t_hi, points->back().first);
    }
    for (const auto& [t, v] : queue.back()) queue_max = std::max(queue_max, v);
    std::vector<double>& values = jct.emplace_back();
    values.reserve(s.jct_s.size());
    for (const double v : s.jct_s) {
      if (!std::isfinite(v) || v < 0) continue;
      values.push_back(v);
      if (v > 0) jct_min = std::min(jct_min, v);
      jct_max = std::max(jct_max, v);
    }
    std::sort(values.begin(), values.end());
  }
  const double marker = info.arrival_window_end_s;
  const bool has_marker = marker > 0 && std::isfinite(marker);
  if (has_marker) t_hi = std::max(t_hi, marker);

  std::vector<Chart> charts(3);
  Chart& util_chart = charts[0];
  util_chart.title = "GPU utilisation";
  util_chart.x = TimeAxis(t_lo, t_hi);
  util_chart.y = FractionAxis("allocated GPUs");
  util_chart.marker_s = has_marker ? marker : 0;
  Chart& queue_chart = charts[1];
  queue_chart.title = "Queue length";
  queue_chart.x = util_chart.x;
  queue_chart.y = CountAxis(queue_max, "pending jobs");
  queue_chart.marker_s = util_chart.marker_s;
  Chart& jct_chart = charts[2];
  jct_chart.title = "Job completion time (CDF)";
  jct_chart.x = DurationAxis(jct_min, jct_max);
  jct_chart.y = FractionAxis("fraction of jobs");
  for (size_t i = 0; i < series.size(); ++i) {
    util_chart.lines.push_back(StepLine(
        utilization[i], Reduce::kTimeWeightedMean, util_chart.x, util_chart.y));
    queue_chart.lines.push_back(
        StepLine(queue[i], Reduce::kMax, queue_chart.x, queue_chart.y));
    jct_chart.lines.push_back(CdfLine(jct[i], jct_chart.x, jct_chart.y));
  }
  return charts;
}

std::string DocumentTitle(const PlotInfo& info) {
  return info.title.empty() ? "loom sim" : info.title;
}

std::string RenderHtml(const PlotInfo& info,
                       const std::vector<PlotSeries>& series) {
  std::string html;
  Out out(html);
  const std::string title = Text(DocumentTitle(info));
  fmt::format_to(out,
                 "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n"
                 "<meta charset=\"utf-8\">\n"
                 "<meta name=\"viewport\" content=\"width=device-width, "
                 "initial-scale=1\">\n<title>{}</title>\n<style>\n"
                 "body {{ font-family: {}; color: #222; background: #fff; "
                 "max-width: 940px; margin: 24px auto; padding: 0 16px; }}\n"
                 "h1 {{ font-size: 1.4em; margin: 0 0 4px; }}\n"
                 "p.subtitle {{ color: #555; margin: 0 0 16px; "
                 "white-space: pre-line; }}\n"
                 "figure {{ margin: 0 0 28px; }}\n"
                 "figure svg {{ display: block; width: 100%; height: auto; }}\n"
                 "polyline.series:hover {{ stroke-width: 3; }}\n"
                 "</style>\n</head>\n<body>\n<h1>{}</h1>\n",
                 title, kFontFamily, title);
  if (!info.subtitle.empty()) {
    fmt::format_to(out, "<p class=\"subtitle\">{}</p>\n", Text(info.subtitle));
  }
  const double height = ChartHeight(series.size());
  for (const Chart& chart : BuildCharts(info, series)) {
    fmt::format_to(out,
                   "<figure>\n<svg viewBox=\"0 0 {0} {1}\" width=\"{0}\" "
                   "height=\"{1}\" role=\"img\" aria-label=\"{2}\" "
                   "font-family=\"{3}\" font-size=\"12\">\n",
                   kChartWidth, height, Text(chart.title), kFontFamily);
    RenderChart(out, chart, series);
    fmt::format_to(out, "</svg>\n</figure>\n");
  }
  fmt::format_to(out, "</body>\n</html>\n");
  return html;
}

std::string RenderSvg(const PlotInfo& info,
                      const std::vector<PlotSeries>& series) {
  std::string svg;
  Out out(svg);
  const double chart_height = ChartHeight(series.size());
  const double height = kSvgHeaderHeight + 3 * chart_height;
  const std::string title = Text(DocumentTitle(info));
  fmt::format_to(out,
                 "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                 "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" "
                 "width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
                 "font-family=\"{2}\" font-size=\"12\">\n"
                 "<title>{3}</title>\n"
                 "<rect width=\"{0}\" height=\"{1}\" fill=\"#fff\"/>\n"
                 "<text x=\"16\" y=\"28\" font-size=\"20\" "
                 "font-weight=\"bold\">{3}</text>\n",
                 kChartWidth, height, kFontFamily, title);
  if (!info.subtitle.empty()) {
    fmt::format_to(out, "<text x=\"16\" y=\"48\" fill=\"#555\">{}</text>\n",
                   Text(info.subtitle));
  }
  double y = kSvgHeaderHeight;
  for (const Chart& chart : BuildCharts(info, series)) {
    fmt::format_to(out, "<g class=\"chart\" transform=\"translate(0 {})\">\n",
                   y);
    RenderChart(out, chart, series);
    fmt::format_to(out, "</g>\n");
    y += chart_height;
  }
  fmt::format_to(out, "</svg>\n");
  return svg;
}

}  // namespace

absl::StatusOr<std::string> RenderPlot(std::string_view format,
                                       const PlotInfo& info,
                                       const std::vector<PlotSeries>& series) {
  if (format == "html") return RenderHtml(info, series);
  if (format == "svg") return RenderSvg(info, series);
  return absl::InvalidArgumentError(fmt::format(
      "unknown plot format \"{}\"; expected \"html\" or \"svg\"", format));
}

absl::Status WritePlot(const std::string& path, const PlotInfo& info,
                       const std::vector<PlotSeries>& series) {
  const std::string lower = absl::AsciiStrToLower(path);
  std::string_view format;
  if (absl::EndsWith(lower, ".html")) {
    format = "html";
  } else if (absl::EndsWith(lower, ".svg")) {
    format = "svg";
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("plot file \"", path, "\" must end in .html or .svg"));
  }
  absl::StatusOr<std::string> text = RenderPlot(format, info, series);
  if (!text.ok()) return text.status();

  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("cannot open plot file ", path, " for writing"));
  }
  errno = 0;
  const size_t written = std::fwrite(text->data(), 1, text->size(), file);
  if (written != text->size()) {
    const int error = errno != 0 ? errno : EIO;
    std::fclose(file);
    return absl::ErrnoToStatus(error,
                               absl::StrCat("cannot write plot file ", path));
  }
  if (std::fclose(file) != 0) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("cannot write plot file ", path));
  }
  return absl::OkStatus();
}

}  // namespace loom
