#include "loom/server/server_command.h"

#include <fcntl.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/common/atomic_file.h"
#include "loom/common/config_file_option.h"
#include "loom/common/units.h"
#include "loom/core/cluster_spec.h"
#include "loom/core/job_spec.h"
#include "loom/server/auth.h"
#include "loom/server/controller.h"
#include "loom/server/dataset_lister.h"
#include "loom/server/http_server.h"
#include "loom/server/image_resolver.h"
#include "loom/server/server_secrets.h"
#include "loom/server/standby_reader.h"
#include "loom/store/etcd_leader_election.h"
#include "loom/store/etcd_state_store.h"
#include "loom/store/key_value_accounting_store.h"
#include "loom/store/sqlite_accounting_store.h"
#include "loom/store/sqlite_state_store.h"

namespace loom {
namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop = true; }

int Fail(const std::string& message) {
  std::cerr << "loom server: " << message << "\n";
  return 2;
}

std::string AdminTokenFile(const ServerFlags& f) {
  return f.admin_token_file.empty() ? f.data_dir + "/admin.token"
                                    : f.admin_token_file;
}

std::string SecretKeyFile(const ServerFlags& f) {
  return f.secret_key_file.empty() ? f.data_dir + "/secret.key"
                                   : f.secret_key_file;
}

// The cluster's secret key (server/server_secrets.h), saying in the log
// when it was made or moved out of the store.
absl::StatusOr<std::string> SecretKey(const ServerFlags& f, StateStore* store) {
  absl::StatusOr<SecretKeyLoad> key = LoadSecretKey(SecretKeyFile(f), store);
  if (!key.ok()) {
    return absl::Status(
        key.status().code(),
        absl::StrCat("--secret-key-file: ", key.status().message()));
  }
  if (!key->note.empty()) {
    std::cerr << "loom server: " << key->note << std::endl;
  }
  return key->key;
}

// Makes the first admin token when the cluster has none and writes it to
// `path` (0600), so that its secret is never printed or logged.
absl::Status BootstrapAdmin(TokenRegistry& auth, const std::string& path) {
  // The admin is the Unix user that runs the server (root on a real
  // cluster), as Slurm's SlurmUser is.
  std::string user = "admin";
  if (const passwd* pw = getpwuid(geteuid());
      pw != nullptr && IsValidUserName(pw->pw_name)) {
    user = pw->pw_name;
  }
  absl::StatusOr<std::optional<std::string>> token =
      auth.BootstrapAdmin(absl::Now(), user);
  if (!token.ok()) return token.status();
  if (!token->has_value()) return absl::OkStatus();
  if (absl::Status s = WriteSecretFile(path, **token + "\n"); !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--admin-token-file: ", s.message()));
  }
  std::cerr << "loom server: the first admin token is in " << path
            << " (export LOOM_TOKEN_FILE=" << path << ")" << std::endl;
  return absl::OkStatus();
}

// A leader that lost its leadership stops at once, the way Kubernetes'
// controller-manager and scheduler do: its writes are already refused
// (fenced), and a fresh start as a standby is simpler and safer than
// unwinding a controller in the middle of its work.
[[noreturn]] void LostLeadership(const absl::Status& why) {
  std::cerr << "loom server: lost leadership: " << why.message()
            << "; exiting (status 3)" << std::endl;
  std::_Exit(3);
}

