#include "loom/trace/trace.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <istream>
#include <limits>
#include <streambuf>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "loom/common/units.h"
#include "loom/trace/csv.h"
#include "loom/trace/trace_cells.h"

namespace loom {
namespace {

// A physical line longer than this is a bad line (a header line longer than
// this is an unrecognised header).
constexpr size_t kMaxLineBytes = size_t{1} << 20;

using csv::Av;
using csv::IsBlank;
using csv::kUtf8Bom;
using csv::ParseNumber;
using csv::Quote;
using csv::SplitCsvLine;
using csv::TrimSpace;

using trace_cells::ParseGpuCount;
using trace_cells::ParseGpuModel;
using trace_cells::ParseOptionalBool;
using trace_cells::ParseOptionalTimeLimit;
using trace_cells::ParseSeconds;
using trace_cells::ParseText;
using trace_cells::ParseTimestamp;

// Where each column a format uses sits in the header; -1 when absent.
struct Columns {
  int id = -1;
  int submit = -1;
  int duration = -1;
  int gpus = -1;
  int gpu_model = -1;
  int project = -1;
  int user = -1;
  int priority = -1;
  int preemptible = -1;
  int time_limit = -1;
  // Alibaba only.
  int gpu_milli = -1;
  int gpu_spec = -1;
  int cpu_milli = -1;
  int memory_mib = -1;
  int qos = -1;
  int deletion = -1;
  int scheduled = -1;
  // The header's column names as written (trimmed), for messages.
  std::vector<std::string> names;
};

// One column a format reads: its header name, where its index goes, and
// whether the header must have it.
struct ColumnSpec {
  std::string_view name;
  int Columns::*index;
  bool required;
};

constexpr ColumnSpec kPhillyColumns[] = {
    {"timestamp", &Columns::submit, true},
    {"duration", &Columns::duration, true},
    {"num_gpus", &Columns::gpus, true},
    {"cluster", &Columns::project, false},
};

constexpr ColumnSpec kItpColumns[] = {
    {"job_id", &Columns::id, true},
    {"submission_time", &Columns::submit, true},
    {"duration", &Columns::duration, true},
    {"num_gpu", &Columns::gpus, true},
};

constexpr ColumnSpec kAlibabaColumns[] = {
    {"name", &Columns::id, true},
    {"num_gpu", &Columns::gpus, true},
    {"gpu_milli", &Columns::gpu_milli, false},
    {"gpu_spec", &Columns::gpu_spec, false},
    {"cpu_milli", &Columns::cpu_milli, false},
    {"memory_mib", &Columns::memory_mib, false},
    {"qos", &Columns::qos, false},
    {"creation_time", &Columns::submit, true},
    {"deletion_time", &Columns::deletion, true},
    {"scheduled_time", &Columns::scheduled, true},
};

constexpr ColumnSpec kCanonicalColumns[] = {
    {"job_id", &Columns::id, true},
    {"submit_time", &Columns::submit, true},
    {"duration", &Columns::duration, true},
    {"num_gpus", &Columns::gpus, true},
    {"gpu_model", &Columns::gpu_model, false},
    {"project", &Columns::project, false},
    {"user", &Columns::user, false},
    {"priority", &Columns::priority, false},
    {"preemptible", &Columns::preemptible, false},
    {"time_limit", &Columns::time_limit, false},
};
constexpr int kCanonicalRequired = 4;

template <size_t N>
bool HasRequired(const ColumnSpec (&specs)[N],
                 const std::vector<std::string>& keys) {
  for (const ColumnSpec& spec : specs) {
    if (spec.required &&
        std::find(keys.begin(), keys.end(), spec.name) == keys.end()) {
      return false;
    }
  }
  return true;
}

bool StartsCanonical(const std::vector<std::string>& keys) {
  if (keys.size() < kCanonicalRequired) return false;
  for (int i = 0; i < kCanonicalRequired; ++i) {
    if (keys[i] != kCanonicalColumns[i].name) return false;
  }
  return true;
}

std::string HeaderText(std::string_view header) {
  return Quote(header.size() > 200 ? header.substr(0, 200) : header);
}

// Works out the format and the column positions from the header fields.
absl::StatusOr<Columns> MapHeader(const std::vector<std::string_view>& fields,
                                  std::string_view header,
                                  std::string_view source,
                                  TraceFormat* format) {
  Columns columns;
  std::vector<std::string> keys;  // Trimmed, lower-cased names.
  keys.reserve(fields.size());
  for (const std::string_view field : fields) {
    const std::string_view name = TrimSpace(field);
    columns.names.emplace_back(name);
    keys.push_back(absl::AsciiStrToLower(Av(name)));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].empty()) continue;
    if (std::find(keys.begin() + i + 1, keys.end(), keys[i]) != keys.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          Av(source), ": the header repeats column ", Quote(columns.names[i])));
    }
  }

  if (*format == TraceFormat::kAuto) {
    if (StartsCanonical(keys)) {
      *format = TraceFormat::kCanonical;
    } else if (HasRequired(kAlibabaColumns, keys)) {
      *format = TraceFormat::kAlibaba;
    } else if (HasRequired(kItpColumns, keys)) {
      *format = TraceFormat::kItp;
    } else if (HasRequired(kPhillyColumns, keys)) {
      *format = TraceFormat::kPhilly;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          Av(source), ": unrecognised trace header ", HeaderText(header),
          "; expected loom canonical "
          "(job_id,submit_time,duration,num_gpus,...), Philly "
          "(timestamp,duration,num_gpus,gpu_time,cluster), ITP "
          "(job_id,submission_time,duration,num_gpu) or Alibaba openb "
          "(name,...,num_gpu,...,creation_time,deletion_time,scheduled_time); "
          "see docs/trace-formats.md"));
    }
  }

  const auto map = [&](const auto& specs) -> absl::Status {
    for (const ColumnSpec& spec : specs) {
      const auto it = std::find(keys.begin(), keys.end(), spec.name);
      if (it == keys.end()) {
        if (spec.required) {
          return absl::InvalidArgumentError(absl::StrCat(
              Av(source), ": the header lacks column '", Av(spec.name),
              "' that the ", Av(TraceFormatName(*format)),
              " format needs; got ", HeaderText(header)));
        }
        continue;
      }
      columns.*(spec.index) = static_cast<int>(it - keys.begin());
    }
    return absl::OkStatus();
  };

  absl::Status status;
  switch (*format) {
    case TraceFormat::kCanonical: {
      if (!StartsCanonical(keys)) {
        return absl::InvalidArgumentError(
            absl::StrCat(Av(source),
                         ": a canonical trace header must start with "
                         "job_id,submit_time,duration,num_gpus; got ",
                         HeaderText(header)));
      }
      for (size_t i = kCanonicalRequired; i < keys.size(); ++i) {
        const bool known = std::any_of(
            std::begin(kCanonicalColumns), std::end(kCanonicalColumns),
            [&](const ColumnSpec& spec) { return spec.name == keys[i]; });
        if (!known) {
          return absl::InvalidArgumentError(absl::StrCat(
              Av(source), ": unknown column ", Quote(columns.names[i]),
              " in a canonical trace header (known optional columns: "
              "gpu_model, project, user, priority, preemptible, "
              "time_limit)"));
        }
      }
      status = map(kCanonicalColumns);
      break;
    }
    case TraceFormat::kPhilly:
      status = map(kPhillyColumns);
      break;
    case TraceFormat::kItp:
      status = map(kItpColumns);
      break;
    case TraceFormat::kAlibaba:
      status = map(kAlibabaColumns);
      break;
    case TraceFormat::kAuto:
      break;
  }
  if (!status.ok()) return status;
  return columns;
}

