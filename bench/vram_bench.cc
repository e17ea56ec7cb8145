#include "bench/vram_bench.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "tiers/gpu_tier.h"

#if defined(MOONCAKE_HAVE_GPU) && MOONCAKE_HAVE_GPU
// On NVIDIA this resolves to the patched copy of HIP's NVIDIA header that
// cmake/HipNvidia.cmake puts first on the include path of mooncake_hip users.
#include <hip/hip_runtime_api.h>
#define MOONCAKE_VRAM_BENCH_HIP 1
#else
#define MOONCAKE_VRAM_BENCH_HIP 0
#endif

namespace mooncake::bench {
namespace {

constexpr int kMaxIterations = 100'000;
// Bounds the run: every size is moved (2 + iterations) x 8 times.
constexpr uint64_t kMaxSize = 16ull << 30;

int Unavailable(const std::string& why) {
  std::fprintf(stderr, "vram: unavailable (%s)\n", why.c_str());
  return 1;
}

// Checked before any device is touched, so a usage mistake reads the same on
// machines with and without a GPU.
bool ValidOptions(const VramBenchOptions& options) {
  if (options.sizes.empty()) {
    std::fprintf(stderr, "error: usage: vram: no transfer size given\n");
    return false;
  }
  for (uint64_t size : options.sizes) {
    if (size == 0 || size > kMaxSize) {
      std::fprintf(stderr, "error: usage: vram: transfer size %llu outside [1, %llu] bytes\n",
                   static_cast<unsigned long long>(size),
                   static_cast<unsigned long long>(kMaxSize));
      return false;
    }
  }
  if (options.iterations < 1 || options.iterations > kMaxIterations) {
    std::fprintf(stderr, "error: usage: vram: iterations %d outside [1, %d]\n", options.iterations,
                 kMaxIterations);
    return false;
  }
  if (options.device_index < 0) {
    std::fprintf(stderr, "error: usage: vram: device index %d is negative\n", options.device_index);
    return false;
  }
  return true;
}

#if MOONCAKE_VRAM_BENCH_HIP

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// Untimed transfers before each timed series: the first pays for lazy
// context, mapping and cache set-up that no steady-state transfer sees.
constexpr int kWarmups = 2;

#if defined(__HIP_PLATFORM_NVIDIA__) || defined(__HIP_PLATFORM_NVCC__)
constexpr std::string_view kPlatform = "nvidia";
#elif defined(__HIP_PLATFORM_AMD__) || defined(__HIP_PLATFORM_HCC__)
constexpr std::string_view kPlatform = "amd";
#else
constexpr std::string_view kPlatform = "unknown";
#endif

// Prints why a step failed, once, where it happens; callers pass the code up.
std::unexpected<ErrorCode> Fail(ErrorCode code, const std::string& what) {
  std::fprintf(stderr, "vram: error: %s\n", what.c_str());
  return Err(code);
}

// Reads and clears the runtime's last error, so no later, unrelated call
// reports it again. HIP 5.2's NVIDIA layer turns CUDA errors it does not know
// (803 driver/runtime mismatch, 46 devices unavailable, 34 stub libcuda...)
// into hipErrorUnknown; the CUDA runtime still holds the real one, so name it.
std::string TakeRawCause(hipError_t error) {
#if defined(__HIP_PLATFORM_NVIDIA__) || defined(__HIP_PLATFORM_NVCC__)
  cudaError_t raw = cudaGetLastError();
  if (error != hipErrorUnknown || raw == cudaSuccess) return "";
  return fmt::format(" [CUDA {} ({}): {}]", cudaGetErrorName(raw), static_cast<int>(raw),
                     cudaGetErrorString(raw));
#else
  (void)error;
  (void)hipGetLastError();
  return "";
#endif
}

std::unexpected<ErrorCode> HipFail(std::string_view call, hipError_t error) {
  std::string raw = TakeRawCause(error);
  return Fail(ErrorCode::kTransferFail,
              fmt::format("{} failed: {} ({}): {}{}", call, hipGetErrorName(error),
                          static_cast<int>(error), hipGetErrorString(error), raw));
}

// `call` is a literal: no formatting on the timed path unless it fails.
Result<void> HipCheck(const char* call, hipError_t error) {
  if (error != hipSuccess) return HipFail(call, error);
  return {};
}

struct HipFreeDevice {
  void operator()(std::byte* p) const { (void)hipFree(p); }
};
struct HipFreeHost {
  void operator()(std::byte* p) const { (void)hipHostFree(p); }
};
using DeviceBytes = std::unique_ptr<std::byte, HipFreeDevice>;
using PinnedBytes = std::unique_ptr<std::byte, HipFreeHost>;

struct DeviceInfo {
  int index = 0;
  std::string name;
  uint64_t total_bytes = 0;
  std::string pci_bus;
  int runtime_version = 0;  // 0 when the runtime would not say
  int driver_version = 0;
};

Result<DeviceInfo> Describe(int index) {
  if (hipError_t e = hipSetDevice(index); e != hipSuccess) return HipFail("hipSetDevice", e);
  hipDeviceProp_t prop{};
  if (hipError_t e = hipGetDeviceProperties(&prop, index); e != hipSuccess) {
    return HipFail("hipGetDeviceProperties", e);
  }
  // HIP's NVIDIA path copies the name with strncpy, which may leave it open.
  prop.name[sizeof(prop.name) - 1] = '\0';
  DeviceInfo info{.index = index,
                  .name = prop.name,
                  .total_bytes = static_cast<uint64_t>(prop.totalGlobalMem),
                  .pci_bus = fmt::format("{:04x}:{:02x}:{:02x}.0", prop.pciDomainID, prop.pciBusID,
                                         prop.pciDeviceID)};
  // Versions only decorate the header line: a failure leaves them 0.
  if (hipRuntimeGetVersion(&info.runtime_version) != hipSuccess) info.runtime_version = 0;
  if (hipDriverGetVersion(&info.driver_version) != hipSuccess) info.driver_version = 0;
  (void)hipGetLastError();
  return info;
}

std::string VersionText(const DeviceInfo& device) {
  if (kPlatform == "nvidia") {
    // CUDA encodes 13.0 as 13000.
    auto cuda = [](int v) { return fmt::format("{}.{}", v / 1000, v % 1000 / 10); };
    return fmt::format("CUDA runtime {}, driver {}", cuda(device.runtime_version),
                       cuda(device.driver_version));
  }
  return fmt::format("HIP runtime {}, driver {}", device.runtime_version, device.driver_version);
}

// kTier: a pageable buffer through the tier's staging buffer; kTierRegistered:
// host memory registered with the tier (as the DRAM arena under
// --dram-pin-for-vram), moved by one DMA.
enum class Path { kTier, kTierRegistered, kPageable, kPinned };
enum class Direction { kHostToDevice, kDeviceToHost };

std::string_view PathName(Path path) {
  switch (path) {
    case Path::kTier:
      return "tier";
    case Path::kTierRegistered:
      return "tier-registered";
    case Path::kPageable:
      return "pageable";
    case Path::kPinned:
      return "pinned";
  }
  return "?";
}

std::string_view DirectionName(Direction direction) {
  return direction == Direction::kHostToDevice ? "h2d" : "d2h";
}

std::string OpName(Path path, Direction direction) {
  const bool put = direction == Direction::kHostToDevice;
  if (path == Path::kTier) return put ? "tier put" : "tier get";
  if (path == Path::kTierRegistered) return put ? "tier put registered" : "tier get registered";
  return fmt::format("hipMemcpy {} {}", PathName(path), DirectionName(direction));
}

// Nearest rank, as Percentile() in bench_util.h, but over nanoseconds: a
// 64 KiB transfer takes a few microseconds, too coarse in whole microseconds.
double Quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

// One size through one path in one direction.
struct Row {
  size_t group = 0;  // index into VramBenchOptions::sizes (sizes may repeat)
  uint64_t bytes = 0;
  Path path = Path::kTier;
  Direction direction = Direction::kHostToDevice;
  std::vector<double> ns;  // one per timed transfer, sorted
  double vs_pageable = 0;  // this row's GB/s over the pageable hipMemcpy's
  double vs_pinned = 0;    // ... over the pinned hipMemcpy's

