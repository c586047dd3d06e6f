#include "loom/common/metrics_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <system_error>

#include "fmt/format.h"
#include "loom/common/utf8.h"

namespace loom {
namespace {

bool IsAsciiLetter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool IsAsciiDigit(char c) { return c >= '0' && c <= '9'; }

bool IsMetricNameChar(char c) {
  return IsAsciiLetter(c) || IsAsciiDigit(c) || c == '_' || c == ':';
}
bool IsLabelNameChar(char c) {
  return IsAsciiLetter(c) || IsAsciiDigit(c) || c == '_';
}

// Appends `text` to `*out` escaping `\` and newline, and `"` too when
// `escape_quote`; invalid UTF-8 bytes become U+FFFD.
void AppendEscaped(std::string_view text, bool escape_quote, std::string* out) {
  out->reserve(out->size() + text.size());
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (static_cast<unsigned char>(c) < 0x80) {
      if (c == '\\') {
        out->append("\\\\");
      } else if (c == '\n') {
        out->append("\\n");
      } else if (c == '"' && escape_quote) {
        out->append("\\\"");
      } else {
        out->push_back(c);
      }
      ++i;
      continue;
    }
    const size_t len = Utf8CharLength(text, i);
    if (len == 0) {
      out->append("\xEF\xBF\xBD");  // U+FFFD REPLACEMENT CHARACTER.
      ++i;
    } else {
      out->append(text.substr(i, len));
      i += len;
    }
  }
}

// A key for the series `name{labels}`, the same whatever the labels' order.
std::string SeriesKey(std::string_view name, const MetricLabels& labels) {
  MetricLabels sorted = labels;
  std::sort(sorted.begin(), sorted.end());
  std::string key(name);
  for (const auto& [label, value] : sorted) {
    // Label names have no '=' and the value is length-prefixed, so distinct
    // label sets give distinct keys.
    key += fmt::format("|{}={}:{}", label, value.size(), value);
  }
  return key;
}

}  // namespace

std::string_view MetricTypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
    case MetricType::kUntyped:
      return "untyped";
  }
  return "untyped";
}

absl::Status ValidateMetricName(std::string_view name) {
  bool valid = !name.empty() && !IsAsciiDigit(name.front()) &&
               std::all_of(name.begin(), name.end(), IsMetricNameChar);
  if (valid) return absl::OkStatus();
  return absl::InvalidArgumentError(fmt::format(
      "invalid metric name '{}' (must match [a-zA-Z_:][a-zA-Z0-9_:]*)", name));
}

absl::Status ValidateLabelName(std::string_view name) {
  bool valid = !name.empty() && !IsAsciiDigit(name.front()) &&
               std::all_of(name.begin(), name.end(), IsLabelNameChar);
  if (!valid) {
    return absl::InvalidArgumentError(fmt::format(
        "invalid label name '{}' (must match [a-zA-Z_][a-zA-Z0-9_]*)", name));
  }
  if (name.starts_with("__")) {
    return absl::InvalidArgumentError(fmt::format(
        "label name '{}' starts with '__', which is reserved", name));
  }
  return absl::OkStatus();
}

std::string SanitizeMetricName(std::string_view name) {
  std::string out;
  if (name.empty() || IsAsciiDigit(name.front())) out.push_back('_');
  for (char c : name) out.push_back(IsMetricNameChar(c) ? c : '_');
  return out;
}

std::string SanitizeLabelName(std::string_view name) {
  std::string out;
  if (name.empty() || IsAsciiDigit(name.front())) out.push_back('_');
  for (char c : name) out.push_back(IsLabelNameChar(c) ? c : '_');
  size_t underscores = 0;
  while (underscores < out.size() && out[underscores] == '_') ++underscores;
  if (underscores >= 2) out.erase(0, underscores - 1);
  return out;
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  AppendEscaped(value, /*escape_quote=*/true, &out);
  return out;
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  AppendEscaped(help, /*escape_quote=*/false, &out);
  return out;
}

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == 0) return "0";  // Also -0, as Prometheus' Go client writes it.
  constexpr double kMaxExactInteger = 9007199254740992.0;  // 2^53.
  if (std::fabs(value) <= kMaxExactInteger && std::trunc(value) == value) {
    return fmt::format("{}", static_cast<int64_t>(value));
  }
  // Go's 'g' with the shortest precision: the shortest round-trip digits,
  // in exponent form (at least two exponent digits, as C's %e) when the
  // decimal exponent is < -4 or >= 6, else in plain decimal form.
  char buf[64];
  const std::to_chars_result sci = std::to_chars(buf, buf + sizeof(buf), value,
                                                 std::chars_format::scientific);
  std::string_view text(buf, sci.ptr - buf);
  const size_t e = text.find('e');
  std::string_view exp_text = text.substr(e + 1);
  const bool negative_exp = exp_text.front() == '-';
  exp_text.remove_prefix(1);  // to_chars always writes the exponent's sign.
  int exponent = 0;
  std::from_chars(exp_text.data(), exp_text.data() + exp_text.size(), exponent);
  if (negative_exp) exponent = -exponent;
  if (exponent < -4 || exponent >= 6) return std::string(text);
  const std::to_chars_result fixed =
      std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::fixed);
  return std::string(buf, fixed.ptr - buf);
}