// What became of one data line.
enum class RowOutcome { kJob, kBad, kSkipCpuOnly, kSkipNeverScheduled };

// The cell at `index`, or "" when the column is absent.
std::string_view Cell(const std::vector<std::string_view>& fields, int index) {
  return index < 0 ? std::string_view() : fields[index];
}

const std::string& Name(const Columns& columns, int index) {
  return columns.names[index];
}

// Reads the id; an empty id becomes the line number.
bool ParseId(const Columns& c, const std::vector<std::string_view>& fields,
             TraceJob* job, std::string* error) {
  if (c.id >= 0 && !ParseText(Name(c, c.id), fields[c.id], &job->id, error)) {
    return false;
  }
  if (job->id.empty()) job->id = absl::StrCat(job->line);
  return true;
}

RowOutcome ParseCanonicalRow(const Columns& c,
                             const std::vector<std::string_view>& f,
                             TraceJob* job, std::string* error) {
  const bool ok =
      ParseId(c, f, job, error) &&
      ParseSeconds(Name(c, c.submit), f[c.submit], false, &job->submit_s,
                   error) &&
      ParseSeconds(Name(c, c.duration), f[c.duration], true, &job->duration_s,
                   error) &&
      ParseGpuCount(Name(c, c.gpus), f[c.gpus], 1, &job->num_gpus, error) &&
      (c.gpu_model < 0 || ParseGpuModel(Name(c, c.gpu_model), f[c.gpu_model],
                                        &job->gpu_model, error)) &&
      (c.project < 0 ||
       ParseText(Name(c, c.project), f[c.project], &job->project, error)) &&
      (c.user < 0 ||
       ParseText(Name(c, c.user), f[c.user], &job->user, error)) &&
      (c.priority < 0 ||
       ParseText(Name(c, c.priority), f[c.priority], &job->priority, error)) &&
      (c.preemptible < 0 ||
       ParseOptionalBool(Name(c, c.preemptible), f[c.preemptible],
                         &job->preemptible, error)) &&
      (c.time_limit < 0 ||
       ParseOptionalTimeLimit(Name(c, c.time_limit), f[c.time_limit],
                              &job->time_limit_s, error));
  return ok ? RowOutcome::kJob : RowOutcome::kBad;
}

