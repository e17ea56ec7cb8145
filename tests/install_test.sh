#!/usr/bin/env bash
# ctest InstallTest: `cmake --install <build> --prefix <tmp>` puts the
# binaries, the client library (archives, headers, pkg-config file) and the
# example systemd units where README "Install" says, the installed binaries
# run, and a program using client/client.h compiles and links against the
# installed files alone.
#
#   tests/install_test.sh <build dir>
set -euo pipefail

BUILD_DIR=${1:?usage: install_test.sh <build dir>}
PREFIX=$(mktemp -d /tmp/mooncake-install-test.XXXXXX)
trap 'rm -rf "$PREFIX"' EXIT

fail() { printf 'install_test: FAIL: %s\n' "$*" >&2; exit 1; }

cmake --install "$BUILD_DIR" --prefix "$PREFIX" >"$PREFIX.log" 2>&1 ||
  { cat "$PREFIX.log" >&2; rm -f "$PREFIX.log"; fail "cmake --install failed"; }
rm -f "$PREFIX.log"

libdir=lib
[ -d "$PREFIX/lib64" ] && [ ! -d "$PREFIX/lib" ] && libdir=lib64

for bin in mooncake-master mooncake-worker mooncake-cli mooncake-bench; do
  [ -x "$PREFIX/bin/$bin" ] || fail "bin/$bin missing or not executable"
  # The installed copy loads its shared libraries (install RPATH) and runs.
  "$PREFIX/bin/$bin" --help >/dev/null 2>&1 || fail "bin/$bin --help failed"
done

for header in client/client.h common/status.h common/node.h thrift/rpc_tls.h; do
  [ -f "$PREFIX/include/mooncake/$header" ] || fail "include/mooncake/$header missing"
done

for lib in mooncake_client mooncake_rpc mooncake_rpc_settings mooncake_transport mooncake_common; do
  [ -f "$PREFIX/$libdir/lib$lib.a" ] || fail "$libdir/lib$lib.a missing"
done
pc="$PREFIX/$libdir/pkgconfig/mooncake-client.pc"
[ -f "$pc" ] || fail "$libdir/pkgconfig/mooncake-client.pc missing"

for unit in mooncake-master mooncake-worker; do
  f="$PREFIX/share/mooncake/systemd/$unit.service"
  [ -f "$f" ] || fail "share/mooncake/systemd/$unit.service missing"
  grep -q '@' "$f" && fail "$unit.service has an unsubstituted @VAR@"
  grep -q "^ExecStart=$PREFIX/bin/$unit " "$f" || fail "$unit.service: ExecStart not under $PREFIX/bin"
  for key in Restart=on-failure LimitNOFILE= User= After=network-online.target; do
    grep -q "^$key" "$f" || fail "$unit.service has no $key"
  done
done

# A consumer compiles and links with only the installed files (when a
# compiler and pkg-config are around; the checks above do not need them).
CXX_BIN=${CXX:-c++}
if command -v "$CXX_BIN" >/dev/null 2>&1 && command -v pkg-config >/dev/null 2>&1; then
  cat >"$PREFIX/consumer.cc" <<'CC'
#include "client/client.h"
int main() {
  mooncake::ClientConfig config;
  config.master_port = 1;  // nothing listens there; only linking matters
  config.connect_timeout_ms = 200;
  auto client = mooncake::Client::Create(config);
  return client || !client ? 0 : 1;
}
CC
  # shellcheck disable=SC2046  # pkg-config prints a list of words
  "$CXX_BIN" -std=c++23 -O0 -o "$PREFIX/consumer" "$PREFIX/consumer.cc" \
    $(PKG_CONFIG_PATH="$PREFIX/$libdir/pkgconfig" pkg-config --cflags --libs mooncake-client) ||
    fail "a program using client/client.h does not build against the installed library"
  "$PREFIX/consumer" || fail "the consumer program did not run as expected"
fi

echo "install_test: OK ($PREFIX)"
