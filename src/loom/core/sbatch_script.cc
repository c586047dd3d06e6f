// Parsing of `#SBATCH` directives and `sbatch` arguments; see sbatch_script.h.

#include "loom/core/sbatch_script.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom {
namespace sbatch_internal {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}
bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), IsDigit);
}

std::string Quote(std::string_view s) {
  return absl::StrCat("\"", std::string(s), "\"");
}

absl::Status Invalid(std::string message) {
  return absl::InvalidArgumentError(std::move(message));
}

// A decimal number of at most 18 digits.
bool ParseUint(std::string_view s, int64_t* value) {
  if (!AllDigits(s) || s.size() > 18) return false;
  int64_t v = 0;
  for (char c : s) v = v * 10 + (c - '0');
  *value = v;
  return true;
}

absl::StatusOr<int> ParsePositive(std::string_view s) {
  int64_t v = 0;
  if (!ParseUint(s, &v)) return Invalid(Quote(s) + " is not a number");
  if (v <= 0) return Invalid(Quote(s) + " must be positive");
  if (v > INT_MAX) return Invalid(Quote(s) + " is too large");
  return static_cast<int>(v);
}

// `[type:]N`.
absl::StatusOr<SbatchGpus> ParseGpus(std::string_view s) {
  SbatchGpus gpus;
  std::string_view count = s;
  const size_t colon = s.rfind(':');
  if (colon != std::string_view::npos) {
    gpus.type = std::string(s.substr(0, colon));
    count = s.substr(colon + 1);
    if (gpus.type.empty() || gpus.type.find(':') != std::string::npos) {
      return Invalid(Quote(s) + " is not [type:]count");
    }
  }
  absl::StatusOr<int> n = ParsePositive(count);
  if (!n.ok()) return n.status();
  gpus.count = *n;
  return gpus;
}

// `gpu[:type][:N]`, one entry only.
absl::StatusOr<SbatchGpus> ParseGres(std::string_view s) {
  if (s.find(',') != std::string_view::npos) {
    return Invalid(Quote(s) + ": only one gres (gpu) is supported");
  }
  if (s.substr(0, 3) != "gpu" || (s.size() > 3 && s[3] != ':')) {
    return Invalid(Quote(s) + ": only gpu[:type]:count is supported");
  }
  std::string_view rest = s.size() > 3 ? s.substr(4) : std::string_view();
  if (s.size() > 3 && rest.empty()) {
    return Invalid(Quote(s) + " is not gpu[:type]:count");
  }
  if (rest.empty()) return SbatchGpus{"", 1};  // --gres=gpu is one GPU
  const size_t colon = rest.find(':');
  if (colon == std::string_view::npos) {
    // gpu:N or gpu:type (one of that type).
    if (AllDigits(rest)) {
      absl::StatusOr<int> n = ParsePositive(rest);
      if (!n.ok()) return n.status();
      return SbatchGpus{"", *n};
    }
    return SbatchGpus{std::string(rest), 1};
  }
  absl::StatusOr<SbatchGpus> gpus = ParseGpus(rest);
  if (!gpus.ok()) return Invalid(Quote(s) + " is not gpu[:type]:count");
  return gpus;
}

absl::StatusOr<SbatchSignal> ParseSignal(std::string_view s) {
  static constexpr std::pair<std::string_view, int> kSignals[] = {
      {"HUP", 1},   {"INT", 2},   {"QUIT", 3},  {"ABRT", 6},  {"KILL", 9},
      {"USR1", 10}, {"USR2", 12}, {"ALRM", 14}, {"TERM", 15}, {"CONT", 18},
      {"STOP", 19}, {"TSTP", 20}, {"URG", 23},  {"XCPU", 24}, {"WINCH", 28}};
  SbatchSignal sig;
  std::string_view rest = s;
  if (rest.substr(0, 2) == "B:") {
    sig.batch_shell_only = true;
    rest.remove_prefix(2);
  }
  std::string_view name = rest;
  const size_t at = rest.find('@');
  if (at != std::string_view::npos) {
    name = rest.substr(0, at);
    int64_t seconds = 0;
    if (!ParseUint(rest.substr(at + 1), &seconds) || seconds > 65535) {
      return Invalid(Quote(s) +
                     ": the time after '@' is not a number of "
                     "seconds (0 to 65535)");
    }
    sig.seconds_before_end = static_cast<int>(seconds);
  }
  int64_t number = 0;
  if (ParseUint(name, &number)) {
    if (number < 1 || number > 64) {
      return Invalid(Quote(s) + ": signal numbers are 1 to 64");
    }
    sig.number = static_cast<int>(number);
    return sig;
  }
  std::string upper;
  for (char c : name) upper += (c >= 'a' && c <= 'z') ? c - 'a' + 'A' : c;
  std::string_view bare = upper;
  if (bare.substr(0, 3) == "SIG") bare.remove_prefix(3);
  for (const auto& [n, v] : kSignals) {
    if (n == bare) {
      sig.number = v;
      return sig;
    }
  }
  return Invalid(Quote(s) + " is not [B:]SIGNAL[@seconds] with a known signal");
}

