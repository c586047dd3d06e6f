#pragma once

// Writes Prometheus' text exposition format, version 0.0.4, the body of a
// `GET /metrics` answer. Pure: no I/O, no clock, no global registry. Callers
// keep their own counters, gauges and `Histogram`s and write them into a
// `MetricsWriter` when a scrape comes in.
//
// The format's rules, as this file applies them:
// - Metric names match `[a-zA-Z_:][a-zA-Z0-9_:]*`; label names match
//   `[a-zA-Z_][a-zA-Z0-9_]*` and must not start with `__` (reserved).
// - Label values escape `\` as `\\`, `"` as `\"` and newline as `\n`. HELP
//   text escapes `\` and newline only. Both must be UTF-8.
// - Sample values are floats written as Go writes them (`+Inf`, `-Inf`,
//   `NaN`, `0.1`, `1e-09`), see `FormatMetricValue`.
// - A family is `# HELP` (optional) and `# TYPE` once, then all of its
//   samples as one contiguous group; a series (name and label set) appears
//   once.
// - A histogram `x` has cumulative, non-decreasing `x_bucket{...,le="b"}`
//   lines ending with `le="+Inf"`, then `x_sum` and `x_count`, where `x_count`
//   equals the `+Inf` bucket.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace loom {

// The `Content-Type` a `/metrics` answer carrying this output should have.
inline constexpr std::string_view kMetricsContentType =
    "text/plain; version=0.0.4; charset=utf-8";

// The metric types this writer supports (`summary` is not needed by loom).
enum class MetricType { kCounter, kGauge, kHistogram, kUntyped };

// The word used on the `# TYPE` line: `counter`, `gauge`, `histogram`,
// `untyped`.
std::string_view MetricTypeName(MetricType type);

// A sample's labels, as (name, value) pairs, written in the given order.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// Returns OK if `name` is a valid metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`),
// else `InvalidArgument` naming it. (Colons are valid but by convention left
// to recording rules.)
absl::Status ValidateMetricName(std::string_view name);

// Returns OK if `name` is a valid label name (`[a-zA-Z_][a-zA-Z0-9_]*` and not
// starting with the reserved `__`), else `InvalidArgument` naming it.
absl::Status ValidateLabelName(std::string_view name);

// Returns a valid metric name made from `name`: every byte outside
// `[a-zA-Z0-9_:]` becomes `_`, and `_` is put in front of an empty name or one
// that starts with a digit. A valid name is returned unchanged.
std::string SanitizeMetricName(std::string_view name);

// Returns a valid label name made from `name`: every byte outside
// `[a-zA-Z0-9_]` becomes `_`, `_` is put in front of an empty name or one that
// starts with a digit, and leading underscores are cut to one when there are
// two or more (`__name__` becomes `_name__`). A valid name is returned
// unchanged.
std::string SanitizeLabelName(std::string_view name);

// Escapes a label value for use between the double quotes: `\` -> `\\`,
// `"` -> `\"`, newline -> `\n`. Bytes that are not valid UTF-8 are replaced
// by U+FFFD, since a scrape with invalid UTF-8 is rejected as a whole.
std::string EscapeLabelValue(std::string_view value);

// Escapes `# HELP` text: `\` -> `\\`, newline -> `\n` (quotes are left as
// they are). Invalid UTF-8 is replaced by U+FFFD as in `EscapeLabelValue`.
std::string EscapeHelp(std::string_view help);

// Formats a sample value or a bucket bound (`le`) the way Prometheus' Go
// client does (`strconv.FormatFloat(v, 'g', -1, 64)`): `+Inf`, `-Inf`,
// `NaN`; the shortest text that reads back as the same double (`0.1`,
// `0.005`, `1e-09`, `1.5e+300`); `0` for both zeros. One difference, for
// readable byte and count metrics: an integral value of magnitude at most 2^53
// is written as a plain integer (`1000000`, not `1e+06`); both read back as
// the same double.
std::string FormatMetricValue(double value);

// A histogram with fixed bucket bounds, to keep in a component and write with
// `MetricsWriter::HistogramSample`. Not thread-safe: guard it with the owner's
// mutex.
class Histogram {
 public:
  // A histogram with no finite buckets (only `+Inf`): counts and sums only.
  Histogram() : bucket_counts_(1, 0) {}

  // A histogram whose buckets have the upper bounds `upper_bounds`, which
  // must be finite and strictly increasing (the `+Inf` bucket is implicit);
  // else `InvalidArgument`. May be empty.
  static absl::StatusOr<Histogram> Create(std::vector<double> upper_bounds);

  // Prometheus' default buckets, 0.005 to 10 (seconds):
  // {.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}.
  static std::vector<double> DefaultBounds();

  // Counts `value` in the first bucket whose bound is >= `value` (or in
  // `+Inf`) and adds it to the sum. As in Prometheus' Go client, a NaN is
  // counted in `+Inf` only and makes the sum NaN.
  void Observe(double value);

  // Adds `other`'s counts and sum to this one. `InvalidArgument`, leaving this
  // one unchanged, if the bucket bounds differ.
  [[nodiscard]] absl::Status Merge(const Histogram& other);

