// loom_image_tool: drives the image library against a real registry for
// tests/image_registry_test.sh. Not a user command (that is `loom image`,
// later: docs/images.md).
//
//   loom_image_tool [--registry-auth FILE] resolve REF
//   loom_image_tool [--registry-auth FILE] pull --store DIR [--concurrency N]
//   REF
//
// REF's registry is spoken to over plain http (the test's registry is on
// loopback), with the credentials FILE (registry_auth.h) has for it. Errors
// print as "error: CODE: message" and exit 1.

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "loom/image/image_ref.h"
#include "loom/image/image_store.h"
#include "loom/image/registry_auth.h"
#include "loom/image/registry_client.h"
#include "loom/image/registry_source.h"
#include "loom/image/registry_token.h"

namespace {

using loom::image::ImageRef;

int Fail(const absl::Status& s) {
  std::printf("error: %s\n", s.ToString().c_str());
  return 1;
}

// From --registry-auth; empty without it.
loom::image::RegistryCredentials g_credentials;
loom::image::RegistryTokenCache g_tokens;

loom::image::RegistryOptions Options(const std::string& registry) {
  loom::image::RegistryOptions o;
  o.plain_http = true;
  o.connect_timeout = absl::Seconds(2);
  o.io_timeout = absl::Seconds(10);
  if (const auto* c = g_credentials.For(registry); c != nullptr) {
    o.credential = *c;
  }
  o.tokens = &g_tokens;
  return o;
}

int Pull(const ImageRef& ref, const std::string& store_dir, int concurrency) {
  // A reference with a digest is pulled without asking the registry first
  // (from the store alone, when it holds the image).
  absl::StatusOr<std::string> digest = ref.digest;
  if (ref.digest.empty()) {
    digest = loom::image::RegistryClient(ref.registry, Options(ref.registry))
                 .Resolve(ref);
  }
  if (!digest.ok()) return Fail(digest.status());
  std::printf("digest %s\n", digest->c_str());
  loom::image::RegistryImageSource source(Options);
  auto store = loom::image::ImageStore::Open({.root = store_dir}, &source);
  if (!store.ok()) return Fail(store.status());
  const ImageRef pinned = ref.WithDigest(*digest);
  std::vector<absl::StatusOr<loom::image::ImageHandle>> results(concurrency);
  std::vector<int64_t> last_done(concurrency, 0), total(concurrency, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < concurrency; ++i) {
    threads.emplace_back([&, i] {
      results[i] = (*store)->Ensure(pinned, [&, i](const auto& p) {
        last_done[i] = p.bytes_done;
        total[i] = p.bytes_total;
      });
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < concurrency; ++i) {
    if (!results[i].ok()) return Fail(results[i].status());
    if (results[i]->rootfs != results[0]->rootfs) {
      std::printf("error: caller %d got %s, caller 0 %s\n", i,
                  results[i]->rootfs.c_str(), results[0]->rootfs.c_str());
      return 1;
    }
  }
  std::printf("rootfs %s\n", results[0]->rootfs.c_str());
  std::printf("manifest %s\n", results[0]->manifest_digest.c_str());
  std::printf("progress %lld of %lld\n", static_cast<long long>(last_done[0]),
              static_cast<long long>(total[0]));
  for (const auto& info : (*store)->List()) {
    std::printf("image %s users %d bytes %lld layers %zu\n",
                info.digest.c_str(), info.users,
                static_cast<long long>(info.bytes), info.layers.size());
  }
  for (int i = 0; i < concurrency; ++i) (*store)->Release(*digest);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string store_dir;
  int concurrency = 1;
  std::vector<std::string> positional;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--store" && i + 1 < args.size()) {
      store_dir = args[++i];
    } else if (args[i] == "--registry-auth" && i + 1 < args.size()) {
      absl::StatusOr<loom::image::RegistryCredentials> c =
          loom::image::RegistryCredentials::Load(args[++i]);
      if (!c.ok()) return Fail(c.status());
      g_credentials = *std::move(c);
    } else if (args[i] == "--concurrency" && i + 1 < args.size()) {
      concurrency = std::max(1, std::atoi(args[++i].c_str()));
    } else {
      positional.push_back(args[i]);
    }
  }
  if (positional.size() != 2 ||
      (positional[0] != "resolve" && positional[0] != "pull") ||
      (positional[0] == "pull" && store_dir.empty())) {
    std::fprintf(stderr,
                 "usage: loom_image_tool [--registry-auth FILE] resolve REF\n"
                 "       loom_image_tool [--registry-auth FILE] pull --store "
                 "DIR [--concurrency N] REF\n");
    return 2;
  }
  absl::StatusOr<ImageRef> ref = loom::image::ParseImageRef(positional[1]);
  if (!ref.ok()) return Fail(ref.status());
  if (positional[0] == "resolve") {
    absl::StatusOr<std::string> digest =
        loom::image::RegistryClient(ref->registry, Options(ref->registry))
            .Resolve(*ref);
    if (!digest.ok()) return Fail(digest.status());
    std::printf("%s\n", digest->c_str());
    return 0;
  }
  return Pull(*ref, store_dir, concurrency);
}
