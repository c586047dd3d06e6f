#include "loom/report/plot.h"

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"

namespace loom {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Debian's Abseil has its own `string_view`, so these helpers take the
// standard one.
bool Contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

PlotInfo Info(std::string title, std::string subtitle = "",
              double arrival_window_end_s = 0) {
  PlotInfo info;
  info.title = std::move(title);
  info.subtitle = std::move(subtitle);
  info.arrival_window_end_s = arrival_window_end_s;
  return info;
}

PlotSeries Named(std::string name) {
  PlotSeries s;
  s.name = std::move(name);
  return s;
}

size_t Count(std::string_view haystack, std::string_view needle) {
  size_t count = 0;
  for (size_t i = haystack.find(needle); i != std::string_view::npos;
       i = haystack.find(needle, i + needle.size())) {
    ++count;
  }
  return count;
}

// Checks that `xml` is a sequence of properly nested elements and counts the
// top-level ones. Returns an empty string when it is, else what is wrong.
std::string CheckNesting(std::string_view xml, int* roots) {
  std::vector<std::string_view> open;
  *roots = 0;
  size_t i = 0;
  while ((i = xml.find('<', i)) != std::string_view::npos) {
    if (xml.substr(i, 4) == "<!--") {
      i = xml.find("-->", i);
      if (i == std::string_view::npos) return "unterminated comment";
      continue;
    }
    const size_t end = xml.find('>', i);
    if (end == std::string_view::npos) return "unterminated tag";
    std::string_view tag = xml.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.empty()) return "empty tag";
    if (tag[0] == '?' || tag[0] == '!') continue;
    if (tag.find('<') != std::string_view::npos) return "'<' inside a tag";
    if (tag[0] == '/') {
      std::string_view name = tag.substr(1);
      if (open.empty())
        return "closing tag </" + std::string(name) + "> at top";
      if (open.back() != name) {
        return "</" + std::string(name) + "> closes <" +
               std::string(open.back()) + ">";
      }
      open.pop_back();
      continue;
    }
    const std::string_view name = tag.substr(0, tag.find_first_of(" \n\t/"));
    if (open.empty()) ++*roots;
    if (tag.back() != '/') open.push_back(name);
  }
  if (!open.empty()) return "<" + std::string(open.back()) + "> not closed";
  return "";
}

// True when every `&` starts a character reference.
bool EntitiesAreEscaped(std::string_view text) {
  for (size_t i = text.find('&'); i != std::string_view::npos;
       i = text.find('&', i + 1)) {
    const size_t semi = text.find(';', i);
    if (semi == std::string_view::npos || semi - i > 8) return false;
    const std::string_view ref = text.substr(i + 1, semi - i - 1);
    if (ref != "amp" && ref != "lt" && ref != "gt" && ref != "quot" &&
        ref != "#39") {
      return false;
    }
  }
  return true;
}

// True when `text` holds a formatted NaN or infinity (`nan`, `-inf`), as
// opposed to those letters inside a word such as `dominant`.
bool HasNonFiniteNumber(std::string_view text) {
  for (std::string_view word : {"nan", "inf"}) {
    for (size_t i = text.find(word); i != std::string_view::npos;
         i = text.find(word, i + 1)) {
      if (i == 0 || !std::isalpha(static_cast<unsigned char>(text[i - 1]))) {
        return true;
      }
    }
  }
  return false;
}

// The `<svg>...</svg>` elements of an HTML page.
std::vector<std::string_view> SvgElements(std::string_view html) {
  std::vector<std::string_view> out;
  for (size_t i = html.find("<svg"); i != std::string_view::npos;
       i = html.find("<svg", i + 1)) {
    const size_t end = html.find("</svg>", i);
    if (end == std::string_view::npos) break;
    out.push_back(html.substr(i, end + 6 - i));
  }
  return out;
}

struct Line {
  std::string stroke;
  std::vector<std::pair<double, double>> points;
};

