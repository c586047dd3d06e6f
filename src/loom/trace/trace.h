#pragma once

// Reading job traces for `loom sim`.
//
// A trace is a CSV file with one job per line. loom reads its own canonical
// CSV and the public GPU-cluster traces (Microsoft Philly, Microsoft ITP and
// the Alibaba openb pod list) exactly as they are published; the formats and
// how each maps onto `TraceJob` are documented in docs/trace-formats.md.
//
// The reader is a pure function of its input bytes: it keeps no state, so
// it may be called from several threads at once.

#include <cstdint>
#include <istream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace loom {

// The trace formats that loom reads. `kAuto` asks the reader to detect the
// format from the header line.
enum class TraceFormat { kAuto, kCanonical, kPhilly, kItp, kAlibaba };

// Parses a format name as written on the command line: `auto`, `canonical`
// (or `loom`), `philly`, `itp`, `alibaba` (or `openb`), in any letter case.
// Returns `InvalidArgument` naming the text and the accepted names otherwise.
absl::StatusOr<TraceFormat> ParseTraceFormat(std::string_view name);

// Returns the canonical lower-case name of `f` (`auto`, `canonical`,
// `philly`, `itp`, `alibaba`); `ParseTraceFormat` accepts every result.
std::string_view TraceFormatName(TraceFormat f);

// One job read from a trace.
struct TraceJob {
  // The trace's own job id, or the decimal line number (e.g. `17`) when the
  // trace has none (Philly) or leaves it empty.
  std::string id;
  // Submit time in seconds since the earliest submit in the trace, so the
  // first job is at 0.
  double submit_s = 0;
  // True run time in seconds at relative GPU speed 1.0; always > 0.
  double duration_s = 0;
  // Total GPUs of the job; always >= 1.
  int num_gpus = 1;
  // The GPU model the job asks for, in lower case; "" means any model.
  std::string gpu_model;
  // Several GPU models the job may use, in lower case, when the trace lists
  // more than one (Alibaba's `gpu_spec` `V100M16|V100M32`); `gpu_model` is
  // then "". Empty otherwise.
  std::vector<std::string> gpu_model_choices;
  // A job of one task on part of one GPU (Alibaba's sharing pods): its share
  // in thousandths of a GPU, 1 to 999; `num_gpus` is then 1. 0: the job
  // takes whole GPUs.
  int gpu_milli = 0;
  // CPU (thousandths of a core) and memory (MiB) of the whole job; 0 when
  // the trace does not say. Only the Alibaba pod list gives them.
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  // The project (team) the job belongs to; "" when the trace has none. For
  // Philly this is the `cluster` (virtual cluster) column.
  std::string project;
  // The submitting user; "" when the trace has none.
  std::string user;
  // The priority class name; "" means the cluster's default class.
  std::string priority;
  // Whether the job may be preempted; unset when the trace does not say.
  std::optional<bool> preemptible;
  // The job's time limit in seconds (> 0); unset when the trace has none.
  std::optional<double> time_limit_s;
  // The 1-based line of the job in the source file.
  int line = 0;
};

// A data line that could not be read and was skipped.
struct TraceIssue {
  // The 1-based line in the source file.
  int line = 0;
  // What is wrong, as `<column>: <reason>` (for example
  // `duration: must be > 0, got -5`), or only `<reason>` when the line as a
  // whole is wrong (for example `expected 5 fields, got 4`). It does not
  // repeat the line number: `FormatTraceIssue` adds it.
  std::string reason;
};

// Formats an issue as `line N: <reason>`, the text that `ReadTrace` returns
// as its error in strict mode (there prefixed with the source).
std::string FormatTraceIssue(const TraceIssue& issue);

// A whole trace as read from one source.
struct Trace {
  // The format the trace was read as; never `kAuto`.
  TraceFormat format = TraceFormat::kCanonical;
  // The jobs, sorted by `submit_s`; jobs with equal submit times keep their
  // order in the file (ascending `line`).
  std::vector<TraceJob> jobs;
  // The bad lines, in file order. Each was skipped.
  std::vector<TraceIssue> issues;
  // Lines skipped on purpose because they are not GPU jobs loom can replay
  // (not errors), such as CPU-only pods of the Alibaba trace.
  int skipped = 0;
  // A short explanation of `skipped`, such as
  // `1088 CPU-only pods (num_gpu 0); 804 never-scheduled pods (scheduled_time
  // empty)`; "" when `skipped` is 0.
  std::string skipped_reason;
};

// Reads a whole trace from `in`. `source` names the input in error messages
// (usually the file path). With `format` `kAuto` the format is detected from
// the header line; otherwise the header must carry that format's columns.
//
// A bad data line (wrong field count, a non-numeric or out-of-range number, a
// duration <= 0, `num_gpus` < 1 or > 100000, a bad timestamp, an unknown
// boolean, a line over 1 MiB...) is recorded in `Trace::issues` and skipped.
// With `strict` the first bad line instead makes the call return
// `InvalidArgument` with the text `<source>: line N: <reason>`. Blank lines
// are ignored; CRLF line ends, a UTF-8 byte order mark and RFC 4180 quoted
// fields (on one line) are accepted.
//
// Returns `InvalidArgument` naming `source` when the input is empty, when the
// header is not recognised or lacks a column the format needs, and, for the
// canonical format, when the header has an unknown or repeated column. Never
// throws and never crashes, whatever the bytes.
absl::StatusOr<Trace> ReadTrace(std::istream& in, std::string_view source,
                                TraceFormat format, bool strict);

// Reads the trace in the file at `path` as `ReadTrace` does, naming it by
// `path`. Returns `NotFound` when the file cannot be opened.
absl::StatusOr<Trace> ReadTraceFile(const std::string& path, TraceFormat format,
                                    bool strict);

// Reads a trace held in memory; `ReadTrace` and `ReadTraceFile` are thin
// wrappers that load the input in one go and call this.
absl::StatusOr<Trace> ParseTrace(std::string_view text, std::string_view source,
                                 TraceFormat format, bool strict);

}  // namespace loom
