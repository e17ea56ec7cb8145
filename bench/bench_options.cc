#include "bench/bench_options.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>

#include "bench/bench_util.h"
#include "common/config_file.h"
#include "common/version.h"
#include "thrift/rpc_settings.h"
#include "thrift/rpc_transport.h"

namespace mooncake::bench {
namespace {

// The flags are registered in groups, in the order --help lists them.

// Which workload runs, and the knobs of the device modes.
void AddModeFlags(CLI::App& app, BenchOptions& o) {
  app.add_option("--workload", o.workload,
                 "mixed, zipf, prefetch, master, loop, scale, vram or transfer")
      ->capture_default_str()
      ->check(CLI::IsMember(
          {"mixed", "zipf", "prefetch", "master", "loop", "vram", "transfer", "scale"}));
  app.add_option("--sizes", o.device_sizes_text,
                 "vram/transfer: transfer sizes (default 64KiB,1MiB,64MiB)")
      ->delimiter(',');
  app.add_option("--iterations", o.iterations, "vram/transfer: timed transfers per size and path")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--gpu-device", o.gpu_device, "vram: HIP device index")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
}

// RDMA for the client's large gets and for the transfer mode.
void AddRdmaFlags(CLI::App& app, BenchOptions& o) {
  app.add_option("--rdma", o.rdma,
                 "Client reads of values over 4 MiB by RDMA READ: off, auto (where a device and "
                 "the owner allow, else TCP) or on (fail without a device)")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "auto", "on"}));
  app.add_option("--rdma-device", o.transfer.rdma_device,
                 "RDMA device for --rdma and the transfer workload (first if empty)");
  app.add_option("--rdma-port", o.transfer.rdma_port, "transfer: RDMA port")->capture_default_str();
  app.add_option("--rdma-gid-index", o.transfer.rdma_gid_index, "transfer: GID index (-1 auto)")
      ->capture_default_str();
}

// What shapes the read phases: skew, the client's caches, prefetching.
void AddReadPathFlags(CLI::App& app, BenchOptions& o) {
  app.add_option("--zipf-theta", o.zipf_theta, "Skew of the zipf workload (0 uniform .. <1)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.9999));
  app.add_option("--location-cache-bytes", o.location_cache_text,
                 "Memory for remembered key owners, e.g. 256MiB (0: ask the master on every "
                 "read)")
      ->capture_default_str();
  app.add_option("--rpc-poll-us", o.rpc_poll_us,
                 "Poll for a reply this long before sleeping, while a CPU is spare (0 off)")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxRpcPollUs));
  app.add_option("--combined-calls-in-flight", o.combined_calls_in_flight,
                 "Shared Put/Get calls of the client out at once (0: one per four CPUs "
                 "it may use)")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxCombinedCallsInFlight));
  app.add_option("--hot-cache-bytes", o.hot_cache_text,
                 "Client hot cache budget (0 off), e.g. 64MiB; objects > 1/8 of it bypass it")
      ->capture_default_str();
  app.add_option("--prefetch-wait-ms", o.prefetch_wait_ms,
                 "prefetch: other work (sleep) between BatchExist(prefetch) and the gets")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{60'000}));
  app.add_option("--prefetch-samples", o.prefetch_samples,
                 "prefetch: keys per latency group (DRAM, SSD, SSD prefetched)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{100'000}));
}

// Where the cluster is and who this client is.
void AddClusterFlags(CLI::App& app, BenchOptions& o) {
  app.add_option("--master", o.master, "Master HOST:PORT")->capture_default_str();
  app.add_option("--etcd", o.etcd,
                 "Master HA: etcd endpoints http://HOST:PORT[,...] (instead of --master)");
  app.add_option("--master-shards", o.master_shards,
                 "Sharded masters: FIRST-LAST=HOST:PORT[,...] or HOST:PORT,HOST:PORT (instead "
                 "of --master)");
  app.add_option("--cluster-name", o.cluster_name, "Master HA group name in etcd")
      ->capture_default_str();
  AddTlsOptions(app, o.tls);
  app.add_option("--node", o.node, "Local node id (put target)");
  app.add_option("--load-nodes", o.load_nodes,
                 "Load phase: put call i goes to node i mod N of these ids (spreads the keys "
                 "over workers, so batched gets span nodes); empty: the client chooses")
      ->delimiter(',');
  app.add_option("--worker", o.worker,
                 "loop workload: the worker's RPC HOST:PORT, called directly (no master)");
  app.add_option("--master-admin", o.master_admin,
                 "master workload: the master's admin HOST:PORT, to read its RSS from /metrics "
                 "(empty: no master_bytes_per_key)");
  app.add_option("--location-batch", o.location_batch,
                 "master workload: keys per BatchGetLocation call")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{65'536}));
  app.add_option("--master-nodes", o.master_nodes,
                 "master workload: fake nodes registered to own the keys")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
}

// The key set and the size of the run. Returns --duration-s, whose count
// tells an explicit duration from the default.
CLI::Option* AddLoadFlags(CLI::App& app, BenchOptions& o) {
  app.add_option("--value-size", o.value_size_text, "Value size: 4096, 4KB, 4KiB, 1MB (1024-based)")
      ->capture_default_str();
  app.add_option("--keys", o.keys, "Objects put in the load phase")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{100'000'000}));
  app.add_option("--batch", o.batch,
                 "Keys per call in the load and mixed phases: 1 = Put/Get, N > 1 = "
                 "BatchPut/BatchGet of N keys (ops/s then counts keys, latency is per call)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{65'536}));
  app.add_option("--concurrency", o.concurrency, "Threads sharing one client")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_flag("--async", o.async,
               "mixed: puts through Client::PutAsync, then gets only, through "
               "Client::GetAsync, --concurrency of them in flight (no thread per call); needs "
               "--get-ratio 1 and --batch 1");
  app.add_option("--get-ratio", o.get_ratio, "Fraction of gets in the mixed phase (0..1)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  auto* duration = app.add_option("--duration-s", o.duration_s, "Mixed phase length in seconds")
                       ->capture_default_str()
                       ->check(CLI::Range(0.1, 86400.0));
  app.add_option("--ops", o.ops, "Mixed phase operation count (0: until --duration-s)");
  app.add_option("--load-timeout-s", o.load_timeout_s, "Upper bound on the load phase")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 86400.0));
  app.add_option("--key-prefix", o.key_prefix, "Key prefix; a unique run id is appended")
      ->capture_default_str();
  return duration;
}