RowOutcome ParsePhillyRow(const Columns& c,
                          const std::vector<std::string_view>& f, TraceJob* job,
                          std::string* error) {
  job->id = absl::StrCat(job->line);
  const bool ok =
      ParseTimestamp(Name(c, c.submit), f[c.submit], &job->submit_s, error) &&
      ParseSeconds(Name(c, c.duration), f[c.duration], true, &job->duration_s,
                   error) &&
      ParseGpuCount(Name(c, c.gpus), f[c.gpus], 1, &job->num_gpus, error) &&
      (c.project < 0 ||
       ParseText(Name(c, c.project), f[c.project], &job->project, error));
  return ok ? RowOutcome::kJob : RowOutcome::kBad;
}

RowOutcome ParseItpRow(const Columns& c, const std::vector<std::string_view>& f,
                       TraceJob* job, std::string* error) {
  const bool ok =
      ParseId(c, f, job, error) &&
      ParseSeconds(Name(c, c.submit), f[c.submit], false, &job->submit_s,
                   error) &&
      ParseSeconds(Name(c, c.duration), f[c.duration], true, &job->duration_s,
                   error) &&
      ParseGpuCount(Name(c, c.gpus), f[c.gpus], 1, &job->num_gpus, error);
  return ok ? RowOutcome::kJob : RowOutcome::kBad;
}