// Histogram.

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)),
      bucket_counts_(upper_bounds_.size() + 1, 0) {}

absl::StatusOr<Histogram> Histogram::Create(std::vector<double> upper_bounds) {
  for (size_t i = 0; i < upper_bounds.size(); ++i) {
    if (!std::isfinite(upper_bounds[i])) {
      return absl::InvalidArgumentError(fmt::format(
          "histogram bucket bound {} is not finite (+Inf is implicit)",
          FormatMetricValue(upper_bounds[i])));
    }
    if (i > 0 && !(upper_bounds[i - 1] < upper_bounds[i])) {
      return absl::InvalidArgumentError(
          fmt::format("histogram bucket bounds must be strictly increasing, "
                      "got {} then {}",
                      FormatMetricValue(upper_bounds[i - 1]),
                      FormatMetricValue(upper_bounds[i])));
    }
  }
  return Histogram(std::move(upper_bounds));
}

std::vector<double> Histogram::DefaultBounds() {
  return {.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10};
}

void Histogram::Observe(double value) {
  const size_t bucket =
      std::isnan(value)
          ? upper_bounds_.size()
          : static_cast<size_t>(std::lower_bound(upper_bounds_.begin(),
                                                 upper_bounds_.end(), value) -
                                upper_bounds_.begin());
  ++bucket_counts_[bucket];
  ++count_;
  sum_ += value;
}

absl::Status Histogram::Merge(const Histogram& other) {
  if (other.upper_bounds_ != upper_bounds_) {
    return absl::InvalidArgumentError(
        "cannot merge histograms with different bucket bounds");
  }
  for (size_t i = 0; i < bucket_counts_.size(); ++i) {
    bucket_counts_[i] += other.bucket_counts_[i];
  }
  count_ += other.count_;
  sum_ += other.sum_;
  return absl::OkStatus();
}

// MetricsWriter.

void MetricsWriter::SetError(absl::Status status) {
  if (status_.ok()) status_ = std::move(status);
}

void MetricsWriter::Family(std::string_view name, std::string_view help,
                           MetricType type) {
  std::string clean = SanitizeMetricName(name);
  if (clean != name) SetError(ValidateMetricName(name));
  if (current_.accepting && clean == current_.name) {
    SetError(absl::FailedPreconditionError(
        fmt::format("metric family '{}' started twice", clean)));
    return;
  }
  std::vector<std::string> owned = {clean};
  if (type == MetricType::kHistogram) {
    owned.push_back(clean + "_bucket");
    owned.push_back(clean + "_sum");
    owned.push_back(clean + "_count");
  }
  series_.clear();
  for (const std::string& sample_name : owned) {
    if (claimed_names_.contains(sample_name)) {
      SetError(absl::FailedPreconditionError(fmt::format(
          "metric family '{}' repeats or clashes with an earlier family over "
          "the sample name '{}'; its samples are left out",
          clean, sample_name)));
      current_ = {std::move(clean), type, /*accepting=*/false};
      return;
    }
  }
  claimed_names_.insert(owned.begin(), owned.end());
  if (!help.empty()) {
    out_->append("# HELP ").append(clean).append(" ");
    AppendEscaped(help, /*escape_quote=*/false, out_);
    out_->push_back('\n');
  }
  out_->append("# TYPE ")
      .append(clean)
      .append(" ")
      .append(MetricTypeName(type))
      .push_back('\n');
  current_ = {std::move(clean), type, /*accepting=*/true};
}

bool MetricsWriter::BelongsToCurrent(std::string_view name, bool histogram) {
  std::string clean = SanitizeMetricName(name);
  if (clean != name) SetError(ValidateMetricName(name));
  if (current_.name.empty()) {
    SetError(absl::FailedPreconditionError(fmt::format(
        "sample '{}' written before any metric family; left out", clean)));
    return false;
  }
  if (clean != current_.name) {
    SetError(absl::FailedPreconditionError(fmt::format(
        "sample '{}' written in metric family '{}'; a family's samples must "
        "be contiguous, so it is left out",
        clean, current_.name)));
    return false;
  }
  if (!current_.accepting) {
    // Its family was refused, and that error is already recorded.
    return false;
  }
  if ((current_.type == MetricType::kHistogram) != histogram) {
    SetError(absl::FailedPreconditionError(
        histogram ? fmt::format("metric family '{}' is a {}, not a histogram",
                                clean, MetricTypeName(current_.type))
                  : fmt::format("histogram family '{}' is written with "
                                "HistogramSample, not Sample",
                                clean)));
    return false;
  }
  return true;
}

