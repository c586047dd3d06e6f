#include "loom/core/srun_options.h"

#include <algorithm>
#include <climits>
#include <map>
#include <set>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/common/hostlist.h"

namespace loom {
namespace {

absl::Status SrunInvalid(std::string message) {
  return absl::InvalidArgumentError(std::move(message));
}

std::string SrunQuoted(std::string_view s) {
  return absl::StrCat("\"", absl::string_view(s.data(), s.size()), "\"");
}

absl::StatusOr<int> SrunPositiveInt(std::string_view s) {
  int64_t v = 0;
  if (s.empty() ||
      !std::all_of(s.begin(), s.end(),
                   [](char c) { return c >= '0' && c <= '9'; }) ||
      !absl::SimpleAtoi(absl::string_view(s.data(), s.size()), &v)) {
    return SrunInvalid(SrunQuoted(s) + " is not a number");
  }
  if (v <= 0) return SrunInvalid(SrunQuoted(s) + " must be positive");
  if (v > INT_MAX) return SrunInvalid(SrunQuoted(s) + " is too large");
  return static_cast<int>(v);
}

// -N MIN[-MAX]: srun in an allocation uses MIN.
absl::StatusOr<int> NodeCount(std::string_view s) {
  const size_t dash = s.find('-');
  if (dash == std::string_view::npos) return SrunPositiveInt(s);
  absl::StatusOr<int> lo = SrunPositiveInt(s.substr(0, dash));
  absl::StatusOr<int> hi = SrunPositiveInt(s.substr(dash + 1));
  if (!lo.ok() || !hi.ok() || *lo > *hi) {
    return SrunInvalid(SrunQuoted(s) + " is not a node count (N or MIN-MAX)");
  }
  return *lo;
}

enum class SrunArg { kNone, kRequired, kOptional };

struct SrunOption {
  const char* name;  // long name
  char short_name;   // 0: none
  SrunArg arg;
  bool ignored;
};

constexpr SrunOption kSrunOptions[] = {
    {"nodes", 'N', SrunArg::kRequired, false},
    {"ntasks", 'n', SrunArg::kRequired, false},
    {"ntasks-per-node", 0, SrunArg::kRequired, false},
    {"nodelist", 'w', SrunArg::kRequired, false},
    {"exclude", 'x', SrunArg::kRequired, false},
    {"label", 'l', SrunArg::kNone, false},
    {"job-name", 'J', SrunArg::kRequired, false},
    {"cpus-per-task", 'c', SrunArg::kRequired, false},
    {"unbuffered", 'u', SrunArg::kNone, true},
    {"kill-on-bad-exit", 'K', SrunArg::kOptional, true},
    {"mpi", 0, SrunArg::kRequired, true},
    {"cpu-bind", 0, SrunArg::kRequired, true},
    {"gpu-bind", 0, SrunArg::kRequired, true},
    {"distribution", 'm', SrunArg::kRequired, true},
    {"exclusive", 0, SrunArg::kNone, true},
    {"overlap", 0, SrunArg::kNone, true},
    {"export", 0, SrunArg::kRequired, true},
};

const SrunOption* FindSrunLong(std::string_view name) {
  for (const SrunOption& o : kSrunOptions) {
    if (name == o.name) return &o;
  }
  return nullptr;
}

const SrunOption* FindSrunShort(char c) {
  for (const SrunOption& o : kSrunOptions) {
    if (o.short_name == c) return &o;
  }
  return nullptr;
}

absl::Status Apply(const SrunOption& opt, std::string_view value,
                   SrunCommandLine* cl) {
  const std::string name = opt.name;
  auto fail = [&](const absl::Status& s) {
    return SrunInvalid(absl::StrCat("--", name, ": ", s.message()));
  };
  if (opt.ignored) {
    if (name == "export" && value != "ALL") {
      return SrunInvalid(absl::StrCat(
          "--export: only ALL is supported (a step gets the script's "
          "environment), not ",
          SrunQuoted(value)));
    }
    cl->warnings.push_back(
        absl::StrCat("--", name, " is ignored (docs/sbatch.md, \"srun\")"));
    return absl::OkStatus();
  }
  SrunOptions& o = cl->options;
  auto store_int = [&](absl::StatusOr<int> v, std::optional<int>* out) {
    if (!v.ok()) return fail(v.status());
    *out = *v;
    return absl::OkStatus();
  };
  if (name == "nodes") return store_int(NodeCount(value), &o.nodes);
  if (name == "ntasks") return store_int(SrunPositiveInt(value), &o.ntasks);
  if (name == "ntasks-per-node") {
    return store_int(SrunPositiveInt(value), &o.ntasks_per_node);
  }
  if (name == "cpus-per-task") {
    return store_int(SrunPositiveInt(value), &o.cpus_per_task);
  }
  if (name == "label") {
    o.label = true;
    return absl::OkStatus();
  }
  if (value.empty()) return fail(SrunInvalid("the value is empty"));
  if (name == "nodelist" || name == "exclude") {
    absl::StatusOr<std::vector<std::string>> names = ExpandHostlist(value);
    if (!names.ok()) return fail(names.status());
    (name == "nodelist" ? o.nodelist : o.exclude) = std::string(value);
    return absl::OkStatus();
  }
  o.job_name = std::string(value);  // job-name
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SrunCommandLine> ParseSrunArgs(
    const std::vector<std::string>& argv) {
  SrunCommandLine cl;
  size_t i = 0;
  for (; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.size() < 2 || a[0] != '-') break;  // the command
    if (a[1] == '-') {
      const size_t eq = a.find('=');
      const std::string_view name = std::string_view(a).substr(
          2, eq == std::string::npos ? std::string::npos : eq - 2);
      const SrunOption* opt = FindSrunLong(name);
      if (opt == nullptr) {
        return SrunInvalid(
            absl::StrCat("unknown option ", SrunQuoted(a.substr(0, eq))));
      }
      std::string value;
      if (eq != std::string::npos) {
        if (opt->arg == SrunArg::kNone) {
          return SrunInvalid(absl::StrCat("--", opt->name, " takes no value"));
        }
        value = a.substr(eq + 1);
      } else if (opt->arg == SrunArg::kRequired) {
        if (i + 1 >= argv.size()) {
          return SrunInvalid(absl::StrCat("--", opt->name, " needs a value"));
        }
        value = argv[++i];
      }
      if (absl::Status s = Apply(*opt, value, &cl); !s.ok()) return s;
      continue;
    }
    // Short options: flags may be grouped; one taking a value ends the group.
    for (size_t k = 1; k < a.size(); ++k) {
      const SrunOption* opt = FindSrunShort(a[k]);
      if (opt == nullptr) {
        return SrunInvalid(absl::StrCat(
            "unknown option ", SrunQuoted(absl::StrCat("-", a.substr(k, 1)))));
      }
      std::string value;
      if (opt->arg == SrunArg::kNone) {
        if (absl::Status s = Apply(*opt, value, &cl); !s.ok()) return s;
        continue;
      }
      if (k + 1 < a.size()) {
        value = a.substr(k + 1);
      } else if (opt->arg == SrunArg::kRequired) {
        if (i + 1 >= argv.size()) {
          return SrunInvalid(absl::StrCat("-", std::string(1, a[k]), "/--",
                                          opt->name, " needs a value"));
        }
        value = argv[++i];
      }
      if (absl::Status s = Apply(*opt, value, &cl); !s.ok()) return s;
      break;
    }
  }
  cl.options.command.assign(argv.begin() + static_cast<std::ptrdiff_t>(i),
                            argv.end());
  if (cl.options.command.empty()) return SrunInvalid("no command to run");
  return cl;
}

absl::StatusOr<StepPlan> PlanStep(const SrunOptions& o,
                                  const std::vector<AllocationNode>& alloc,
                                  int default_ntasks) {
  if (alloc.empty()) return SrunInvalid("the job has no nodes");
  // Nodelist order: by host as a hostlist sorts them, ties in job order.
  std::vector<std::string> hosts;
  for (const AllocationNode& n : alloc) hosts.push_back(n.host);
  std::map<std::string, size_t> rank;
  for (const std::string& h : SortHostlist(hosts)) rank.emplace(h, rank.size());
  std::vector<int> order(alloc.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return rank[alloc[static_cast<size_t>(a)].host] <
           rank[alloc[static_cast<size_t>(b)].host];
  });