// Alibaba openb pod list. See docs/trace-formats.md for the mapping.
RowOutcome ParseAlibabaRow(const Columns& c,
                           const std::vector<std::string_view>& f,
                           TraceJob* job, std::string* error) {
  int gpus = 0;
  if (!ParseGpuCount(Name(c, c.gpus), f[c.gpus], 0, &gpus, error)) {
    return RowOutcome::kBad;
  }
  if (gpus == 0) return RowOutcome::kSkipCpuOnly;
  if (TrimSpace(f[c.scheduled]).empty()) {
    return RowOutcome::kSkipNeverScheduled;
  }
  job->num_gpus = gpus;
  double milli = 0;
  double deletion = 0;
  double scheduled = 0;
  double cpu = 0;
  double memory = 0;
  const auto optional_number = [&](int index, double* out) {
    return index < 0 || TrimSpace(f[index]).empty() ||
           ParseNumber(Name(c, index), f[index], out, error);
  };
  if (!ParseId(c, f, job, error) || !optional_number(c.gpu_milli, &milli) ||
      !optional_number(c.cpu_milli, &cpu) ||
      !optional_number(c.memory_mib, &memory) ||
      !ParseSeconds(Name(c, c.submit), f[c.submit], false, &job->submit_s,
                    error) ||
      !ParseSeconds(Name(c, c.deletion), f[c.deletion], false, &deletion,
                    error) ||
      !ParseSeconds(Name(c, c.scheduled), f[c.scheduled], false, &scheduled,
                    error)) {
    return RowOutcome::kBad;
  }
  if (milli < 0 || milli > 1000 || milli != std::floor(milli)) {
    *error = absl::StrCat(Name(c, c.gpu_milli),
                          ": must be a whole number from 0 to 1000, got ",
                          Quote(TrimSpace(f[c.gpu_milli])));
    return RowOutcome::kBad;
  }
  for (const auto& [index, value] :
       {std::pair{c.cpu_milli, cpu}, std::pair{c.memory_mib, memory}}) {
    if (value < 0 || value > 1e12) {
      *error = absl::StrCat(Name(c, index), ": must be from 0 to 1e12, got ",
                            Quote(TrimSpace(f[index])));
      return RowOutcome::kBad;
    }
  }
  // A sharing pod (num_gpu 1, gpu_milli 1..999) takes part of one GPU;
  // gpu_milli 0 or 1000, or several GPUs, take whole GPUs.
  if (gpus == 1 && milli > 0 && milli < 1000) {
    job->gpu_milli = static_cast<int>(milli);
  }
  job->cpu_milli = static_cast<int64_t>(cpu);
  job->memory_mib = static_cast<int64_t>(memory);
  // gpu_spec: the models the pod may use, joined by `|`; empty: any.
  if (c.gpu_spec >= 0 && !TrimSpace(f[c.gpu_spec]).empty()) {
    std::vector<std::string> models;
    for (const absl::string_view part :
         absl::StrSplit(Av(TrimSpace(f[c.gpu_spec])), '|')) {
      std::string model;
      if (!ParseGpuModel(Name(c, c.gpu_spec),
                         std::string_view(part.data(), part.size()), &model,
                         error)) {
        return RowOutcome::kBad;
      }
      if (model.empty()) {
        *error = absl::StrCat(Name(c, c.gpu_spec), ": an empty model in ",
                              Quote(TrimSpace(f[c.gpu_spec])));
        return RowOutcome::kBad;
      }
      if (std::find(models.begin(), models.end(), model) == models.end()) {
        models.push_back(std::move(model));
      }
    }
    if (models.size() == 1) {
      job->gpu_model = std::move(models[0]);
    } else {
      job->gpu_model_choices = std::move(models);
    }
  }
  job->duration_s = deletion - scheduled;
  if (!(job->duration_s > 0)) {
    *error = absl::StrCat(Name(c, c.deletion), ": must be after ",
                          Name(c, c.scheduled), " (run time ", job->duration_s,
                          " s)");
    return RowOutcome::kBad;
  }
  // QoS classes map onto loom's default priority classes: latency-sensitive
  // and Guaranteed pods are `high`, best-effort pods `low` and preemptible,
  // everything else `normal`.
  const std::string_view qos = TrimSpace(Cell(f, c.qos));
  if (absl::EqualsIgnoreCase(Av(qos), "LS") ||
      absl::EqualsIgnoreCase(Av(qos), "Guaranteed")) {
    job->priority = "high";
  } else if (absl::EqualsIgnoreCase(Av(qos), "BE")) {
    job->priority = "low";
    job->preemptible = true;
  } else {
    job->priority = "normal";
  }
  return RowOutcome::kJob;
}