  double p50_ns() const { return Quantile(ns, 0.50); }
  double p99_ns() const { return Quantile(ns, 0.99); }
  // Bytes per nanosecond is GB/s with 1 GB = 1e9 bytes.
  double gb_per_s() const { return p50_ns() > 0 ? static_cast<double>(bytes) / p50_ns() : 0; }
};

Result<void> NoCheck() { return {}; }

// Runs `transfer` kWarmups + iterations times and times the last
// `iterations` (each call is synchronous); `check` runs untimed after every
// call. Stops at the first failure.
template <typename Transfer, typename Check>
Result<std::vector<double>> Time(int iterations, Transfer&& transfer, Check&& check) {
  std::vector<double> ns;
  ns.reserve(iterations);
  for (int i = 0; i < kWarmups + iterations; ++i) {
    auto start = Clock::now();
    Result<void> done = transfer();
    auto elapsed = Clock::now() - start;
    if (!done) return std::unexpected(done.error());
    if (Result<void> ok = check(); !ok) return std::unexpected(ok.error());
    if (i >= kWarmups) ns.push_back(std::chrono::duration<double, std::nano>(elapsed).count());
  }
  std::sort(ns.begin(), ns.end());
  return ns;
}

void FillRandom(std::span<std::byte> bytes) {
  std::mt19937_64 random(0x6d6f6f6e63616b65ull);
  for (size_t i = 0; i < bytes.size(); i += sizeof(uint64_t)) {
    uint64_t value = random();
    std::memcpy(bytes.data() + i, &value, std::min(sizeof(value), bytes.size() - i));
  }
}

// Host and device buffers of the largest size; each size uses a prefix.
struct Buffers {
  std::vector<std::byte> source;  // pageable, random: what every put and h2d sends
  std::vector<std::byte> sink;    // pageable: where every get and pageable d2h lands
  // Registered with the tier: a copy of `source`, then a sink.
  std::vector<std::byte> registered_source;
  std::vector<std::byte> registered_sink;
  PinnedBytes pinned;  // the pinned baseline's source and sink
  DeviceBytes device;  // the baselines' device side (not the tier's arena)
};

Result<Buffers> MakeBuffers(uint64_t largest) {
  Buffers b;
  // resize() zero-fills, so every page is resident before anything is timed.
  b.source.resize(largest);
  b.sink.resize(largest);
  FillRandom(b.source);
  b.registered_source = b.source;
  b.registered_sink.resize(largest);
  void* pinned = nullptr;
  if (hipError_t e = hipHostMalloc(&pinned, largest, hipHostMallocDefault); e != hipSuccess) {
    return HipFail(fmt::format("hipHostMalloc({} bytes)", largest), e);
  }
  b.pinned.reset(static_cast<std::byte*>(pinned));
  std::memcpy(b.pinned.get(), b.source.data(), largest);
  void* device = nullptr;
  if (hipError_t e = hipMalloc(&device, largest); e != hipSuccess) {
    return HipFail(fmt::format("hipMalloc({} bytes)", largest), e);
  }
  b.device.reset(static_cast<std::byte*>(device));
  return b;
}

// Room for the largest size twice, rounded to the tier's alignment, plus
// slack: one location is live at a time, so allocation cannot fail on space.
uint64_t TierCapacity(uint64_t largest) {
  constexpr uint64_t kAlign = GpuTier::kAlignment;
  return 2 * ((largest + kAlign - 1) / kAlign * kAlign) + (1ull << 20);
}

Result<void> TierCheck(std::string_view op, uint64_t size, const Result<void>& result) {
  if (result) return {};
  return Fail(result.error(), fmt::format("{} of {} bytes failed: {} (the tier logged why)", op,
                                          size, ToString(result.error())));
}

// A get must return exactly what the put wrote; the sink is then zeroed so
// the next get has to move every byte again to pass.
Result<void> VerifyAndClear(std::span<const std::byte> want, std::span<std::byte> got) {
  if (std::memcmp(want.data(), got.data(), want.size()) != 0) {
    auto [w, g] = std::mismatch(want.begin(), want.end(), got.begin());
    return Fail(ErrorCode::kInternalError,
                fmt::format("tier get of {} bytes returned other bytes than tier put wrote: first "
                            "difference at byte {} (got 0x{:02x}, want 0x{:02x})",
                            want.size(), w - want.begin(), static_cast<unsigned>(*g),
                            static_cast<unsigned>(*w)));
  }
  std::memset(got.data(), 0, got.size());
  return {};
}

Result<void> MeasureTier(GpuTier& tier, Buffers& b, Path path, size_t group, uint64_t size,
                         int iterations, std::vector<Row>& rows) {
  auto location = tier.Allocate(size);
  if (!location) return TierCheck("tier allocate", size, Err(location.error()));
  // Released on every path, so the next size finds the arena empty.
  struct Release {
    GpuTier& tier;
    TierLocation location;
    ~Release() { tier.Free(location); }
  } release{tier, *location};
  const bool registered = path == Path::kTierRegistered;
  std::span<const std::byte> source((registered ? b.registered_source : b.source).data(), size);
  std::span<std::byte> sink((registered ? b.registered_sink : b.sink).data(), size);

  auto put = Time(
      iterations, [&] { return TierCheck("tier put", size, tier.Write(*location, 0, source)); },
      NoCheck);
  if (!put) return std::unexpected(put.error());
  rows.push_back({.group = group,
                  .bytes = size,
                  .path = path,
                  .direction = Direction::kHostToDevice,
                  .ns = std::move(*put)});

  std::memset(sink.data(), 0, size);
  auto get = Time(
      iterations, [&] { return TierCheck("tier get", size, tier.Read(*location, 0, sink)); },
      [&] { return VerifyAndClear(source, sink); });
  if (!get) return std::unexpected(get.error());
  rows.push_back({.group = group,
                  .bytes = size,
                  .path = path,
                  .direction = Direction::kDeviceToHost,
                  .ns = std::move(*get)});
  return {};
}

Result<void> MeasureBaseline(Buffers& b, Path path, size_t group, uint64_t size, int iterations,
                             std::vector<Row>& rows) {
  const std::byte* host_source = path == Path::kPinned ? b.pinned.get() : b.source.data();
  std::byte* host_sink = path == Path::kPinned ? b.pinned.get() : b.sink.data();
  std::byte* device = b.device.get();
  auto h2d = Time(
      iterations,
      [&]() -> Result<void> {
        auto copied = HipCheck("hipMemcpy host to device",
                               hipMemcpy(device, host_source, size, hipMemcpyHostToDevice));
        if (!copied) return copied;
        // From pageable memory hipMemcpy may return once the bytes are
        // staged, before the DMA ends; the tier put waits for the end, so
        // the baseline must too.
        return HipCheck("hipStreamSynchronize(null stream)", hipStreamSynchronize(nullptr));
      },
      NoCheck);
  if (!h2d) return std::unexpected(h2d.error());
  rows.push_back({.group = group,
                  .bytes = size,
                  .path = path,
                  .direction = Direction::kHostToDevice,
                  .ns = std::move(*h2d)});

  auto d2h = Time(
      iterations,
      [&] {
        return HipCheck("hipMemcpy device to host",
                        hipMemcpy(host_sink, device, size, hipMemcpyDeviceToHost));
      },
      NoCheck);
  if (!d2h) return std::unexpected(d2h.error());
  rows.push_back({.group = group,
                  .bytes = size,
                  .path = path,
                  .direction = Direction::kDeviceToHost,
                  .ns = std::move(*d2h)});
  return {};
}

Result<std::vector<Row>> Measure(const VramBenchOptions& options) {
  const uint64_t largest = *std::max_element(options.sizes.begin(), options.sizes.end());
  std::string why;
  auto tier = GpuTier::Create("vram-bench", TierCapacity(largest), options.device_index, &why);
  if (!tier) return Fail(tier.error(), fmt::format("cannot open the vram tier: {}", why));
  auto buffers = MakeBuffers(largest);
  if (!buffers) return std::unexpected(buffers.error());
  // Unregistered by ~GpuTier, which runs first: `tier` is reset below on
  // every path, before `buffers` goes.
  struct ResetFirst {
    std::unique_ptr<GpuTier>& tier;
    ~ResetFirst() { tier.reset(); }
  } reset_first{*tier};
  for (std::vector<std::byte>* range : {&buffers->registered_source, &buffers->registered_sink}) {
    if (auto pinned = (*tier)->RegisterHostRange(*range, &why); !pinned) {
      return Fail(pinned.error(), fmt::format("cannot register host memory: {}", why));
    }
  }
  std::vector<Row> rows;
  for (size_t group = 0; group < options.sizes.size(); ++group) {
    const uint64_t size = options.sizes[group];
    for (Path path : {Path::kTier, Path::kTierRegistered}) {
      auto tier_rows = MeasureTier(**tier, *buffers, path, group, size, options.iterations, rows);
      if (!tier_rows) return std::unexpected(tier_rows.error());
    }
    for (Path path : {Path::kPageable, Path::kPinned}) {
      auto base = MeasureBaseline(*buffers, path, group, size, options.iterations, rows);
      if (!base) return std::unexpected(base.error());
    }
  }
  return rows;
}

// Sets every row's bandwidth relative to the pageable and pinned hipMemcpy
// of the same size and direction.
void Compare(std::vector<Row>& rows) {
  for (Row& row : rows) {
    for (const Row& base : rows) {
      if (base.group != row.group || base.direction != row.direction) continue;
      double ratio = base.gb_per_s() > 0 ? row.gb_per_s() / base.gb_per_s() : 0;
      if (base.path == Path::kPageable) row.vs_pageable = ratio;
      if (base.path == Path::kPinned) row.vs_pinned = ratio;
    }
  }
}

std::string SizeText(uint64_t bytes) {
  if (bytes % (1ull << 30) == 0) return fmt::format("{}GiB", bytes >> 30);
  if (bytes % (1ull << 20) == 0) return fmt::format("{}MiB", bytes >> 20);
  if (bytes % (1ull << 10) == 0) return fmt::format("{}KiB", bytes >> 10);
  return fmt::format("{}B", bytes);
}

uint64_t VerifiedGets(const VramBenchOptions& options) {
  // Both tier paths verify every get.
  return 2 * static_cast<uint64_t>(options.sizes.size()) * (kWarmups + options.iterations);
}

void PrintText(const VramBenchOptions& options, const DeviceInfo& device,
               const std::vector<Row>& rows) {
  std::string out = fmt::format(
      "vram bench: device {} \"{}\" ({} MiB, pci {}), platform {} ({}), {} timed + {} warm-up "
      "transfers per row, tier staging {} MiB pinned per lane ({} lanes; one transfer at a time "
      "here)\n",
      device.index, device.name, device.total_bytes >> 20, device.pci_bus, kPlatform,
      VersionText(device), options.iterations, kWarmups, GpuTier::kStagingBytes >> 20,
      GpuTier::kTransferLanes);
  out += fmt::format("{:<10} {:<24} {:>9} {:>11} {:>11} {:>11} {:>9}\n", "size", "op", "GB/s",
                     "p50_us", "p99_us", "vs_pageable", "vs_pinned");
  for (const Row& row : rows) {
    out += fmt::format("{:<10} {:<24} {:>9.2f} {:>11.1f} {:>11.1f} {:>11.2f} {:>9.2f}\n",
                       SizeText(row.bytes), OpName(row.path, row.direction), row.gb_per_s(),
                       row.p50_ns() / 1e3, row.p99_ns() / 1e3, row.vs_pageable, row.vs_pinned);
  }
  out += fmt::format("verified: {} tier gets returned the bytes the tier put wrote\n",
                     VerifiedGets(options));
  std::fputs(out.c_str(), stdout);
}

void PrintJson(const VramBenchOptions& options, const DeviceInfo& device,
               const std::vector<Row>& rows) {
  json results = json::array();
  for (const Row& row : rows) {
    results.push_back({{"size_bytes", row.bytes},
                       {"op", OpName(row.path, row.direction)},
                       {"path", PathName(row.path)},
                       {"direction", DirectionName(row.direction)},
                       {"gb_per_s", row.gb_per_s()},
                       {"p50_us", row.p50_ns() / 1e3},
                       {"p99_us", row.p99_ns() / 1e3},
                       {"vs_pageable", row.vs_pageable},
                       {"vs_pinned", row.vs_pinned},
                       {"samples", row.ns.size()}});
  }
  json out = {{"workload", "vram"},
              {"device",
               {{"index", device.index},
                {"name", device.name},
                {"total_bytes", device.total_bytes},
                {"pci_bus", device.pci_bus},
                {"platform", kPlatform},
                {"runtime_version", device.runtime_version},
                {"driver_version", device.driver_version}}},
              {"config",
               {{"sizes", options.sizes},
                {"iterations", options.iterations},
                {"warmups", kWarmups},
                {"tier_staging_bytes", GpuTier::kStagingBytes},
                {"tier_transfer_lanes", GpuTier::kTransferLanes},
                {"gb", "1e9 bytes"}}},
              {"results", results},
              {"verified_tier_gets", VerifiedGets(options)}};
  // replace: a device name is not guaranteed to be UTF-8, and dump must not throw.
  std::cout << out.dump(2, ' ', false, json::error_handler_t::replace) << std::endl;
}

int Run(const VramBenchOptions& options) {
  if (!ValidOptions(options)) return 2;
  // ProbeReason() says "built without HIP: ..." when the tier has no HIP.
  if (!GpuTier::BuiltWithHip()) return Unavailable(GpuTier::ProbeReason());
  auto count = GpuTier::DeviceCount();
  if (!count || *count <= 0) return Unavailable(GpuTier::ProbeReason());
  if (options.device_index >= *count) {
    return Unavailable(fmt::format("device index {} out of range: {}", options.device_index,
                                   GpuTier::ProbeReason()));
  }
  auto device = Describe(options.device_index);
  if (!device) return 3;
  auto rows = Measure(options);
  if (!rows) return 3;
  Compare(*rows);
  if (options.json) {
    PrintJson(options, *device, *rows);
  } else {
    PrintText(options, *device, *rows);
  }
  return 0;
}

#else  // !MOONCAKE_VRAM_BENCH_HIP

int Run(const VramBenchOptions& options) {
  if (!ValidOptions(options)) return 2;
  if (GpuTier::BuiltWithHip()) {
    // The tier has HIP but this file does not: a build-wiring mistake, named
    // as such rather than blamed on the machine.
    return Unavailable("mooncake-bench was compiled without MOONCAKE_HAVE_GPU; the tier reports: " +
                       GpuTier::ProbeReason());
  }
  return Unavailable(GpuTier::ProbeReason());
}

#endif  // MOONCAKE_VRAM_BENCH_HIP

}  // namespace

int RunVramBench(const VramBenchOptions& options) {
  try {
    return Run(options);
  } catch (const std::exception& e) {
    // bad_alloc for the host buffers, mostly.
    std::fprintf(stderr, "vram: error: %s\n", e.what());
    return 3;
  }
}

}  // namespace mooncake::bench