  auto matching = [&](const std::string& list,
                      const char* flag) -> absl::StatusOr<std::set<int>> {
    absl::StatusOr<std::vector<std::string>> names = ExpandHostlist(list);
    if (!names.ok()) {
      return SrunInvalid(absl::StrCat(flag, ": ", names.status().message()));
    }
    std::set<int> found;
    for (const std::string& name : *names) {
      bool any = false;
      for (size_t i = 0; i < alloc.size(); ++i) {
        if (alloc[i].name == name || alloc[i].host == name) {
          found.insert(static_cast<int>(i));
          any = true;
        }
      }
      if (!any) {
        return SrunInvalid(absl::StrCat(flag, ": ", SrunQuoted(name),
                                        " is not one of the job's nodes"));
      }
    }
    return found;
  };
  std::set<int> excluded, wanted;
  if (o.exclude) {
    absl::StatusOr<std::set<int>> x = matching(*o.exclude, "-x/--exclude");
    if (!x.ok()) return x.status();
    excluded = *x;
  }
  if (o.nodelist) {
    absl::StatusOr<std::set<int>> w = matching(*o.nodelist, "-w/--nodelist");
    if (!w.ok()) return w.status();
    wanted = *w;
    for (int n : wanted) {
      if (excluded.contains(n)) {
        return SrunInvalid(absl::StrCat("node ",
                                        alloc[static_cast<size_t>(n)].name,
                                        " is both in -w and in -x"));
      }
    }
  }
  // Candidates: -w's first (in nodelist order), then the rest.
  std::vector<int> candidates;
  for (int n : order) {
    if (wanted.contains(n)) candidates.push_back(n);
  }
  for (int n : order) {
    if (!wanted.contains(n) && !excluded.contains(n)) candidates.push_back(n);
  }
  const int available = static_cast<int>(candidates.size());
  const int must = static_cast<int>(wanted.size());
  int nnodes = 0;
  if (o.nodes) {
    nnodes = *o.nodes;
  } else if (o.ntasks && o.ntasks_per_node) {
    nnodes = (*o.ntasks + *o.ntasks_per_node - 1) / *o.ntasks_per_node;
  } else if (o.ntasks) {
    nnodes = std::min(*o.ntasks, available);
  } else if (o.nodelist) {
    nnodes = must;
  } else {
    nnodes = available;
  }
  nnodes = std::max(nnodes, must);
  if (nnodes > available) {
    return SrunInvalid(absl::StrCat(
        "the step asks for ", nnodes, " nodes; the job has ", available,
        available == static_cast<int>(alloc.size()) ? "" : " that it may use"));
  }
  if (o.nodes && *o.nodes < must) {
    return SrunInvalid(absl::StrCat("-N ", *o.nodes, " is fewer than the ",
                                    must, " nodes -w names"));
  }
  int ntasks = 0;
  const bool shaped =
      o.nodes || o.ntasks || o.ntasks_per_node || o.nodelist || o.exclude;
  if (o.ntasks) {
    ntasks = *o.ntasks;
  } else if (o.ntasks_per_node) {
    ntasks = nnodes * *o.ntasks_per_node;
  } else if (!shaped && default_ntasks >= nnodes) {
    ntasks = default_ntasks;
  } else {
    ntasks = nnodes;
  }
  if (ntasks < nnodes) {
    return SrunInvalid(
        absl::StrCat(ntasks, " tasks cannot cover ", nnodes,
                     " nodes: every node of a step runs a task"));
  }
  if (o.ntasks_per_node &&
      static_cast<int64_t>(ntasks) >
          static_cast<int64_t>(nnodes) * *o.ntasks_per_node) {
    return SrunInvalid(absl::StrCat(ntasks, " tasks do not fit on ", nnodes,
                                    " nodes at ", *o.ntasks_per_node,
                                    " per node"));
  }
  StepPlan plan;
  plan.ntasks = ntasks;
  std::vector<int> counts;
  std::vector<std::string> step_hosts;
  int procid = 0;
  for (int i = 0; i < nnodes; ++i) {
    const int tasks = ntasks / nnodes + (i < ntasks % nnodes ? 1 : 0);
    const int node = candidates[static_cast<size_t>(i)];
    plan.nodes.push_back(StepNodePlan{node, tasks, procid});
    procid += tasks;
    counts.push_back(tasks);
    step_hosts.push_back(alloc[static_cast<size_t>(node)].host);
  }
  plan.nodelist = CompressHostlist(step_hosts);
  plan.tasks_per_node = FormatTasksPerNode(counts);
  return plan;
}

std::string FormatTasksPerNode(const std::vector<int>& counts) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < counts.size();) {
    size_t j = i;
    while (j < counts.size() && counts[j] == counts[i]) ++j;
    parts.push_back(j - i == 1 ? std::to_string(counts[i])
                               : absl::StrCat(counts[i], "(x", j - i, ")"));
    i = j;
  }
  return absl::StrJoin(parts, ",");
}

}  // namespace loom