// `loom server --store etcd`: a standby until it wins the election, then
// the leader (docs/ha.md).
int RunReplicated(const ServerFlags& f, Cluster cluster,
                  const ControllerOptions& copts, HttpServerOptions hopts) {
  absl::StatusOr<std::vector<std::string>> endpoints =
      ParseEtcdEndpoints(f.etcd_endpoints);
  if (!endpoints.ok()) {
    return Fail(
        absl::StrCat("--etcd-endpoints: ", endpoints.status().message()));
  }
  if (f.etcd_prefix.empty() || f.etcd_prefix[0] != '/' ||
      f.etcd_prefix.back() == '/') {
    return Fail("--etcd-prefix: expected /NAME (a leading /, no trailing /)");
  }
  if (!(f.leader_lease_s >= 2) || f.leader_lease_s > 60) {
    return Fail(
        "--leader-lease: must be 2 to 60 seconds (etcd's minimum "
        "lease is 2 s)");
  }
  if (f.leader_lease_s >= copts.fence_after / absl::Seconds(1)) {
    std::cerr << "loom server: warning: --leader-lease " << f.leader_lease_s
              << " s is not below the agents' fence time ("
              << copts.fence_after / absl::Seconds(1)
              << " s): agents may kill their tasks during a failover"
              << std::endl;
  }
  const std::string advertise =
      f.advertise.empty()
          ? (hopts.tls_cert.empty() ? "http://" : "https://") + f.listen
          : f.advertise;
  if (!absl::StartsWith(advertise, "http://") &&
      !absl::StartsWith(advertise, "https://")) {
    return Fail("--advertise: expected http://HOST:PORT");
  }
  EtcdStateStoreOptions sopts;
  sopts.client.endpoints = *endpoints;
  sopts.key_prefix = f.etcd_prefix + "/data";
  absl::StatusOr<std::unique_ptr<EtcdStateStore>> store =
      EtcdStateStore::Connect(sopts);
  if (!store.ok()) return Fail(std::string(store.status().message()));
  // The election has its own connection pool, so that a slow store call
  // never delays a lease renewal.
  absl::StatusOr<std::unique_ptr<EtcdClient>> election_client =
      EtcdClient::Create(sopts.client);
  if (!election_client.ok()) {
    return Fail(std::string(election_client.status().message()));
  }
  const std::string leader_key = f.etcd_prefix + "/leader";
  EtcdLeaderElection election(election_client->get(),
                              {.key = leader_key,
                               .value = advertise,
                               .lease_ttl = absl::Seconds(f.leader_lease_s)});
  hopts.leader_url = [&election] { return election.Leader(); };
  StandbyReader standby_reads(&cluster, store->get());
  hopts.standby_reads = &standby_reads;
  absl::StatusOr<std::string> secret = SecretKey(f, store->get());
  if (!secret.ok()) return Fail(std::string(secret.status().message()));
  TokenRegistry auth(store->get(), /*authoritative=*/false, *secret);
  // Job tokens: checked against the store until this server leads.
  auth.SetJobRunCheck([&standby_reads](int64_t job, int64_t run) {
    return standby_reads.CheckRun(job, run);
  });
  if (absl::Status st = auth.Load(absl::Now()); !st.ok()) {
    return Fail(absl::StrCat("loading tokens: ", st.message()));
  }
  hopts.auth = &auth;
  HttpServer server(nullptr, hopts);
  absl::StatusOr<int> bound = server.Start();
  if (!bound.ok()) return Fail(std::string(bound.status().message()));
  std::cerr << "loom server: standby on http://" << hopts.host << ":" << *bound
            << " (cluster " << cluster.name << ", " << cluster.nodes.size()
            << " nodes, etcd " << f.etcd_endpoints << ", key prefix "
            << f.etcd_prefix << "); campaigning for " << leader_key
            << std::endl;
  absl::StatusOr<int64_t> term = election.Campaign(g_stop);
  if (!term.ok()) {
    std::cerr << "loom server: stopping (standby)" << std::endl;
    server.Stop();
    return 0;
  }
  const absl::Time won = absl::Now();
  // Every write of this term is conditioned on the leader key still being
  // this term's: a deposed leader can write nothing.
  (*store)->SetFence(leader_key, *term, LostLeadership);
  election.KeepLeading(LostLeadership);
  if (absl::Status st = auth.BecomeAuthoritative(absl::Now()); !st.ok()) {
    std::cerr << "loom server: cannot load tokens as the new leader: "
              << st.message() << std::endl;
    election.Resign();
    server.Stop();
    return 1;
  }
  if (absl::Status st = BootstrapAdmin(auth, AdminTokenFile(f)); !st.ok()) {
    std::cerr << "loom server: " << st.message() << std::endl;
  }
  // A copy: the standby reader keeps reading `cluster` until `Lead`.
  // With etcd, finished jobs stay in etcd (under /accounting/), so that
  // whichever server leads sees the whole history (docs/accounting.md).
  KeyValueAccountingStore accounting(store->get());
  absl::StatusOr<std::unique_ptr<Controller>> controller = Controller::Create(
      cluster, store->get(), copts, absl::Now(), &accounting);
  if (!controller.ok()) {
    std::cerr << "loom server: cannot load the state as the new leader: "
              << controller.status().message() << std::endl;
    election.Resign();
    server.Stop();
    return 1;
  }
  auth.SetJobRunCheck([c = controller->get()](int64_t job, int64_t run) {
    return c->CheckRun(job, run);
  });
  for (const std::string& line : (*controller)->LoadLog()) {
    std::cerr << "loom server: " << line << std::endl;
  }
  server.Lead(controller->get());
  std::cerr << "loom server: leading (term " << *term << "), state loaded in "
            << absl::FormatDuration(absl::Now() - won) << std::endl;
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::cerr << "loom server: stopping; handing over leadership" << std::endl;
  server.Stop();
  election.Resign();
  return 0;
}

}  // namespace