// The policy lines (`<polyline class="series">`) in `svg`, in order.
std::vector<Line> SeriesLines(std::string_view svg) {
  std::vector<Line> lines;
  constexpr std::string_view kOpen = "<polyline class=\"series\"";
  for (size_t i = svg.find(kOpen); i != std::string_view::npos;
       i = svg.find(kOpen, i + 1)) {
    Line line;
    const size_t stroke = svg.find("stroke=\"", i) + 8;
    line.stroke =
        std::string(svg.substr(stroke, svg.find('"', stroke) - stroke));
    const size_t begin = svg.find("points=\"", i) + 8;
    const std::string_view points =
        svg.substr(begin, svg.find('"', begin) - begin);
    // Parses "x,y x,y ..."; anything malformed becomes NaN.
    const std::string text(points);
    const char* p = text.c_str();
    while (*p != '\0') {
      char* end = nullptr;
      double x = std::strtod(p, &end);
      double y = kNaN;
      if (end == p || *end != ',') {
        x = kNaN;
        end = const_cast<char*>(p) + std::strcspn(p, " ");
      } else {
        const char* q = end + 1;
        y = std::strtod(q, &end);
        if (end == q || (*end != ' ' && *end != '\0')) y = kNaN;
        end += std::strcspn(end, " ");
      }
      line.points.emplace_back(x, y);
      p = *end == ' ' ? end + 1 : end;
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

// Expects every point of every line to be a finite coordinate on the page.
void ExpectPointsOnPage(std::string_view svg) {
  for (const Line& line : SeriesLines(svg)) {
    for (const auto& [x, y] : line.points) {
      ASSERT_TRUE(std::isfinite(x) && std::isfinite(y));
      EXPECT_GE(x, 0);
      EXPECT_LE(x, 900);
      EXPECT_GE(y, 0);
      EXPECT_LE(y, 1000);
    }
  }
}

PlotSeries MakeSeries(std::string name, double scale) {
  PlotSeries s;
  s.name = std::move(name);
  for (int i = 0; i <= 20; ++i) {
    const double t = i * 600.0;
    s.utilization.emplace_back(t, std::min(1.0, scale * i / 20.0));
    s.queue_length.emplace_back(t, (20 - i) * scale);
  }
  for (int i = 1; i <= 50; ++i) s.jct_s.push_back(i * 90.0 * scale);
  return s;
}

std::string Render(std::string_view format, const PlotInfo& info,
                   const std::vector<PlotSeries>& series) {
  absl::StatusOr<std::string> out = RenderPlot(format, info, series);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : "";
}

TEST(RenderPlot, HtmlHasThreeChartsWithOneLinePerPolicy) {
  const std::vector<PlotSeries> series = {MakeSeries("fifo", 1),
                                          MakeSeries("fair", 0.8),
                                          MakeSeries("backfill", 0.6)};
  const std::string html = Render("html", Info("Run"), series);

  EXPECT_TRUE(StartsWith(html, "<!DOCTYPE html>"));
  const std::vector<std::string_view> svgs = SvgElements(html);
  ASSERT_EQ(svgs.size(), 3u);
  EXPECT_EQ(Count(html, "<svg"), 3u);
  for (std::string_view svg : svgs) {
    int roots = 0;
    EXPECT_EQ(CheckNesting(svg, &roots), "");
    EXPECT_EQ(roots, 1);
    EXPECT_EQ(SeriesLines(svg).size(), 3u);
    for (const char* name : {"fifo", "fair", "backfill"}) {
      EXPECT_TRUE(Contains(svg, std::string(">") + name + "<"))
          << "legend lacks " << name;
    }
    ExpectPointsOnPage(svg);
  }
  EXPECT_TRUE(Contains(html, "GPU utilisation"));
  EXPECT_TRUE(Contains(html, "Queue length"));
  EXPECT_TRUE(Contains(html, "Job completion time"));
  EXPECT_TRUE(Contains(html, "log scale"));
  // Self-contained: nothing executes and nothing is fetched.
  EXPECT_FALSE(Contains(html, "<script"));
  EXPECT_FALSE(Contains(html, "href"));
  EXPECT_FALSE(Contains(html, "src="));
  EXPECT_FALSE(Contains(html, "url("));
  EXPECT_FALSE(Contains(html, "@import"));
  EXPECT_FALSE(Contains(html, "http"));
}

TEST(RenderPlot, EscapesNamesAndTitles) {
  const PlotInfo info = Info("<T&\"itle>", "a & b < c");
  const std::vector<PlotSeries> series = {MakeSeries("x<y&\"z\"", 1),
                                          MakeSeries("it's", 0.5)};
  for (const char* format : {"html", "svg"}) {
    SCOPED_TRACE(format);
    const std::string out = Render(format, info, series);
    EXPECT_TRUE(Contains(out, ">x&lt;y&amp;&quot;z&quot;<"));
    EXPECT_TRUE(Contains(out, ">it&#39;s<"));
    EXPECT_TRUE(Contains(out, "&lt;T&amp;&quot;itle&gt;"));
    EXPECT_TRUE(Contains(out, "a &amp; b &lt; c"));
    EXPECT_FALSE(Contains(out, "x<y"));
    EXPECT_FALSE(Contains(out, "<T&"));
    EXPECT_TRUE(EntitiesAreEscaped(out));
  }
}

TEST(RenderPlot, SvgIsOneWellFormedDocument) {
  const std::vector<PlotSeries> series = {
      MakeSeries("a", 1), MakeSeries("b", 0.7), MakeSeries("c", 0.3),
      MakeSeries("d", 0.1)};
  const std::string svg = Render("svg", Info("t", "s"), series);

  EXPECT_TRUE(StartsWith(svg, "<?xml"));
  int roots = 0;
  EXPECT_EQ(CheckNesting(svg, &roots), "");
  EXPECT_EQ(roots, 1);
  EXPECT_EQ(Count(svg, "<svg"), 1u);
  EXPECT_EQ(Count(svg, "</svg>"), 1u);
  EXPECT_EQ(Count(svg, "<g ") + Count(svg, "<g>"), Count(svg, "</g>"));
  EXPECT_EQ(Count(svg, "class=\"chart\""), 3u);
  EXPECT_EQ(SeriesLines(svg).size(), 3 * series.size());
  EXPECT_TRUE(Contains(svg, "xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_FALSE(Contains(svg, "<script"));
  EXPECT_TRUE(EntitiesAreEscaped(svg));
  ExpectPointsOnPage(svg);
}

TEST(RenderPlot, PoliciesGetDistinctColours) {
  std::vector<PlotSeries> series;
  for (int i = 0; i < 6; ++i) {
    series.push_back(MakeSeries("p" + std::to_string(i), 1.0 / (i + 1)));
  }
  const std::string html = Render("html", {}, series);
  for (std::string_view svg : SvgElements(html)) {
    std::set<std::string> strokes;
    for (const Line& line : SeriesLines(svg)) strokes.insert(line.stroke);
    EXPECT_EQ(strokes.size(), series.size());
  }
}

TEST(RenderPlot, DownsamplesLongSeriesAndStaysSmall) {
  constexpr int kPoints = 200000;
  std::vector<PlotSeries> series;
  for (int p = 0; p < 4; ++p) {
    PlotSeries s;
    s.name = "policy" + std::to_string(p);
    for (int64_t i = 0; i < kPoints; ++i) {
      s.utilization.emplace_back(i * 1.0, (i * 7919 + p) % 1000 / 1000.0);
      s.queue_length.emplace_back(i * 1.0,
                                  static_cast<double>((i * 104729 + p) % 5000));
    }
    for (int i = 0; i < 100000; ++i) s.jct_s.push_back(1 + (i * 31) % 86400);
    series.push_back(std::move(s));
  }
  for (const char* format : {"html", "svg"}) {
    SCOPED_TRACE(format);
    const std::string out = Render(format, Info("big"), series);
    EXPECT_LT(out.size(), 2u << 20);
    const std::vector<Line> lines = SeriesLines(out);
    ASSERT_EQ(lines.size(), 12u);
    for (const Line& line : lines) {
      EXPECT_LE(line.points.size(), static_cast<size_t>(kMaxPlotPointsPerLine));
      EXPECT_GT(line.points.size(), 10u);
    }
    ExpectPointsOnPage(out);
  }
}

// The y coordinates of the first policy's line in chart `chart` (0-based).
std::set<double> LineYs(std::string_view html, int chart) {
  const std::vector<Line> lines = SeriesLines(SvgElements(html)[chart]);
  std::set<double> ys;
  for (const auto& [x, y] : lines.at(0).points) ys.insert(y);
  return ys;
}

TEST(RenderPlot, DownsamplingKeepsMeanUtilisationAndPeakQueue) {
  // Utilisation alternates 0 and 1 every second: each pixel column (200 s
  // here) shows the mean, 0.5. The queue is 0 except for one-second spikes to
  // 10 every 50 s: each pixel column shows the spike.
  constexpr int kEnd = 128000;
  PlotSeries busy = Named("busy");
  for (int i = 0; i <= kEnd; ++i) {
    busy.utilization.emplace_back(i, i % 2);
    busy.queue_length.emplace_back(i, i % 50 == 0 ? 10 : 0);
  }
  PlotSeries flat = Named("flat");
  flat.utilization = {{0, 0.5}, {kEnd, 0.5}};
  flat.queue_length = {{0, 10}, {kEnd, 10}};

  const std::set<double> flat_util = LineYs(Render("html", {}, {flat}), 0);
  const std::set<double> flat_queue = LineYs(Render("html", {}, {flat}), 1);
  ASSERT_EQ(flat_util.size(), 1u);
  ASSERT_EQ(flat_queue.size(), 1u);
  const std::string html = Render("html", {}, {busy});
  EXPECT_EQ(LineYs(html, 0), flat_util);
  EXPECT_EQ(LineYs(html, 1), flat_queue);
}

TEST(RenderPlot, TimeAxisUnitFollowsSpan) {
  PlotSeries s = Named("a");
  s.utilization = {{0, 0.5}, {10 * 3600, 0.2}};
  EXPECT_TRUE(Contains(Render("html", {}, {s}), "since first submit (hours)"));
  s.utilization = {{0, 0.5}, {30 * 60, 0.2}};
  EXPECT_TRUE(
      Contains(Render("html", {}, {s}), "since first submit (minutes)"));
}

TEST(RenderPlot, ArrivalWindowMarkerOnTimeCharts) {
  const std::vector<PlotSeries> series = {MakeSeries("a", 1)};
  EXPECT_EQ(Count(Render("html", Info("", "", 3600), series), "arrivals end"),
            2u);
  EXPECT_EQ(Count(Render("svg", Info("", "", 3600), series), "arrivals end"),
            2u);
  EXPECT_EQ(Count(Render("html", {}, series), "arrivals end"), 0u);
}

TEST(RenderPlot, DegenerateSeriesRenderWellFormed) {
  PlotSeries empty = Named("empty");
  PlotSeries single = Named("single");
  single.utilization = {{5, 0.5}};
  single.queue_length = {{5, 3}};
  single.jct_s = {42};
  PlotSeries zeros = Named("zeros");
  zeros.utilization = {{0, 0}, {0, 0}, {100, 0}};
  zeros.queue_length = {{0, 0}, {100, 0}};
  zeros.jct_s = {0, 0, 0};
  PlotSeries bad = Named("bad\xff\x01name");
  bad.utilization = {{kNaN, 0.5}, {1, kInf}, {2, 0.3}, {1, 0.9}, {kInf, 1}};
  bad.queue_length = {{-kInf, 1}, {3, kNaN}};
  bad.jct_s = {kNaN, kInf, -5, 1e-9, 1e12};
  PlotSeries huge = Named("");
  huge.utilization = {{-1e300, 1}, {1e300, 2}};
  huge.queue_length = {{0, 1e300}};

  const std::vector<std::vector<PlotSeries>> cases = {
      {},
      {empty},
      {single},
      {zeros},
      {bad},
      {huge},
      {empty, single, zeros, bad, huge}};
  for (size_t c = 0; c < cases.size(); ++c) {
    for (const char* format : {"html", "svg"}) {
      SCOPED_TRACE(testing::Message() << "case " << c << " " << format);
      const std::string out = Render(format, Info("", "", kNaN), cases[c]);
      ASSERT_FALSE(out.empty());
      std::vector<std::string_view> svgs = SvgElements(out);
      EXPECT_EQ(svgs.size(), format == std::string_view("html") ? 3u : 1u);
      for (std::string_view svg : svgs) {
        int roots = 0;
        EXPECT_EQ(CheckNesting(svg, &roots), "");
        EXPECT_EQ(roots, 1);
        ExpectPointsOnPage(svg);
      }
      EXPECT_TRUE(EntitiesAreEscaped(out));
      EXPECT_FALSE(HasNonFiniteNumber(out));
      EXPECT_FALSE(Contains(out, "\xff"));
      EXPECT_FALSE(Contains(out, "\x01"));
    }
  }
  // An empty series keeps its legend entry but draws no line.
  const std::string html = Render("html", {}, {empty, single});
  EXPECT_EQ(Count(html, ">empty (no data)<"), 3u);
  EXPECT_EQ(SeriesLines(html).size(), 3u);
  // Unnamed policies are shown under a generic name.
  EXPECT_TRUE(Contains(Render("html", {}, {huge}), ">policy 1<"));
}

TEST(RenderPlot, LongNamesAreShortenedInTheLegend) {
  const std::string name(60, 'n');
  const std::string html = Render("html", {}, {MakeSeries(name, 1)});
  EXPECT_TRUE(Contains(html, std::string(19, 'n') + "\xE2\x80\xA6<"));
  // The full name stays available as the tooltip.
  EXPECT_TRUE(Contains(html, "<title>" + name + "</title>"));
}

TEST(RenderPlot, RejectsUnknownFormat) {
  const absl::StatusOr<std::string> out = RenderPlot("png", {}, {});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(std::string(out.status().message()), "png"));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

TEST(WritePlot, WritesTheRenderedFormatByExtension) {
  const std::vector<PlotSeries> series = {MakeSeries("a", 1)};
  const PlotInfo info = Info("file");
  const std::string dir = testing::TempDir();
  const std::string html_path = dir + "/loom_plot_test.html";
  const std::string svg_path = dir + "/loom_plot_test.SVG";
  ASSERT_TRUE(WritePlot(html_path, info, series).ok());
  ASSERT_TRUE(WritePlot(svg_path, info, series).ok());
  EXPECT_EQ(ReadFile(html_path), Render("html", info, series));
  EXPECT_EQ(ReadFile(svg_path), Render("svg", info, series));
  std::remove(html_path.c_str());
  std::remove(svg_path.c_str());
}

TEST(WritePlot, RejectsOtherExtensions) {
  const std::string path = testing::TempDir() + "/loom_plot_test.png";
  const absl::Status status = WritePlot(path, {}, {MakeSeries("a", 1)});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(std::string(status.message()), path));
  EXPECT_FALSE(std::ifstream(path).good());
  EXPECT_EQ(WritePlot("plot", {}, {}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(WritePlot, ReportsUnwritablePath) {
  // A regular file used as a directory fails even for root.
  const std::string file = testing::TempDir() + "/loom_plot_test_file";
  std::ofstream(file) << "x";
  const std::string path = file + "/plot.html";
  const absl::Status status = WritePlot(path, {}, {MakeSeries("a", 1)});
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(Contains(std::string(status.message()), path)) << status;
  std::remove(file.c_str());
}

}  // namespace
}  // namespace loom