RowOutcome ParseRow(TraceFormat format, const Columns& columns,
                    const std::vector<std::string_view>& fields, TraceJob* job,
                    std::string* error) {
  switch (format) {
    case TraceFormat::kCanonical:
      return ParseCanonicalRow(columns, fields, job, error);
    case TraceFormat::kPhilly:
      return ParsePhillyRow(columns, fields, job, error);
    case TraceFormat::kItp:
      return ParseItpRow(columns, fields, job, error);
    case TraceFormat::kAlibaba:
      return ParseAlibabaRow(columns, fields, job, error);
    case TraceFormat::kAuto:
      break;
  }
  *error = "internal: no format";
  return RowOutcome::kBad;
}

absl::StatusOr<Trace> ParseTraceImpl(std::string_view text,
                                     std::string_view source,
                                     TraceFormat format, bool strict) {
  if (text.starts_with(kUtf8Bom)) text.remove_prefix(kUtf8Bom.size());

  Trace trace;
  Columns columns;
  bool have_header = false;
  std::vector<std::string_view> fields;
  std::string scratch;
  int cpu_only = 0;
  int never_scheduled = 0;

  // One job per line at most; reserving avoids regrowing a large vector.
  trace.jobs.reserve(std::min<size_t>(
      static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1,
      size_t{1} << 24));

  size_t pos = 0;
  int line_no = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    const size_t end = nl == std::string_view::npos ? text.size() : nl;
    std::string_view line = text.substr(pos, end - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    if (line_no == std::numeric_limits<int>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Av(source), ": too many lines"));
    }
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (IsBlank(line)) continue;

    if (!have_header) {
      if (line.size() > kMaxLineBytes) {
        return absl::InvalidArgumentError(
            absl::StrCat(Av(source), ": unrecognised trace header (line ",
                         line_no, " is longer than 1 MiB)"));
      }
      const std::string split_error = SplitCsvLine(line, &fields, &scratch);
      if (!split_error.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(Av(source), ": line ", line_no,
                         ": unrecognised trace header: ", split_error));
      }
      absl::StatusOr<Columns> mapped = MapHeader(fields, line, source, &format);
      if (!mapped.ok()) return mapped.status();
      columns = *std::move(mapped);
      trace.format = format;
      have_header = true;
      continue;
    }

    TraceIssue issue{line_no, ""};
    if (line.size() > kMaxLineBytes) {
      issue.reason =
          absl::StrCat("line is longer than 1 MiB (", line.size(), " bytes)");
    } else {
      issue.reason = SplitCsvLine(line, &fields, &scratch);
      if (issue.reason.empty() && fields.size() != columns.names.size()) {
        issue.reason = absl::StrCat("expected ", columns.names.size(),
                                    " fields, got ", fields.size());
      }
      if (issue.reason.empty()) {
        TraceJob job;
        job.line = line_no;
        switch (ParseRow(format, columns, fields, &job, &issue.reason)) {
          case RowOutcome::kJob:
            trace.jobs.push_back(std::move(job));
            continue;
          case RowOutcome::kSkipCpuOnly:
            ++cpu_only;
            continue;
          case RowOutcome::kSkipNeverScheduled:
            ++never_scheduled;
            continue;
          case RowOutcome::kBad:
            break;
        }
      }
    }
    if (strict) {
      return absl::InvalidArgumentError(
          absl::StrCat(Av(source), ": ", FormatTraceIssue(issue)));
    }
    trace.issues.push_back(std::move(issue));
  }

  if (!have_header) {
    return absl::InvalidArgumentError(
        absl::StrCat(Av(source), ": empty trace (no header line)"));
  }

  std::vector<std::string> reasons;
  if (cpu_only > 0) {
    reasons.push_back(absl::StrCat(cpu_only, " CPU-only pods (num_gpu 0)"));
  }
  if (never_scheduled > 0) {
    reasons.push_back(absl::StrCat(never_scheduled,
                                   " never-scheduled pods (scheduled_time "
                                   "empty)"));
  }
  trace.skipped = cpu_only + never_scheduled;
  trace.skipped_reason = absl::StrJoin(reasons, "; ");

  // Sort small (submit, index) keys rather than whole jobs; jobs were
  // appended in line order, so breaking ties by index breaks them by line.
  std::vector<std::pair<double, size_t>> order;
  order.reserve(trace.jobs.size());
  for (size_t i = 0; i < trace.jobs.size(); ++i) {
    order.emplace_back(trace.jobs[i].submit_s, i);
  }
  std::sort(order.begin(), order.end());
  std::vector<TraceJob> sorted;
  sorted.reserve(trace.jobs.size());
  const double origin = order.empty() ? 0 : order.front().first;
  for (const auto& [submit, index] : order) {
    sorted.push_back(std::move(trace.jobs[index]));
    sorted.back().submit_s = submit - origin;
  }
  trace.jobs = std::move(sorted);
  return trace;
}

}  // namespace