CLI::App* AddServerCommand(CLI::App& app, ServerFlags* f) {
  CLI::App* cmd = app.add_subcommand(
      "server", "Run the controller: REST API, scheduler, state store");
  cmd->add_option("--listen", f->listen, "HOST:PORT to serve the API on")
      ->capture_default_str();
  cmd->add_option("--data-dir", f->data_dir,
                  "Directory for the state database (state.db)")
      ->required();
  cmd->add_option("--store", f->store,
                  "State store: sqlite (DATA_DIR/state.db, one server) or "
                  "etcd (several servers, one leads; docs/ha.md)")
      ->check(CLI::IsMember({"sqlite", "etcd"}))
      ->capture_default_str();
  cmd->add_option("--etcd-endpoints", f->etcd_endpoints,
                  "With --store etcd: etcd client URLs, comma-separated "
                  "(http://HOST:PORT,...)");
  cmd->add_option("--etcd-prefix", f->etcd_prefix,
                  "With --store etcd: key prefix of this loom cluster "
                  "(PREFIX/data/..., PREFIX/leader)")
      ->capture_default_str();
  cmd->add_option("--advertise", f->advertise,
                  "With --store etcd: this server's API URL as other servers "
                  "send clients to it (default http://LISTEN)");
  cmd->add_option("--admin-token-file", f->admin_token_file,
                  "Where the first admin token is written (mode 0600) when "
                  "the cluster has none (default DATA_DIR/admin.token)");
  cmd->add_option("--secret-key-file", f->secret_key_file,
                  "The cluster's secret key (mode 0600), from which agent "
                  "keys and job tokens derive; made at the first start, "
                  "the same file on every server of an etcd cluster "
                  "(default DATA_DIR/secret.key)");
  cmd->add_option("--tls-cert", f->tls_cert,
                  "Serve the API over HTTPS with this PEM certificate (chain); "
                  "with --tls-key");
  cmd->add_option("--tls-key", f->tls_key, "The PEM private key of --tls-cert");
  cmd->add_option("--leader-lease", f->leader_lease_s,
                  "With --store etcd: seconds a silent leader keeps its "
                  "leadership (etcd lease TTL, at least 2): the bound on "
                  "failover detection")
      ->capture_default_str();
  cmd->add_option("--cluster", f->cluster,
                  "Cluster spec: a preset (small, large) or a YAML file")
      ->capture_default_str();
  cmd->add_option("--policy", f->policy,
                  "Queue policy: fifo, backfill, las, fair")
      ->capture_default_str();
  cmd->add_option("--heartbeat-timeout", f->heartbeat_timeout_s,
                  "Seconds without a heartbeat before a node is down")
      ->capture_default_str();
  cmd->add_option("--heartbeat-interval", f->heartbeat_interval,
                  "How often agents heartbeat (told at registration), e.g. "
                  "1s or 500ms; below --suspect-after")
      ->capture_default_str();
  cmd->add_option("--suspect-after", f->suspect_after_s,
                  "Seconds without a heartbeat before a node is suspect "
                  "(no new work); below --heartbeat-timeout; default 3, or "
                  "half the timeout when that is less");
  cmd->add_option("--fence-after", f->fence_after_s,
                  "Seconds without an answered heartbeat before an agent "
                  "kills its tasks (fencing; 0: never); default 80% of "
                  "--heartbeat-timeout");
  cmd->add_option("--checkpoint-root", f->checkpoint_root,
                  "LOOM_CHECKPOINT_DIR of jobs whose spec names none: "
                  "ROOT/<job id>, on a filesystem all nodes share (default: "
                  "none; each agent gives the job a directory of its own)");
  cmd->add_option("--rclone-config", f->rclone_config,
                  "rclone config FILE naming the remotes that jobs' datasets "
                  "read from (docs/datasets.md); each agent gets its own "
                  "copy through `loom agent --rclone-config`. Default: "
                  "rclone's own");
  cmd->add_option("--insecure-registry", f->insecure_registries,
                  "HOST[:PORT] of a registry to resolve job images at over "
                  "plain http, not https (a loopback test registry; "
                  "repeatable). HOST alone: on any port");
  cmd->add_option("--registry-auth", f->registry_auth,
                  "Registry credentials to resolve job images with: a "
                  "Docker config.json ({\"auths\": {\"HOST:PORT\": "
                  "{\"auth\": BASE64(USER:PASSWORD)}}}), mode 0600; read "
                  "at start");
  cmd->add_option("--max-jobs-per-user", f->max_jobs_per_user,
                  "Unfinished jobs (held, pending, running) a user may have; "
                  "more submissions get 429 (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--job-retention", f->job_retention,
                  "How long a finished job stays in the live state (loom "
                  "queue, loom show, GET /v1/jobs) before it moves to the "
                  "accounting store (loom sacct), as Slurm's MinJobAge: "
                  "90s, 12h, 7d, ...; 0: never (docs/accounting.md)")
      ->capture_default_str();
  AddConfigFileOption(cmd);
  return cmd;
}