bool MetricsWriter::CheckLabels(const MetricLabels& labels,
                                std::string_view reserved, MetricLabels* out) {
  out->clear();
  out->reserve(labels.size());
  for (const auto& [label, value] : labels) {
    std::string clean = SanitizeLabelName(label);
    if (clean != label) SetError(ValidateLabelName(label));
    if (!reserved.empty() && clean == reserved) {
      SetError(absl::InvalidArgumentError(
          fmt::format("label '{}' of '{}' is reserved: the writer adds it",
                      clean, current_.name)));
      return false;
    }
    for (const auto& seen : *out) {
      if (seen.first == clean) {
        SetError(absl::InvalidArgumentError(
            fmt::format("label '{}' given twice in a sample of '{}'", clean,
                        current_.name)));
        return false;
      }
    }
    out->emplace_back(std::move(clean), value);
  }
  return true;
}

bool MetricsWriter::NewSeries(std::string_view name,
                              const MetricLabels& labels) {
  if (series_.insert(SeriesKey(name, labels)).second) return true;
  SetError(absl::FailedPreconditionError(
      fmt::format("series of '{}' written twice with the same labels", name)));
  return false;
}

void MetricsWriter::AppendLine(std::string_view name,
                               const MetricLabels& labels,
                               std::string_view extra_label,
                               std::string_view extra_value,
                               std::string_view value) {
  out_->append(name);
  if (!labels.empty() || !extra_label.empty()) {
    out_->push_back('{');
    bool first = true;
    auto append_label = [&](std::string_view label, std::string_view v) {
      if (!first) out_->push_back(',');
      first = false;
      out_->append(label).append("=\"");
      AppendEscaped(v, /*escape_quote=*/true, out_);
      out_->push_back('"');
    };
    for (const auto& [label, v] : labels) append_label(label, v);
    if (!extra_label.empty()) append_label(extra_label, extra_value);
    out_->push_back('}');
  }
  out_->push_back(' ');
  out_->append(value);
  out_->push_back('\n');
}

void MetricsWriter::Sample(std::string_view name, const MetricLabels& labels,
                           double value) {
  if (!BelongsToCurrent(name, /*histogram=*/false)) return;
  MetricLabels clean;
  if (!CheckLabels(labels, /*reserved=*/"", &clean)) return;
  if (!NewSeries(current_.name, clean)) return;
  AppendLine(current_.name, clean, "", "", FormatMetricValue(value));
}

void MetricsWriter::HistogramSample(std::string_view name,
                                    const MetricLabels& labels,
                                    std::span<const double> upper_bounds,
                                    std::span<const uint64_t> counts,
                                    BucketCounts kind, double sum,
                                    uint64_t count) {
  if (!BelongsToCurrent(name, /*histogram=*/true)) return;
  MetricLabels clean;
  if (!CheckLabels(labels, /*reserved=*/"le", &clean)) return;
  auto refuse = [&](std::string why) {
    SetError(absl::InvalidArgumentError(fmt::format(
        "histogram '{}' left out: {}", current_.name, std::move(why))));
  };
  if (counts.size() != upper_bounds.size()) {
    refuse(fmt::format("{} bucket counts for {} bounds", counts.size(),
                       upper_bounds.size()));
    return;
  }
  std::vector<uint64_t> cumulative(counts.size());
  uint64_t running = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (std::isnan(upper_bounds[i]) ||
        (i > 0 && !(upper_bounds[i - 1] < upper_bounds[i]))) {
      refuse("bucket bounds must be strictly increasing and not NaN");
      return;
    }
    if (kind == BucketCounts::kPerBucket) {
      if (counts[i] > std::numeric_limits<uint64_t>::max() - running) {
        refuse("bucket counts overflow");
        return;
      }
      running += counts[i];
    } else {
      if (counts[i] < running) {
        refuse(fmt::format("cumulative count {} after {} decreases", counts[i],
                           running));
        return;
      }
      running = counts[i];
    }
    cumulative[i] = running;
  }
  if (running > count) {
    refuse(fmt::format("buckets hold {} observations but count is {}", running,
                       count));
    return;
  }
  const bool has_inf =
      !upper_bounds.empty() &&
      upper_bounds.back() == std::numeric_limits<double>::infinity();
  if (has_inf && running != count) {
    refuse(fmt::format("+Inf bucket holds {} but count is {}", running, count));
    return;
  }
  if (!NewSeries(current_.name, clean)) return;
  const std::string bucket = current_.name + "_bucket";
  for (size_t i = 0; i < cumulative.size(); ++i) {
    AppendLine(bucket, clean, "le", FormatMetricValue(upper_bounds[i]),
               fmt::format("{}", cumulative[i]));
  }
  if (!has_inf) {
    AppendLine(bucket, clean, "le", "+Inf", fmt::format("{}", count));
  }
  AppendLine(current_.name + "_sum", clean, "", "", FormatMetricValue(sum));
  AppendLine(current_.name + "_count", clean, "", "", fmt::format("{}", count));
}

void MetricsWriter::HistogramSample(std::string_view name,
                                    const MetricLabels& labels,
                                    const Histogram& histogram) {
  const std::vector<double>& bounds = histogram.upper_bounds();
  HistogramSample(name, labels, bounds,
                  std::span(histogram.bucket_counts()).first(bounds.size()),
                  BucketCounts::kPerBucket, histogram.sum(), histogram.count());
}

}  // namespace loom