// --workload scale: sharded masters and simulated workers.
void AddScaleFlags(CLI::App& app, BenchOptions& o) {
  app.add_option("--shards", o.scale_shards,
                 "scale: master shard counts to run in turn, e.g. 1,2,4 (masters it starts)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--sim-workers", o.sim_workers,
                 "scale: simulated workers registered and heartbeating with every shard")
      ->capture_default_str()
      ->check(CLI::Range(1, 100'000));
  app.add_option("--heartbeat-ms", o.heartbeat_ms, "scale: heartbeat period of each worker")
      ->capture_default_str()
      ->check(CLI::Range(10, 60'000));
  app.add_option("--master-bin", o.master_bin,
                 "scale: the mooncake-master to start (default: next to mooncake-bench)");
  app.add_option("--shard-table", o.shard_table,
                 "scale: running masters as a slot table FIRST-LAST=HOST:PORT,... (instead of "
                 "starting --shards masters)");
  app.add_option("--shard-admins", o.shard_admins,
                 "scale: with --shard-table, each shard's admin HOST:PORT in shard order, for "
                 "RSS and CPU (empty: no bytes/key or CPU figures)");
}

// Output, cleanup, the config file and the examples under --help.
void AddOutputFlags(CLI::App& app, BenchOptions& o) {
  app.add_flag("--json", o.json, "Machine-readable output");
  app.add_flag("--cleanup", o.cleanup, "Remove the keys this run wrote when done");
  // The same keys as the long flags, without the dashes (`value-size = "1MiB"`);
  // flags on the command line win over the file, unknown keys are errors.
  app.set_config("--config", "", "Read these options from a TOML/INI file (same key names)")
      ->type_name("FILE");
  // Quoted values keep a '#' (common/config_file.h).
  UseConfigFileFormat(app);
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.footer(
      "Examples:\n  mooncake-bench --value-size 1MB --keys 2000 --concurrency 8 "
      "--get-ratio 0.9 --duration-s 30\n"
      "  mooncake-bench --workload zipf --keys 10000 --value-size 16KiB --duration-s 10 "
      "--hot-cache-bytes 64MiB\n"
      "  mooncake-bench --workload prefetch --node worker-1 --value-size 256KiB "
      "--prefetch-wait-ms 200\n"
      "  mooncake-bench --value-size 4KiB --keys 20000 --batch 16 --get-ratio 1\n"
      "  mooncake-bench --workload master --keys 100000 --master-admin 127.0.0.1:9100\n"
      "  mooncake-bench --workload loop --worker 127.0.0.1:50052 --keys 20000 --concurrency 16\n"
      "  mooncake-bench --workload scale --shards 1,2,4 --sim-workers 1000 --keys 10000000\n"
      "  mooncake-bench --workload vram --sizes 64KiB,1MiB,64MiB --iterations 50\n"
      "  mooncake-bench --workload transfer --sizes 64KiB,1MiB,64MiB");
}

// The size flags are text so that "4KiB" and "1MB" work; each becomes bytes
// here. Returns 2 after printing the usage error of the first bad one.
std::optional<int> ResolveSizes(BenchOptions& o) {
  auto size = ParseSize(o.value_size_text);
  if (!size) {
    std::fprintf(stderr, "error: usage: --value-size '%s' is not a size like 4KB or 1MiB\n",
                 o.value_size_text.c_str());
    return 2;
  }
  // Bounded: the bench builds a value of this size up front, so a typo
  // (1TiB) must be a usage error, not std::bad_alloc and an abort.
  if (*size > kMaxBenchValueBytes) {
    std::fprintf(stderr, "error: usage: --value-size '%s' is over the limit of 4GiB\n",
                 o.value_size_text.c_str());
    return 2;
  }
  o.value_size = *size;
  if (o.hot_cache_text != "0") {
    auto budget = ParseSize(o.hot_cache_text);
    if (!budget) {
      std::fprintf(stderr, "error: usage: --hot-cache-bytes '%s' is not a size like 64MiB\n",
                   o.hot_cache_text.c_str());
      return 2;
    }
    o.hot_cache_bytes = *budget;
  }
  if (o.location_cache_text != "0") {
    auto budget = ParseSize(o.location_cache_text);
    if (!budget) {
      std::fprintf(stderr, "error: usage: --location-cache-bytes '%s' is not a size like 256MiB\n",
                   o.location_cache_text.c_str());
      return 2;
    }
    o.location_cache_bytes = *budget;
  } else {
    o.location_cache_bytes = 0;
  }
  std::vector<uint64_t> sizes;
  for (const std::string& text : o.device_sizes_text) {
    auto parsed = ParseSize(text);
    if (!parsed) {
      std::fprintf(stderr, "error: usage: --sizes '%s' is not a size like 64KiB\n", text.c_str());
      return 2;
    }
    if (*parsed > kMaxBenchValueBytes) {
      std::fprintf(stderr, "error: usage: --sizes '%s' is over the limit of 4GiB\n", text.c_str());
      return 2;
    }
    sizes.push_back(*parsed);
  }
  if (!sizes.empty()) o.transfer.sizes = sizes;
  return std::nullopt;
}

}  // namespace

std::optional<int> ParseBenchFlags(int argc, char** argv, BenchOptions& o) {
  if (const char* env = std::getenv("MOONCAKE_MASTER"); env && *env) o.master = env;
  CLI::App app{
      "mooncake-bench: load keys, then a timed workload (mixed, zipf or prefetch); drive the "
      "master alone (master); or measure "
      "this machine's VRAM tier (vram) or RDMA vs TCP transfers (transfer)",
      "mooncake-bench"};
  AddModeFlags(app, o);
  AddRdmaFlags(app, o);
  AddReadPathFlags(app, o);
  AddClusterFlags(app, o);
  CLI::Option* duration = AddLoadFlags(app, o);
  AddScaleFlags(app, o);
  AddOutputFlags(app, o);
  app.set_version_flag("--version", VersionLine("mooncake-bench"),
                       "Print the version, git commit, build type and compiled-in GPU/RDMA "
                       "support, then exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);  // the version line on stdout, exit 0
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "error: usage: %s\n", NameConfigFile(app, e.what()).c_str());
    return 2;
  }
  o.duration_given = duration->count() > 0;
  if (o.async && (o.workload != "mixed" || o.get_ratio != 1.0 || o.batch != 1)) {
    std::fprintf(
        stderr,
        "error: usage: --async drives single puts and gets of the mixed workload: use it with "
        "--get-ratio 1 and --batch 1\n");
    return 2;
  }
  if (auto exit_code = ResolveSizes(o)) return exit_code;
  // The transfer mode reads its own struct; these flags are shared.
  o.transfer.iterations = o.iterations;
  o.transfer.json = o.json;
  return std::nullopt;
}

bool IsDeviceWorkload(const BenchOptions& o) {
  return o.workload == "vram" || o.workload == "transfer";
}

std::optional<ClientConfig> ToClientConfig(const BenchOptions& o) {
  size_t colon = o.master.rfind(':');
  if (colon == std::string::npos || colon == 0) return std::nullopt;
  ClientConfig config;
  config.master_host = o.master.substr(0, colon);
  config.master_port = std::atoi(o.master.c_str() + colon + 1);
  config.etcd_endpoints = o.etcd;
  config.cluster_name = o.cluster_name;
  config.master_shards = o.master_shards;
  config.local_node = o.node;
  config.local_hot_cache_bytes = o.hot_cache_bytes;
  config.location_cache_bytes = o.location_cache_bytes;
  config.rpc_poll_us = o.rpc_poll_us;
  config.combined_calls_in_flight = o.combined_calls_in_flight;
  config.rdma = o.rdma;
  config.rdma_device = o.transfer.rdma_device;
  config.tls = o.tls;
  return config;
}

VramBenchOptions ToVramOptions(const BenchOptions& o) {
  VramBenchOptions vram;
  // ResolveSizes parsed --sizes into o.transfer.sizes.
  if (!o.device_sizes_text.empty()) vram.sizes = o.transfer.sizes;
  vram.iterations = o.iterations;
  vram.device_index = o.gpu_device;
  vram.json = o.json;
  return vram;
}

std::optional<std::shared_ptr<const RpcTlsContext>> ToRpcTls(const BenchOptions& o) {
  std::string why;
  auto tls = RpcTlsContext::Create(o.tls, /*server=*/false, &why);
  if (!tls) {
    std::fprintf(stderr, "error: TLS files unusable: %s\n", why.c_str());
    return std::nullopt;
  }
  return *tls;
}

}  // namespace mooncake::bench