int RunServer(const ServerFlags& f) {
#if defined(__GLIBC__)
  // Large blocks (a listing's JSON, a load's records) from mmap, returned
  // to the system when freed: glibc's default raises this threshold after
  // the first large free, and from then on keeps such blocks in its
  // arenas, so that a server's size would follow its largest reply, not
  // its live state (docs/accounting.md, "Retention").
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);
  mallopt(M_TRIM_THRESHOLD, 4 * 1024 * 1024);
#endif
  const size_t colon = f.listen.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(f.listen.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return Fail("--listen: expected HOST:PORT, got '" + f.listen + "'");
  }
  // 0700, its files 0600: it holds the store (tokens, credentials) and the
  // secret key. A data dir others may read is refused, not repaired.
  if (absl::Status st = PrepareDataDir(f.data_dir); !st.ok()) {
    return Fail(absl::StrCat("--data-dir: ", st.message()));
  }
  for (const std::string& file : {AdminTokenFile(f), SecretKeyFile(f)}) {
    if (absl::Status st = CheckPrivateFile(file); !st.ok()) {
      return Fail(std::string(st.message()));
    }
  }
  absl::StatusOr<ClusterSpecText> spec = ReadClusterSpec(f.cluster);
  if (!spec.ok()) {
    return Fail(absl::StrCat("--cluster: ", spec.status().message()));
  }
  absl::StatusOr<Cluster> cluster = LoadCluster(f.cluster);
  if (!cluster.ok()) {
    return Fail(absl::StrCat("--cluster: ", cluster.status().message()));
  }
  ControllerOptions copts;
  copts.cluster_spec = *std::move(spec);
  copts.policy = f.policy;
  if (!(f.heartbeat_timeout_s > 0) || f.heartbeat_timeout_s > 3600) {
    return Fail(
        "--heartbeat-timeout: must be more than 0 and at most 3600 seconds");
  }
  copts.heartbeat_timeout = absl::Seconds(f.heartbeat_timeout_s);
  const double suspect = f.suspect_after_s < 0
                             ? std::min(3.0, 0.5 * f.heartbeat_timeout_s)
                             : f.suspect_after_s;
  if (!(suspect > 0) || suspect >= f.heartbeat_timeout_s) {
    return Fail(
        "--suspect-after: must be positive and below "
        "--heartbeat-timeout");
  }
  copts.suspect_after = absl::Seconds(suspect);
  absl::StatusOr<absl::Duration> interval = ParseDuration(f.heartbeat_interval);
  if (!interval.ok() || *interval < absl::Milliseconds(50) ||
      *interval >= copts.suspect_after) {
    return Fail(absl::StrCat(
        "--heartbeat-interval: expected a duration from 50ms to below "
        "--suspect-after (",
        suspect, "s), not '", f.heartbeat_interval, "'"));
  }
  copts.heartbeat_interval = *interval;
  const double fence =
      f.fence_after_s < 0 ? 0.8 * f.heartbeat_timeout_s : f.fence_after_s;
  if (fence >= f.heartbeat_timeout_s) {
    return Fail(
        "--fence-after: must be below --heartbeat-timeout (agents "
        "must stop their tasks before the server restarts them "
        "elsewhere)");
  }
  copts.fence_after = absl::Seconds(fence);
  copts.max_jobs_per_user = f.max_jobs_per_user;
  absl::StatusOr<absl::Duration> retention = ParseDuration(f.job_retention);
  if (!retention.ok() || *retention < absl::ZeroDuration()) {
    return Fail(absl::StrCat(
        "--job-retention: expected a duration (90s, 12h, 7d), not '",
        f.job_retention, "'"));
  }
  // 0 keeps finished jobs in the live state for good, as Slurm's
  // MinJobAge=0 does (docs/accounting.md).
  copts.job_retention = *retention == absl::ZeroDuration()
                            ? absl::InfiniteDuration()
                            : *retention;
  copts.checkpoint_root = f.checkpoint_root;  // "": the agents' default
  if (!f.rclone_config.empty() &&
      ::access(f.rclone_config.c_str(), R_OK) != 0) {
    return Fail(absl::StrCat("--rclone-config: cannot read ", f.rclone_config));
  }
  RcloneDatasetLister dataset_lister(f.rclone_config);
  copts.dataset_lister = &dataset_lister;
  HttpServerOptions hopts;
  hopts.host = f.listen.substr(0, colon);
  hopts.port = port;
  if (f.tls_cert.empty() != f.tls_key.empty()) {
    return Fail("--tls-cert and --tls-key go together");
  }
  hopts.tls_cert = f.tls_cert;
  hopts.tls_key = f.tls_key;
  for (const std::string& r : f.insecure_registries) {
    if (absl::Status st = CheckInsecureRegistry(r); !st.ok()) {
      return Fail(absl::StrCat("--insecure-registry: ", st.message()));
    }
  }
  // Thread-safe; outlives the server, which runs inside this function.
  RegistryImageResolverOptions ropts;
  ropts.insecure_registries = f.insecure_registries;
  ropts.log = [](const std::string& line) {
    std::cerr << "loom server: " << line << std::endl;
  };
  if (!f.registry_auth.empty()) {
    absl::StatusOr<image::RegistryCredentials> creds =
        image::RegistryCredentials::Load(f.registry_auth);
    if (!creds.ok()) {
      return Fail(absl::StrCat("--registry-auth: ", creds.status().message()));
    }
    // Names only: the file's secrets are never logged.
    std::cerr << "loom server: registry credentials for "
              << (creds->empty() ? "no registry (its auths is empty)"
                                 : absl::StrJoin(creds->Registries(), ", "))
              << " from " << f.registry_auth << std::endl;
    ropts.credentials = *std::move(creds);
  }
  RegistryImageResolver resolver(ropts);
  hopts.image_resolver = &resolver;
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  signal(SIGPIPE, SIG_IGN);
  if (f.store == "etcd") {
    return RunReplicated(f, *std::move(cluster), copts, hopts);
  }
  // SQLite gives -wal, -shm and -journal the database file's mode.
  if (absl::Status st = CreatePrivateFile(f.data_dir + "/state.db"); !st.ok()) {
    return Fail(absl::StrCat("--data-dir: ", st.message()));
  }
  absl::StatusOr<std::unique_ptr<SqliteStateStore>> store =
      SqliteStateStore::Open(f.data_dir + "/state.db");
  if (!store.ok()) return Fail(std::string(store.status().message()));
  // Finished jobs past their retention: a file of their own, indexed for
  // `loom sacct` (docs/accounting.md).
  const std::string accounting_path = f.data_dir + "/accounting.db";
  if (absl::Status st = CreatePrivateFile(accounting_path); !st.ok()) {
    return Fail(absl::StrCat("--data-dir: ", st.message()));
  }
  absl::StatusOr<std::unique_ptr<SqliteAccountingStore>> accounting =
      SqliteAccountingStore::Open(accounting_path);
  if (!accounting.ok()) {
    return Fail(std::string(accounting.status().message()));
  }
  absl::StatusOr<std::unique_ptr<Controller>> controller = Controller::Create(
      *std::move(cluster), store->get(), copts, absl::Now(), accounting->get());
  if (!controller.ok()) {
    return Fail(std::string(controller.status().message()));
  }
  for (const std::string& line : (*controller)->LoadLog()) {
    std::cerr << "loom server: " << line << std::endl;
  }
  absl::StatusOr<std::string> secret = SecretKey(f, store->get());
  if (!secret.ok()) return Fail(std::string(secret.status().message()));
  TokenRegistry auth(store->get(), /*authoritative=*/true, *secret);
  if (absl::Status st = auth.Load(absl::Now()); !st.ok()) {
    return Fail(absl::StrCat("loading tokens: ", st.message()));
  }
  auth.SetJobRunCheck([c = controller->get()](int64_t job, int64_t run) {
    return c->CheckRun(job, run);
  });
  if (absl::Status st = BootstrapAdmin(auth, AdminTokenFile(f)); !st.ok()) {
    return Fail(std::string(st.message()));
  }
  hopts.auth = &auth;
  HttpServer server(controller->get(), hopts);
  absl::StatusOr<int> bound = server.Start();
  if (!bound.ok()) return Fail(std::string(bound.status().message()));
  std::cerr << "loom server: listening on "
            << (hopts.tls_cert.empty() ? "http://" : "https://") << hopts.host
            << ":" << *bound << " (cluster " << (*controller)->cluster()->name
            << ", " << (*controller)->cluster()->nodes.size() << " nodes, data "
            << f.data_dir << ")" << std::endl;
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::cerr << "loom server: stopping" << std::endl;
  server.Stop();
  return 0;
}

}  // namespace loom