absl::StatusOr<TraceFormat> ParseTraceFormat(std::string_view name) {
  const std::string key = absl::AsciiStrToLower(Av(TrimSpace(name)));
  if (key == "auto") return TraceFormat::kAuto;
  if (key == "canonical" || key == "loom") return TraceFormat::kCanonical;
  if (key == "philly") return TraceFormat::kPhilly;
  if (key == "itp") return TraceFormat::kItp;
  if (key == "alibaba" || key == "openb") return TraceFormat::kAlibaba;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown trace format ", Quote(name),
                   " (use auto, canonical, philly, itp or alibaba)"));
}

std::string_view TraceFormatName(TraceFormat f) {
  switch (f) {
    case TraceFormat::kAuto:
      return "auto";
    case TraceFormat::kCanonical:
      return "canonical";
    case TraceFormat::kPhilly:
      return "philly";
    case TraceFormat::kItp:
      return "itp";
    case TraceFormat::kAlibaba:
      return "alibaba";
  }
  return "unknown";
}

std::string FormatTraceIssue(const TraceIssue& issue) {
  return absl::StrCat("line ", issue.line, ": ", issue.reason);
}

absl::StatusOr<Trace> ParseTrace(std::string_view text, std::string_view source,
                                 TraceFormat format, bool strict) {
  try {
    return ParseTraceImpl(text, source, format, strict);
  } catch (const std::exception& e) {
    // Only allocation failure can throw here.
    return absl::ResourceExhaustedError(
        absl::StrCat(Av(source), ": cannot read the trace: ", e.what()));
  }
}

absl::StatusOr<Trace> ReadTrace(std::istream& in, std::string_view source,
                                TraceFormat format, bool strict) {
  std::string text;
  try {
    // Reading through the stream buffer neither sets the stream's state bits
    // nor throws because of its exception mask.
    std::streambuf* const buffer = in.rdbuf();
    if (buffer == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(Av(source), ": no stream to read"));
    }
    char chunk[1 << 16];
    std::streamsize n = 0;
    while ((n = buffer->sgetn(chunk, sizeof(chunk))) > 0) {
      text.append(chunk, static_cast<size_t>(n));
    }
  } catch (const std::exception& e) {
    return absl::DataLossError(
        absl::StrCat(Av(source), ": read error: ", e.what()));
  }
  return ParseTrace(text, source, format, strict);
}

absl::StatusOr<Trace> ReadTraceFile(const std::string& path, TraceFormat format,
                                    bool strict) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int err = errno;
    const std::string message =
        absl::StrCat(path, ": cannot open: ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(message)
                         : absl::InvalidArgumentError(message);
  }
  std::string text;
  bool failed = false;
  int err = 0;
  try {
    if (std::fseek(file, 0, SEEK_END) == 0) {
      const long size = std::ftell(file);
      if (size > 0) text.reserve(static_cast<size_t>(size));
      std::rewind(file);
    }
    char buffer[1 << 16];
    size_t n = 0;
    while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) {
      text.append(buffer, n);
    }
    if (std::ferror(file)) {
      failed = true;
      err = errno;
    }
  } catch (const std::exception& e) {
    std::fclose(file);
    return absl::ResourceExhaustedError(
        absl::StrCat(path, ": cannot read: ", e.what()));
  }
  std::fclose(file);
  if (failed) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot read: ", std::strerror(err)));
  }
  return ParseTrace(text, path, format, strict);
}

}  // namespace loom