bool IsEnvName(std::string_view s) {
  if (s.empty() || IsDigit(s[0])) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return IsDigit(c) || c == '_' || (c >= 'a' && c <= 'z') ||
           (c >= 'A' && c <= 'Z');
  });
}

absl::StatusOr<SbatchExport> ParseExport(std::string_view s) {
  SbatchExport e;
  size_t start = 0;
  while (true) {
    const size_t comma = s.find(',', start);
    std::string_view item = s.substr(
        start, comma == std::string_view::npos ? comma : comma - start);
    if (item == "ALL") {
      e.all = true;
    } else if (item == "NONE") {
      e.all = false;
    } else {
      const size_t eq = item.find('=');
      std::string_view name = item.substr(0, eq);
      if (!IsEnvName(name)) {
        return Invalid(Quote(s) + ": " + Quote(item) +
                       " is not ALL, NONE or NAME[=VALUE]");
      }
      std::optional<std::string> value;
      if (eq != std::string_view::npos)
        value = std::string(item.substr(eq + 1));
      e.variables.emplace_back(std::string(name), std::move(value));
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return e;
}

absl::StatusOr<bool> ParseYesNo(std::string_view s) {
  if (s == "yes") return true;
  if (s == "no") return false;
  return Invalid(Quote(s) + " is not yes or no");
}

absl::StatusOr<std::string> NonEmpty(std::string_view s) {
  if (s.empty()) return Invalid("the value is empty");
  return std::string(s);
}

// Stores a parsed value, or passes its error on.
template <typename T, typename U>
absl::Status Store(absl::StatusOr<U> parsed, std::optional<T>* field) {
  if (!parsed.ok()) return parsed.status();
  *field = *std::move(parsed);
  return absl::OkStatus();
}

absl::Status ParseNodes(std::string_view s, SbatchOptions* o) {
  const size_t dash = s.find('-');
  if (dash == std::string_view::npos) {
    o->nodes_max.reset();
    return Store(ParsePositive(s), &o->nodes);
  }
  absl::StatusOr<int> lo = ParsePositive(s.substr(0, dash));
  absl::StatusOr<int> hi = ParsePositive(s.substr(dash + 1));
  if (!lo.ok() || !hi.ok()) return Invalid(Quote(s) + " is not N or MIN-MAX");
  if (*lo > *hi) return Invalid(Quote(s) + ": MIN is above MAX");
  o->nodes = *lo;
  o->nodes_max = *hi;
  return absl::OkStatus();
}

// One supported option. `set` is given the value ("" for a flag).
struct OptionSpec {
  std::string_view name;
  char short_name;  // 0: none
  bool takes_value;
  absl::Status (*set)(std::string_view value, SbatchOptions* o);
};

constexpr OptionSpec kOptions[] = {
    {"job-name", 'J', true,
     [](std::string_view v, SbatchOptions* o) {
       return Store(NonEmpty(v), &o->job_name);
     }},
    {"nodes", 'N', true, ParseNodes},
    {"ntasks", 'n', true,
     [](std::string_view v, SbatchOptions* o) {
       return Store(ParsePositive(v), &o->ntasks);
     }},
    {"ntasks-per-node", 0, true,
     [](std::string_view v, SbatchOptions* o) {
       return Store(ParsePositive(v), &o->ntasks_per_node);
     }},
    {"gpus", 'G', true,
     [](std::string_view v, SbatchOptions* o) {
       return Store(ParseGpus(v), &o->gpus);
     }},
    {"gpus-per-node", 0, true,
     [](std::string_view v, SbatchOptions* o) {
       return Store(ParseGpus(v), &o->gpus_per_node);
     }},
    {"gpus-per-task", 0, true,
     [](std::string_view v, SbatchOptions* o) {
       return Store(ParseGpus(v), &o->gpus_per_task);
     }},
    {"gres", 0, true,
     [](std::string_view v, SbatchOptions* o) {
       return Store(ParseGres(v), &o->gpus_per_node);
     }},
    {"cpus-per-task", 'c', true,
     [](std::string_view v, SbatchOptions* o) {
       return Store(ParsePositive(v), &o->cpus_per_task);
     }},
    {"mem", 0, true,
     [](std::string_view v, SbatchOptions* o) {
       return Store(ParseSbatchMemory(v), &o->mem_bytes);
     }},
    {"time", 't', true,
     [](std::string_view v, SbatchOptions* o) {
       return Store(ParseSbatchTime(v), &o->time_limit_seconds);
     }},
    {"partition", 'p', true,
     [](std::string_view v, SbatchOptions* o) {
       return Store(NonEmpty(v), &o->partition);
     }},
    {"account", 'A', true,
     [](std::string_view v, SbatchOptions* o) {
       return Store(NonEmpty(v), &o->account);
     }},
    {"qos", 0, true,
     [](std::string_view v, SbatchOptions* o) {
       return Store(NonEmpty(v), &o->qos);
     }},
    {"array", 'a', true,
     [](std::string_view v, SbatchOptions* o) {
       return Store(NonEmpty(v), &o->array);
     }},
    {"dependency", 'd', true,
     [](std::string_view v, SbatchOptions* o) {
       return Store(NonEmpty(v), &o->dependency);
     }},
    {"output", 'o', true,
     [](std::string_view v, SbatchOptions* o) {
       return Store(NonEmpty(v), &o->output);
     }},
    {"error", 'e', true,
     [](std::string_view v, SbatchOptions* o) {
       return Store(NonEmpty(v), &o->error);
     }},
    {"requeue", 0, false,
     [](std::string_view, SbatchOptions* o) {
       o->requeue = true;
       return absl::OkStatus();
     }},
    {"no-requeue", 0, false,
     [](std::string_view, SbatchOptions* o) {
       o->requeue = false;
       return absl::OkStatus();
     }},
    {"signal", 0, true,
     [](std::string_view v, SbatchOptions* o) {
       return Store(ParseSignal(v), &o->signal);
     }},
    {"chdir", 'D', true,
     [](std::string_view v, SbatchOptions* o) {
       return Store(NonEmpty(v), &o->chdir);
     }},
    {"export", 0, true,
     [](std::string_view v, SbatchOptions* o) {
       return Store(ParseExport(v), &o->export_env);
     }},
    {"hold", 'H', false,
     [](std::string_view, SbatchOptions* o) {
       o->hold = true;
       return absl::OkStatus();
     }},
    {"exclusive", 0, false,
     [](std::string_view, SbatchOptions* o) {
       o->exclusive = true;
       return absl::OkStatus();
     }},
    {"constraint", 'C', true,
     [](std::string_view v, SbatchOptions* o) {
       return Store(NonEmpty(v), &o->constraint);
     }},
    {"kill-on-invalid-dep", 0, true,
     [](std::string_view v, SbatchOptions* o) {
       return Store(ParseYesNo(v), &o->kill_on_invalid_dep);
     }},
    {"parsable", 0, false,
     [](std::string_view, SbatchOptions* o) {
       o->parsable = true;
       return absl::OkStatus();
     }},
};

bool IsIgnored(std::string_view name) {
  return std::find(std::begin(kSbatchIgnoredOptions),
                   std::end(kSbatchIgnoredOptions),
                   name) != std::end(kSbatchIgnoredOptions);
}

// Parses options from `words[*i]` on. `where(k)` names word k in messages
// ("line 4", "argument 2"). Stops at the first word that is not an option
// (leaving `*i` on it) or after `--` (leaving `*i` after it), setting
// `*stopped_at_dashdash`.
template <typename Where>
absl::Status ParseWords(const std::vector<std::string>& words, size_t* i,
                        const Where& where, SbatchOptions* o,
                        std::vector<std::string>* warnings,
                        bool* stopped_at_dashdash) {
  *stopped_at_dashdash = false;
  while (*i < words.size()) {
    const size_t k = *i;
    const std::string& w = words[k];
    if (w == "--") {
      *stopped_at_dashdash = true;
      ++*i;
      return absl::OkStatus();
    }
    if (w.size() < 2 || w[0] != '-') return absl::OkStatus();
    const OptionSpec* spec = nullptr;
    std::string display;
    std::optional<std::string> inline_value;
    if (w[1] == '-') {
      const size_t eq = w.find('=');
      const std::string name =
          w.substr(2, eq == std::string::npos ? eq : eq - 2);
      if (eq != std::string::npos) inline_value = w.substr(eq + 1);
      display = "--" + name;
      if (IsIgnored(name)) {
        if (!inline_value.has_value() && k + 1 < words.size()) ++*i;
        ++*i;
        warnings->push_back(
            absl::StrCat(where(k), ": ", display, " is accepted and ignored"));
        continue;
      }
      for (const OptionSpec& s : kOptions) {
        if (s.name == name) spec = &s;
      }
    } else {
      display = w.substr(0, 2);
      if (w.size() > 2) inline_value = w.substr(2);
      for (const OptionSpec& s : kOptions) {
        if (s.short_name != 0 && s.short_name == w[1]) spec = &s;
      }
    }
    if (spec == nullptr) {
      return Invalid(absl::StrCat(where(k), ": unknown option ", Quote(w)));
    }
    if (w[1] != '-')
      display = absl::StrCat(display, "/--", std::string(spec->name));
    std::string value;
    if (!spec->takes_value) {
      if (inline_value.has_value()) {
        return Invalid(
            absl::StrCat(where(k), ": ", display, " takes no value"));
      }
    } else if (inline_value.has_value()) {
      value = *inline_value;
    } else if (k + 1 < words.size()) {
      value = words[k + 1];
      ++*i;
    } else {
      return Invalid(absl::StrCat(where(k), ": ", display, " needs a value"));
    }
    ++*i;
    absl::Status status = spec->set(value, o);
    if (!status.ok()) {
      return Invalid(
          absl::StrCat(where(k), ": ", display, ": ", status.message()));
    }
  }
  return absl::OkStatus();
}

// Splits a directive into words: quotes and backslashes as in a shell, and
// an unquoted '#' starting a word begins a comment.
absl::StatusOr<std::vector<std::string>> SplitWords(std::string_view s) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (IsSpace(c)) {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
      ++i;
      continue;
    }
    if (c == '#' && !in_word) break;
    in_word = true;
    if (c == '\'') {
      const size_t close = s.find('\'', i + 1);
      if (close == std::string_view::npos) return Invalid("unclosed quote '");
      word += s.substr(i + 1, close - i - 1);
      i = close + 1;
    } else if (c == '"') {
      ++i;
      while (i < s.size() && s[i] != '"') {
        if (s[i] == '\\' && i + 1 < s.size() &&
            (s[i + 1] == '"' || s[i + 1] == '\\')) {
          ++i;
        }
        word += s[i++];
      }
      if (i == s.size()) return Invalid("unclosed quote \"");
      ++i;
    } else if (c == '\\' && i + 1 < s.size()) {
      word += s[i + 1];
      i += 2;
    } else {
      word += c;
      ++i;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

}  // namespace sbatch_internal

absl::StatusOr<int64_t> ParseSbatchTime(std::string_view text) {
  using sbatch_internal::ParseUint;
  const auto bad = [&] {
    return sbatch_internal::Invalid(
        sbatch_internal::Quote(text) +
        " is not a time (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S or UNLIMITED)");
  };
  if (text == "UNLIMITED" || text == "INFINITE" || text == "unlimited" ||
      text == "infinite") {
    return 0;
  }
  int64_t days = 0;
  std::string_view rest = text;
  const size_t dash = text.find('-');
  const bool has_days = dash != std::string_view::npos;
  if (has_days) {
    if (!ParseUint(text.substr(0, dash), &days) || days > 365000) return bad();
    rest = text.substr(dash + 1);
  }
  std::vector<int64_t> parts;
  size_t start = 0;
  while (true) {
    const size_t colon = rest.find(':', start);
    int64_t v = 0;
    if (!ParseUint(
            rest.substr(
                start, colon == std::string_view::npos ? colon : colon - start),
            &v) ||
        v > 100'000'000) {
      return bad();
    }
    parts.push_back(v);
    if (colon == std::string_view::npos) break;
    start = colon + 1;
  }
  if (parts.size() > 3) return bad();
  int64_t seconds = 0;
  if (has_days) {
    // D-H, D-H:M, D-H:M:S.
    const int64_t h = parts[0];
    const int64_t m = parts.size() > 1 ? parts[1] : 0;
    const int64_t s = parts.size() > 2 ? parts[2] : 0;
    seconds = ((days * 24 + h) * 60 + m) * 60 + s;
  } else if (parts.size() == 1) {
    seconds = parts[0] * 60;  // M
  } else if (parts.size() == 2) {
    seconds = parts[0] * 60 + parts[1];  // M:S
  } else {
    seconds = (parts[0] * 60 + parts[1]) * 60 + parts[2];  // H:M:S
  }
  return seconds;
}

absl::StatusOr<int64_t> ParseSbatchMemory(std::string_view text) {
  std::string_view digits = text;
  int shift = 20;  // MB by default
  if (!text.empty() && !sbatch_internal::IsDigit(text.back())) {
    switch (text.back()) {
      case 'K':
      case 'k':
        shift = 10;
        break;
      case 'M':
      case 'm':
        shift = 20;
        break;
      case 'G':
      case 'g':
        shift = 30;
        break;
      case 'T':
      case 't':
        shift = 40;
        break;
      default:
        return sbatch_internal::Invalid(
            sbatch_internal::Quote(text) +
            " has an unknown unit (use K, M, G or T)");
    }
    digits.remove_suffix(1);
  }
  int64_t value = 0;
  if (!sbatch_internal::ParseUint(digits, &value)) {
    return sbatch_internal::Invalid(
        sbatch_internal::Quote(text) +
        " is not a memory size (a whole number with an optional K, M, G or "
        "T)");
  }
  if (value > (INT64_MAX >> shift)) {
    return sbatch_internal::Invalid(sbatch_internal::Quote(text) +
                                    " is too large");
  }
  return value << shift;
}

absl::StatusOr<SbatchScript> ParseSbatchScript(std::string_view text) {
  SbatchScript script;
  bool in_header = true;
  size_t start = 0;
  for (int line_number = 1; start <= text.size(); ++line_number) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const bool directive =
        line.substr(0, 7) == "#SBATCH" &&
        (line.size() == 7 || sbatch_internal::IsSpace(line[7]));
    const std::string where = absl::StrCat("line ", line_number);
    if (!in_header) {
      if (directive) {
        script.warnings.push_back(where +
                                  ": #SBATCH after the first command is "
                                  "ignored (as Slurm does)");
      }
      continue;
    }
    if (!directive) {
      std::string_view trimmed = line;
      while (!trimmed.empty() && sbatch_internal::IsSpace(trimmed.front())) {
        trimmed.remove_prefix(1);
      }
      if (!trimmed.empty() && trimmed.front() != '#') in_header = false;
      continue;
    }
    absl::StatusOr<std::vector<std::string>> words =
        sbatch_internal::SplitWords(line.substr(7));
    if (!words.ok()) {
      return sbatch_internal::Invalid(
          absl::StrCat(where, ": ", words.status().message()));
    }
    size_t i = 0;
    bool dashdash = false;
    absl::Status status = sbatch_internal::ParseWords(
        *words, &i, [&](size_t) { return where; }, &script.options,
        &script.warnings, &dashdash);
    if (!status.ok()) return status;
    if (dashdash || i < words->size()) {
      return sbatch_internal::Invalid(absl::StrCat(
          where, ": ", sbatch_internal::Quote(dashdash ? "--" : (*words)[i]),
          " is not an option"));
    }
  }
  return script;
}

absl::StatusOr<SbatchCommandLine> ParseSbatchArgs(
    const std::vector<std::string>& argv) {
  SbatchCommandLine result;
  size_t i = 0;
  bool dashdash = false;
  absl::Status status = sbatch_internal::ParseWords(
      argv, &i, [](size_t k) { return absl::StrCat("argument ", k + 1); },
      &result.options, &result.warnings, &dashdash);
  if (!status.ok()) return status;
  result.script_and_args.assign(argv.begin() + i, argv.end());
  return result;
}

SbatchOptions Merge(const SbatchOptions& directives,
                    const SbatchOptions& command_line) {
  SbatchOptions m = directives;
#define LOOM_SBATCH_MERGE(field) \
  if (command_line.field.has_value()) m.field = command_line.field
  LOOM_SBATCH_MERGE(job_name);
  LOOM_SBATCH_MERGE(ntasks);
  LOOM_SBATCH_MERGE(ntasks_per_node);
  LOOM_SBATCH_MERGE(gpus);
  LOOM_SBATCH_MERGE(gpus_per_node);
  LOOM_SBATCH_MERGE(gpus_per_task);
  LOOM_SBATCH_MERGE(cpus_per_task);
  LOOM_SBATCH_MERGE(mem_bytes);
  LOOM_SBATCH_MERGE(time_limit_seconds);
  LOOM_SBATCH_MERGE(partition);
  LOOM_SBATCH_MERGE(account);
  LOOM_SBATCH_MERGE(qos);
  LOOM_SBATCH_MERGE(array);
  LOOM_SBATCH_MERGE(dependency);
  LOOM_SBATCH_MERGE(output);
  LOOM_SBATCH_MERGE(error);
  LOOM_SBATCH_MERGE(requeue);
  LOOM_SBATCH_MERGE(signal);
  LOOM_SBATCH_MERGE(chdir);
  LOOM_SBATCH_MERGE(export_env);
  LOOM_SBATCH_MERGE(hold);
  LOOM_SBATCH_MERGE(exclusive);
  LOOM_SBATCH_MERGE(constraint);
  LOOM_SBATCH_MERGE(kill_on_invalid_dep);
  LOOM_SBATCH_MERGE(parsable);
#undef LOOM_SBATCH_MERGE
  // -N is one option: MIN and MAX come from the same place.
  if (command_line.nodes.has_value()) {
    m.nodes = command_line.nodes;
    m.nodes_max = command_line.nodes_max;
  }
  return m;
}

std::string ExpandOutputPattern(std::string_view pattern,
                                const OutputPatternValues& v) {
  if (pattern.find('\\') != std::string_view::npos) {
    std::string out;
    for (char c : pattern) {
      if (c != '\\') out += c;
    }
    return out;
  }
  std::string out;
  size_t i = 0;
  while (i < pattern.size()) {
    if (pattern[i] != '%') {
      out += pattern[i++];
      continue;
    }
    size_t j = i + 1;
    while (j < pattern.size() && sbatch_internal::IsDigit(pattern[j])) ++j;
    if (j == pattern.size()) {  // a trailing '%' or '%3'
      out += pattern.substr(i);
      break;
    }
    size_t width = 0;
    for (size_t k = i + 1; k < j && k < i + 3; ++k) {  // at most 2 digits
      width = width * 10 + static_cast<size_t>(pattern[k] - '0');
    }
    const auto number = [&](uint64_t n) {
      std::string s = std::to_string(n);
      if (s.size() < width) s.insert(0, width - s.size(), '0');
      out += s;
    };
    switch (pattern[j]) {
      case '%':
        out += '%';
        break;
      case 'j':
        number(v.job_id);
        break;
      case 'A':
        number(v.array_job_id.value_or(v.job_id));
        break;
      case 'a':
        number(v.array_task_id.value_or(4294967294u));
        break;
      case 'n':
        number(static_cast<uint64_t>(v.node_index));
        break;
      case 't':
        number(static_cast<uint64_t>(v.task_id));
        break;
      case 'x':
        out += v.job_name;
        break;
      case 'N':
        out += v.first_node;
        break;
      case 'u':
        out += v.user;
        break;
      default:
        out += pattern.substr(i, j - i + 1);
        break;
    }
    i = j + 1;
  }
  return out;
}

}  // namespace loom
