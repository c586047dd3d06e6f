#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace loom {

// One policy's results from a simulator run, as plotted by `WritePlot`.
//
// The time series are step functions: each `(t, v)` point holds the value `v`
// from time `t` until the next point's time; the last point ends the line.
// Times are seconds since the first job submission and should be
// non-decreasing. Points with a NaN or infinite coordinate, and points whose
// time goes backwards, are skipped when drawing.
struct PlotSeries {
  // The policy's name, e.g. `fair`. Any text; it is escaped when written.
  std::string name;
  // `(time in seconds, allocated GPUs / total GPUs)`; the value is expected
  // in [0, 1] and is clipped to that range when drawn.
  std::vector<std::pair<double, double>> utilization;
  // `(time in seconds, number of pending jobs)`.
  std::vector<std::pair<double, double>> queue_length;
  // Job completion times in seconds, in any order. Negative and non-finite
  // values are skipped; zero is drawn at the left edge of the log axis.
  std::vector<double> jct_s;
};

// Text and markers that apply to the whole plot.
struct PlotInfo {
  // The heading of the page, e.g. `loom sim: philly trace on 16000 GPUs`.
  std::string title;
  // A second line under the heading, e.g. the cluster and trace details.
  std::string subtitle;
  // When positive and finite, a dashed vertical marker labelled "arrivals
  // end" is drawn at this time (seconds) on the two time charts.
  double arrival_window_end_s = 0;
};

// Writes a plot of `series` that a person can open in a browser. The format
// follows the extension of `path` (compared case-insensitively):
//
// * `.html`: a self-contained HTML page (inline SVG and CSS only, with no
//   scripts and nothing fetched from the network) holding three charts: GPU
//   utilisation over time, queue length over time, and the cumulative
//   distribution of job completion times on a logarithmic time axis. Each
//   chart has axes, tick labels, a legend, and one line per policy in a
//   colour of its own.
// * `.svg`: one standalone SVG document with the same three charts stacked.
//
// Lines are downsampled to at most `kMaxPlotPointsPerLine` points, so the file
// stays small for series of any length. Empty and degenerate series are
// drawn as far as they go (an empty series gets a legend entry and no line).
//
// Returns `InvalidArgument` for any other extension, and the error of the
// failed system call, naming `path`, when the file cannot be written. A file
// that fails part-way may be left truncated. Thread-compatible: the function
// has no shared state.
[[nodiscard]] absl::Status WritePlot(const std::string& path,
                                     const PlotInfo& info,
                                     const std::vector<PlotSeries>& series);

// Renders the same content as `WritePlot` into a string. `format` is `html`
// or `svg`; anything else is `InvalidArgument`.
[[nodiscard]] absl::StatusOr<std::string> RenderPlot(
    std::string_view format, const PlotInfo& info,
    const std::vector<PlotSeries>& series);

// The most points that one policy's line in one chart is drawn with.
inline constexpr int kMaxPlotPointsPerLine = 1500;

}  // namespace loom
