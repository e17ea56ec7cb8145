// bench/compare_with_redis.sh gives every Redis row a known keyspace:
// redis-benchmark -r K leaves about e^-(requests/K) of its keys unwritten by
// its own SET phase, so without a fill the GETs of a row read an earlier
// row's smaller values (or nil). The script's fill_redis empties Redis and
// writes every key at the row's size; this runs that function, taken from
// the script itself, against a redis-server of its own on a free port.
// Skipped where redis-server is not installed.

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "tests/unused_port.h"

namespace mooncake::testing {
namespace {

namespace fs = std::filesystem;

// stdout of `command` run by /bin/sh.
std::string Output(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return out;
  std::array<char, 4096> buffer;
  size_t got;
  while ((got = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) out.append(buffer.data(), got);
  pclose(pipe);
  return out;
}

// Starts redis-server on `port` (data under `dir`), leaves Redis as an
// earlier, smaller row would (4 KiB values on part of the keys, and a key
// outside the row's range), runs the script's fill_redis for 160 keys of
// 64 KiB, and prints DBSIZE and then `COUNT LENGTH` for the STRLEN of every
// key the row reads. The server is stopped by its PID on every path.
constexpr const char* kCheck = R"SH(
set -u
port=$1 dir=$2 script=$3
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
  >"$dir/redis.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null' EXIT
for _ in $(seq 1 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
eval "$(sed -n '/^fill_redis() {/,/^}/p' "$script")"
REDIS_PORT=$port WORK=$dir RUN_LIMIT_S=60
redis-benchmark -p "$port" -n 100 -d 4096 -r 160 -t set -q >/dev/null 2>&1
redis-cli -p "$port" set key:000000009999 stale >/dev/null
fill_redis 160 65536 2>"$dir/fill.err"
redis-cli -p "$port" dbsize
for i in $(seq 0 159); do printf 'STRLEN key:%012d\n' "$i"; done | redis-cli -p "$port" |
  sort | uniq -c | awk '{print $1, $2}'
)SH";

TEST(BenchCompareRedisTest, EachRowReadsAFullKeyspaceOfItsOwnValueSize) {
  if (Output("for c in redis-server redis-cli redis-benchmark; do command -v $c; done | wc -l") !=
      "3\n") {
    GTEST_SKIP() << "redis-server, redis-cli or redis-benchmark is not installed";
  }
  const fs::path script = fs::path(__FILE__).parent_path() / "../../bench/compare_with_redis.sh";
  ASSERT_TRUE(fs::exists(script)) << script;
  const fs::path dir =
      fs::temp_directory_path() / ("bench_compare_redis_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path check = dir / "check.sh";
  FILE* out = fopen(check.c_str(), "w");
  ASSERT_NE(out, nullptr);
  fputs(kCheck, out);
  fclose(out);

  // Expect exactly the row's 160 keys, every one of 64 KiB.
  std::string got =
      Output("timeout 120 bash " + check.string() + " " + std::to_string(UnusedPort()) + " " +
             dir.string() + " " + script.string());
  EXPECT_EQ(got, "160\n160 65536\n");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mooncake::testing
