#!/usr/bin/env bash
# Builds the Debian package of loom from the release build:
# OUT_DIR/loom_<version>_<arch>.deb (default out/), with dpkg-deb. The
# version is project(loom VERSION ...) of CMakeLists.txt, and the binary
# must say the same (`loom --version`); the dependencies are what
# dpkg-shlibdeps finds the binary links. What goes in: packaging/deb/ and
# docs/deploy.md, which says what each file is for.
# Usage: scripts/package.sh [LOOM_BINARY [OUT_DIR]]
#   LOOM_BINARY  default build/src/loom/cli/loom (./scripts/build.sh release loom)
# Prints the path of the .deb it wrote.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:-build/src/loom/cli/loom}"
out="${2:-out}"
die() { echo "package: $*" >&2; exit 1; }

[ -x "$bin" ] || die "no loom binary at $bin: build it with ./scripts/build.sh release loom"
for tool in dpkg-deb dpkg-shlibdeps strip; do
  command -v "$tool" > /dev/null || die "$tool is missing (Debian's dpkg-dev, binutils: ./scripts/setup.sh)"
done
version=$(sed -n 's/^project(loom VERSION \([0-9][0-9.]*\).*/\1/p' CMakeLists.txt)
[ -n "$version" ] || die "no project(loom VERSION ...) in CMakeLists.txt"
said=$("$bin" --version) || die "$bin --version failed"
[ "$said" = "loom $version" ] ||
  die "$bin says '$said' but CMakeLists.txt says $version: a stale binary, or main.cc's version string was not bumped"
arch=$(dpkg --print-architecture)

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="$stage/debian/loom"   # where dpkg-shlibdeps expects the package's files
src=packaging/deb
install -d -m 0755 "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" \
  "$root/etc/loom" "$root/usr/share/doc/loom"
# Debug info off, symbols kept (backtraces still name functions): a third of the size.
strip --strip-debug -o "$root/usr/bin/loom" "$bin"
chmod 0755 "$root/usr/bin/loom"
install -m 0644 "$src/loom-server.service" "$src/loom-agent.service" "$root/lib/systemd/system/"
install -m 0644 "$src/agent.toml" "$src/server.toml" "$root/etc/loom/"
install -m 0644 docs/deploy.md "$root/usr/share/doc/loom/deploy.md"
install -m 0644 "$src/conffiles" "$root/DEBIAN/conffiles"
install -m 0755 "$src/postinst" "$src/prerm" "$src/postrm" "$root/DEBIAN/"

printf 'Source: loom\n\nPackage: loom\nArchitecture: any\n' > "$stage/debian/control"
depends=$(cd "$stage" && dpkg-shlibdeps -O -e debian/loom/usr/bin/loom 2> "$stage/shlibdeps.err" |
  sed -n 's/^shlibs:Depends=//p') ||
  die "dpkg-shlibdeps failed: $(cat "$stage/shlibdeps.err")"
[ -n "$depends" ] || die "dpkg-shlibdeps found no dependencies: $(cat "$stage/shlibdeps.err")"
# The postinst makes the server's user with adduser.
depends="adduser, $depends"
rm -rf "$stage/debian/control"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@INSTALLED_SIZE@/$size/" \
  -e "s#@DEPENDS@#$depends#" "$src/control.in" > "$root/DEBIAN/control"
(cd "$root" && find . \( -path ./DEBIAN -o -path ./etc \) -prune -o -type f -printf '%P\0' |
  LC_ALL=C sort -z | xargs -0 md5sum > DEBIAN/md5sums)

mkdir -p "$out"
deb="$out/loom_${version}_${arch}.deb"
dpkg-deb --build --root-owner-group -Zxz "$root" "$deb" > /dev/null
echo "$deb"