  // The finite upper bounds, strictly increasing.
  const std::vector<double>& upper_bounds() const { return upper_bounds_; }
  // Per-bucket (not cumulative) counts, `upper_bounds().size() + 1` of them;
  // the last is the bucket above the last finite bound.
  const std::vector<uint64_t>& bucket_counts() const { return bucket_counts_; }
  // The number of observations, i.e. the `+Inf` bucket.
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  explicit Histogram(std::vector<double> upper_bounds);

  std::vector<double> upper_bounds_;
  std::vector<uint64_t> bucket_counts_;
  uint64_t count_ = 0;
  double sum_ = 0;
};

// How `MetricsWriter::HistogramSample` reads its `counts`.
enum class BucketCounts {
  kCumulative,  // counts[i] = observations <= upper_bounds[i].
  kPerBucket,   // counts[i] = observations in (upper_bounds[i-1],
                //             upper_bounds[i]].
};

// Appends an exposition to a string, one family after another:
//
//   std::string body;
//   MetricsWriter w(&body);
//   w.Family("loom_jobs", "Jobs by state.", MetricType::kGauge);
//   w.Sample("loom_jobs", {{"state", "running"}}, 3);
//   w.Sample("loom_jobs", {{"state", "pending"}}, 7);
//   w.Family("loom_schedule_seconds", "Time per cycle.",
//            MetricType::kHistogram);
//   w.HistogramSample("loom_schedule_seconds", {}, cycle_histogram);
//   // !w.status().ok() means a bug in the calls above; `body` is valid.
//
// The output is always valid text format, whatever the calls: a call that
// breaks a rule is a programming error, recorded in `status()` (the first one
// only), and the writer either repairs it (an invalid metric or label name is
// sanitised as by `SanitizeMetricName`/`SanitizeLabelName` and written) or
// leaves out the lines it would have written (a sample outside its family, a
// repeated series, a bad histogram). Not thread-safe.
class MetricsWriter {
 public:
  // Appends to `*out`, which must outlive the writer.
  explicit MetricsWriter(std::string* out) : out_(out) {}
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // Starts the family `name`: writes `# HELP name help` (left out when `help`
  // is empty) and `# TYPE name type`, and ends the previous family. Each
  // family may be started once; the sample names a family owns (`name`, and
  // for a histogram also `name_bucket`, `name_sum`, `name_count`) may not be
  // reused by another. A repeated or clashing family is an error: nothing is
  // written and its samples are left out (unless it repeats the current
  // family, whose samples then continue).
  void Family(std::string_view name, std::string_view help, MetricType type);

  // Writes `name{labels} value` for a counter, gauge or untyped family.
  // `name` must be the current family's name (an error otherwise: a sample
  // before any family, or for an earlier family, is left out, so that a
  // family's samples stay contiguous). Histogram families are written with
  // `HistogramSample` only. Duplicate label names (after sanitising) and a
  // series already written are errors and left out.
  void Sample(std::string_view name, const MetricLabels& labels, double value);

  // Writes one histogram series of the current histogram family `name`:
  // `name_bucket{labels,le="b"}` for each bound then `le="+Inf"` (with value
  // `count`), `name_sum{labels}` and `name_count{labels}`. `upper_bounds` must
  // be strictly increasing (a trailing `+Inf` may be given; then its count
  // must equal `count`), `counts` as many as the bounds, read as `kind` says;
  // cumulative counts must not decrease nor exceed `count`. `labels` must not
  // contain `le`. Any violation is an error and nothing is written.
  void HistogramSample(std::string_view name, const MetricLabels& labels,
                       std::span<const double> upper_bounds,
                       std::span<const uint64_t> counts, BucketCounts kind,
                       double sum, uint64_t count);

  // Writes `histogram` as above.
  void HistogramSample(std::string_view name, const MetricLabels& labels,
                       const Histogram& histogram);

  // The first error met, OK if none. The output is valid text format either
  // way.
  const absl::Status& status() const { return status_; }

 private:
  struct CurrentFamily {
    std::string name;
    MetricType type = MetricType::kUntyped;
    bool accepting = false;  // False before any family and after a bad one.
  };

  void SetError(absl::Status status);
  // Checks that `name` (sanitised) belongs to the current family of a type
  // `Sample` (or `HistogramSample` when `histogram`) may write. Records an
  // error and returns false otherwise.
  bool BelongsToCurrent(std::string_view name, bool histogram);
  // Sanitises `labels` into `*out`. Records an error and returns false on a
  // duplicate label name, or on a label named `reserved` when not empty.
  bool CheckLabels(const MetricLabels& labels, std::string_view reserved,
                   MetricLabels* out);
  // Records an error and returns false if `name` with `labels` was already
  // written in this family; else remembers it.
  bool NewSeries(std::string_view name, const MetricLabels& labels);
  void AppendLine(std::string_view name, const MetricLabels& labels,
                  std::string_view extra_label, std::string_view extra_value,
                  std::string_view value);

  std::string* out_;  // Not owned.
  absl::Status status_;
  CurrentFamily current_;
  // Sample names owned by the families started so far.
  std::set<std::string, std::less<>> claimed_names_;
  // Series (name and sorted labels) written in the current family.
  std::set<std::string> series_;
};

}  // namespace loom
