// The acceptance test of the hardened RPC layer (thrift/rpc_transport.h): a
// seeded, bounded flood of malformed Thrift frames at a master and a worker,
// and of malformed HTTP requests at both admin ports. Afterwards both
// processes are alive, their peak RSS stayed under a stated bound, a known
// object reads back byte-exact, the master's key count is unchanged, a put
// still works, and the servers counted what they rejected, by reason.
//
// Every frame or request is a pure function of (kSeed, target, index), so a
// failure replays exactly, whatever the thread interleaving. Every socket has
// 2 s timeouts and is half-closed once its bytes are sent, so a server that
// waits for the rest of a frame sees EOF at once instead of its read timeout;
// a server that neither answers nor closes within 2 s counts as "hung".
//
// Nothing sent can change state:
//  * A frame that names a mutating method carries arguments that never decode
//    into a valid call: fields of types no argument has (skipped, so every
//    argument keeps its default: key "", node id "", handle 0, all refused by
//    the handlers), sizes refused before dispatch, or a header refused before
//    the name is looked up.
//  * Bit flips, truncations and splices touch only valid calls of read-only
//    methods, and only after the method name.
//  * The admin servers run with a token; only garbage that is never a valid
//    eviction request carries it.

#include <gtest/gtest.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "client/client.h"
#include "tests/integration/test_cluster.h"
#include "tests/raw_rpc.h"
#include "tests/test_bytes.h"
#include "thrift/rpc_limits.h"

namespace mooncake::testing {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kSeed = 0x6d6f6f6e;  // "moon"
// Connections per RPC server; each carries at least one malformed frame.
constexpr int kRpcConnections = 10000;
constexpr int kHttpRequests = 2000;  // per admin port
// Client threads per target; two targets are flooded at once.
constexpr int kFloodThreads = 4;
// No flood takes work after this; the counts below it then fail the test.
constexpr auto kFloodBudget = std::chrono::seconds(40);
// Connections that declare a whole kRpcMaxFrameBytes frame and stall.
constexpr int kStalledFrames = 50;

constexpr uint64_t kKiB = 1ull << 10;
constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kWorkerDram = 32 * kMiB;
// Bounds on peak RSS (VmHWM). A quiet master uses ~10 MiB and a quiet worker
// its touched DRAM plus ~15 MiB; a flood adds its connection threads and the
// 16 MiB frames held at once, one per thread reading one, and the engines
// run more threads on more CPUs (on 16 CPUs the epoll worker peaked at
// 295 MB, past a fixed 288 MiB). A 2 GiB allocation (a frame or container
// sized by its header) breaks either bound four times over.
uint64_t FloodRssAllowance() {
  return std::clamp<uint64_t>(32 * std::thread::hardware_concurrency(), 256, 512) * kMiB;
}
// Growth allowed for kStalledFrames stalled 16 MiB frames: a buffer that
// followed declared sizes would need 50 * 16 MiB = 800 MiB.
constexpr uint64_t kStalledRssGrowthBound = 64 * kMiB;

// An admin server answers a complete request within this, and an incomplete
// one gets EOF after it (each costs one of its 4 threads this long).
constexpr auto kHttpAnswerWait = std::chrono::milliseconds(50);

constexpr char kToken[] = "fuzz-admin-token";
constexpr char kKnownKey[] = "fuzz/known";
constexpr uint64_t kKnownSize = 128 * kKiB;

// ---- sockets ----

// Sockets give up on a send or a read after this.
constexpr auto kSocketTimeout = std::chrono::seconds(2);

enum class Outcome { kClosed, kHung, kNoConnection };

// Sends `bytes`, waits up to `half_close_after` for the first reply bytes,
// half-closes, and reads until the server closes (a reset counts as closed).
// httplib writes no reply once it has seen the peer's FIN, hence the wait;
// nullopt never half-closes (for requests that ask the server to close).
// Appends what came back to `reply` when given.
Outcome Exchange(
    int port, std::string_view bytes, std::string* reply = nullptr,
    std::optional<std::chrono::milliseconds> half_close_after = std::chrono::milliseconds(0)) {
  RawConnection conn(port, kSocketTimeout);
  if (!conn.connected()) return Outcome::kNoConnection;
  // May fail: the server may close a connection as soon as a header is
  // refused.
  conn.Send(bytes);
  if (half_close_after) {
    if (half_close_after->count() > 0) conn.Readable(*half_close_after);
    conn.ShutdownWrite();
  }
  return conn.ReadUntilClosed(kSocketTimeout, reply) ? Outcome::kClosed : Outcome::kHung;
}

// ---- seeded randomness ----

// The generator of item `index` of `stream`: independent of thread order.
std::mt19937 RngFor(uint32_t stream, int index) {
  std::seed_seq seq{kSeed, stream, static_cast<uint32_t>(index)};
  return std::mt19937(seq);
}

// Uniform in [lo, hi].
uint64_t Uniform(std::mt19937& rng, uint64_t lo, uint64_t hi) {
  return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
}

template <typename T>
const T& Pick(std::mt19937& rng, const std::vector<T>& items) {
  return items[Uniform(rng, 0, items.size() - 1)];
}

std::string RandomBytes(std::mt19937& rng, size_t n) {
  std::string out(n, '\0');
  for (auto& c : out) c = static_cast<char>(rng());
  return out;
}

std::string RandomText(std::mt19937& rng, size_t n) {
  static constexpr std::string_view kChars = "abcdefghijklmnopqrstuvwxyz0123456789_-";
  std::string out(n, 'a');
  for (auto& c : out) c = kChars[Uniform(rng, 0, kChars.size() - 1)];
  return out;
}

// ---- RPC targets ----

struct RpcTarget {
  uint32_t stream;  // RngFor stream of this target's frames
  int port;
  std::vector<std::string> methods;          // every method of the service
  std::vector<std::string> read_only_calls;  // valid encoded calls, no frame header
};

RpcTarget MasterTarget(int port) {
  return {
      .stream = 1,
      .port = port,
      // The last three name the worker's methods: unknown here.
      .methods = {"RegisterNode", "Heartbeat", "GetLocation", "BatchGetLocation", "PutOwner",
                  "UpdateOwner", "RemoveOwner", "AnnounceKeys", "PickNode", "ListNodes", "Put",
                  "PutChunk", "BatchPut"},
      .read_only_calls = {Wire().Call("GetLocation").Field(kString, 1).Str(kKnownKey).Stop().str(),
                          Wire()
                              .Call("BatchGetLocation")
                              .Field(kList, 1)
                              .Strings({kKnownKey, "fuzz/missing", "x"})
                              .Stop()
                              .str(),
                          Wire()
                              .Call("PickNode")
                              .Field(kI64, 1)
                              .I64(4096)
                              .Field(kList, 2)
                              .Strings({"w9"})
                              .Stop()
                              .str(),
                          Wire().Call("ListNodes").Stop().str()},
  };
}

RpcTarget WorkerTarget(int port) {
  auto get = [](uint64_t offset, uint64_t length) {
    return Wire()
        .Call("Get")
        .Field(kString, 1)
        .Str(kKnownKey)
        .Field(kI64, 2)
        .I64(offset)
        .Field(kI64, 3)
        .I64(length)
        .Stop()
        .str();
  };
  auto key_list = [](std::string_view method) {
    return Wire().Call(method).Field(kList, 1).Strings({kKnownKey, "fuzz/missing"}).Stop().str();
  };
  return {
      .stream = 2,
      .port = port,
      // The last three name the master's methods: unknown here.
      .methods = {"Put",          "Upsert",      "PutStart",     "PutChunk",    "PutEnd",
                  "PutRevoke",    "Get",         "Exist",        "Remove",      "BatchPut",
                  "BatchUpsert",  "BatchGet",    "BatchExist",   "BatchRemove", "Inspect",
                  "Stats",        "AdoptStart",  "AdoptEnd",     "AdoptAbort",  "AdoptConfirm",
                  "OpenForWrite", "Commit",      "GetPlacement", "RdmaConnect", "RegisterNode",
                  "UpdateOwner",  "AnnounceKeys"},
      .read_only_calls = {get(0, 0), get(1000, 4096), get(kKnownSize - 1, 1 << 30),
                          Wire().Call("Exist").Field(kString, 1).Str(kKnownKey).Stop().str(),
                          key_list("BatchGet"), key_list("BatchExist"),
                          Wire().Call("Inspect").Field(kString, 1).Str(kKnownKey).Stop().str(),
                          Wire().Call("Stats").Stop().str()},
  };
}

// Fields 1..5 of types no argument of either service has (double, i16,
// byte, set, map): readers skip them, so every argument keeps its default.
std::string WrongTypedArgs(std::mt19937& rng) {
  Wire w;
  for (uint64_t i = 0, n = Uniform(rng, 0, 5); i < n; ++i) {
    auto id = static_cast<int16_t>(Uniform(rng, 1, 5));
    switch (Uniform(rng, 0, 4)) {
      case 0:
        w.Field(kDouble, id).I64(rng());
        break;
      case 1:
        w.Field(kI16, id).I16(static_cast<uint16_t>(rng()));
        break;
      case 2:
        w.Field(kByte, id).U8(static_cast<uint8_t>(rng()));
        break;
      case 3: {
        uint32_t count = Uniform(rng, 0, 4);
        w.Field(kSet, id).U8(kI32).I32(count);
        for (uint32_t j = 0; j < count; ++j) w.I32(rng());
        break;
      }
      default: {
        uint32_t count = Uniform(rng, 0, 3);
        w.Field(kMap, id).U8(kString).U8(kI64).I32(count);
        for (uint32_t j = 0; j < count; ++j) w.Str(RandomText(rng, Uniform(rng, 0, 12))).I64(rng());
      }
    }
  }
  return w.Stop().str();
}

// A call of any method of `t` whose arguments all stay at their defaults.
std::string DefaultedCall(std::mt19937& rng, const RpcTarget& t, uint32_t version = kCallHeader) {
  return Wire().Message(version, Pick(rng, t.methods), rng()).str() + WrongTypedArgs(rng);
}

// A size no frame can hold: 2^31-1, 0x7FFFFFF0, or beyond the 16 MiB limit.
uint32_t HugeCount(std::mt19937& rng) {
  switch (Uniform(rng, 0, 3)) {
    case 0:
      return 0x7FFFFFFF;
    case 1:
      return 0x7FFFFFF0;
    case 2:
      return kRpcMaxFrameBytes + 1;
    default:
      return static_cast<uint32_t>(Uniform(rng, kRpcMaxFrameBytes, 0x7FFFFFFF));
  }
}

// ---- malformed frames, by kind ----

enum class FrameKind : uint8_t {
  kRandomBytes,
  kAbsurdLength,
  kTruncated,
  kWrongFieldTypes,
  kHugeString,
  kHugeContainer,
  kDeepNesting,
  kUnknownFields,
  kBadVersion,
  kUnversioned,
  kWrongMessageType,
  kNegativeSize,
  kMutatedValid,
  kTinyFrame,
  kPipelined,
  kMaxFrame,  // a whole 16 MiB frame; rare, see FrameKindFor
  kCount,
};
constexpr std::array<const char*, static_cast<size_t>(FrameKind::kCount)> kFrameKindNames = {
    "random_bytes",  "absurd_length",  "truncated",      "wrong_field_types",
    "huge_string",   "huge_container", "deep_nesting",   "unknown_fields",
    "bad_version",   "unversioned",    "wrong_msg_type", "negative_size",
    "mutated_valid", "tiny_frame",     "pipelined",      "max_frame"};

FrameKind FrameKindFor(int index) {
  if (index % 2500 == 1) return FrameKind::kMaxFrame;  // 4 per server
  return static_cast<FrameKind>(index % static_cast<int>(FrameKind::kMaxFrame));
}

std::string AbsurdLength(std::mt19937& rng, const RpcTarget& t) {
  static const std::vector<uint32_t> kSizes = {0x80000000, 0xFFFFFFFF, 0xFFFFFFF0, 0x7FFFFFFF,
                                               kRpcMaxFrameBytes + 1};
  uint32_t declared = Uniform(rng, 0, 2) == 0 ? HugeCount(rng)
                      : Uniform(rng, 0, 1) == 0
                          ? static_cast<uint32_t>(-static_cast<int32_t>(Uniform(rng, 1, 1 << 30)))
                          : Pick(rng, kSizes);
  std::string body =
      Uniform(rng, 0, 1) == 0 ? DefaultedCall(rng, t) : RandomBytes(rng, Uniform(rng, 0, 64));
  return Frame(body, declared);
}

// Declares more than it sends, then the sender hangs up.
std::string Truncated(std::mt19937& rng, const RpcTarget& t) {
  std::string body = Uniform(rng, 0, 1) == 0 ? DefaultedCall(rng, t) : Pick(rng, t.read_only_calls);
  body.resize(Uniform(rng, 0, body.size()));
  uint32_t declared = Uniform(rng, 0, 3) == 0
                          ? kRpcMaxFrameBytes
                          : static_cast<uint32_t>(body.size() + Uniform(rng, 1, 100000));
  return Frame(body, declared);
}

std::string HugeString(std::mt19937& rng, const RpcTarget& t) {
  if (Uniform(rng, 0, 3) == 0) {  // the method name itself
    return Frame(Wire().I32(kCallHeader).I32(HugeCount(rng)).Raw("Get").str());
  }
  auto id =
      static_cast<int16_t>(Uniform(rng, 0, 3) == 0 ? Uniform(rng, 100, 30000) : Uniform(rng, 1, 3));
  return Frame(Wire()
                   .Call(Pick(rng, t.methods))
                   .Field(kString, id)
                   .I32(HugeCount(rng))
                   .Raw(RandomBytes(rng, Uniform(rng, 0, 16)))
                   .str());
}

std::string HugeContainer(std::mt19937& rng, const RpcTarget& t) {
  static const std::vector<uint8_t> kContainers = {kList, kSet, kMap};
  static const std::vector<uint8_t> kElems = {kStruct, kString, kI64, kList, kMap};
  uint8_t type = Pick(rng, kContainers);
  Wire w;
  w.Call(Pick(rng, t.methods)).Field(type, static_cast<int16_t>(Uniform(rng, 1, 4)));
  w.U8(Pick(rng, kElems));
  if (type == kMap) w.U8(Pick(rng, kElems));
  return Frame(w.I32(HugeCount(rng)).Raw(RandomBytes(rng, Uniform(rng, 0, 32))).str());
}

// Structs (or lists of lists) nested far past kRpcMaxDepth.
std::string DeepNesting(std::mt19937& rng, const RpcTarget& t) {
  int depth =
      static_cast<int>(Uniform(rng, 0, 1) == 0 ? Uniform(rng, 17, 64) : Uniform(rng, 1000, 5000));
  Wire w;
  w.Call(Pick(rng, t.methods));
  bool lists = Uniform(rng, 0, 2) == 0;
  auto id = static_cast<int16_t>(Uniform(rng, 1, 4));
  if (lists) {
    w.Field(kList, id);
    for (int i = 0; i < depth; ++i) w.U8(kList).I32(1);
    w.U8(kI32).I32(0);
  } else {
    for (int i = 0; i < depth; ++i) w.Field(kStruct, i == 0 ? id : 1);
    for (int i = 0; i <= depth; ++i) w.Stop();
  }
  return Frame(w.str());
}

// Unknown field ids the reader must skip: values that fit, sometimes ending
// with one that claims more than the frame holds.
std::string UnknownFields(std::mt19937& rng, const RpcTarget& t) {
  Wire w;
  w.Call(Pick(rng, t.methods));
  for (uint64_t i = 0, n = Uniform(rng, 1, 6); i < n; ++i) {
    auto id =
        static_cast<int16_t>(Uniform(rng, 0, 1) == 0 ? Uniform(rng, 100, 32767)
                                                     : -static_cast<int>(Uniform(rng, 1, 32768)));
    switch (Uniform(rng, 0, 3)) {
      case 0:
        w.Field(kString, id).Str(RandomBytes(rng, Uniform(rng, 0, 2048)));
        break;
      case 1: {
        uint32_t count = Uniform(rng, 0, 64);
        w.Field(kList, id).U8(kI64).I32(count);
        for (uint32_t j = 0; j < count; ++j) w.I64(rng());
        break;
      }
      case 2:
        w.Field(kStruct, id).Field(kI32, 1).I32(rng()).Field(kString, 2).Str("x").Stop();
        break;
      default:
        w.Field(kMap, id).U8(kI32).U8(kString).I32(1).I32(rng()).Str(RandomText(rng, 8));
    }
  }
  if (Uniform(rng, 0, 1) == 0) {
    auto id = static_cast<int16_t>(Uniform(rng, 100, 32767));
    if (Uniform(rng, 0, 1) == 0) {
      w.Field(kString, id).I32(HugeCount(rng));
    } else {
      w.Field(kList, id)
          .U8(Pick(rng, std::vector<uint8_t>{kStruct, kString, kI64}))
          .I32(HugeCount(rng));
    }
  }
  return Frame(w.Stop().str());
}

// Version words whose high 16 bits are not 0x8001, negative or not.
std::string BadVersion(std::mt19937& rng, const RpcTarget& t) {
  static const std::vector<uint32_t> kVersions = {0x80020001, 0x80000001, 0x7FFF0001, 0xFFFF0001,
                                                  0x81010001, 0xC0010001, 0x80030001};
  uint32_t version = Pick(rng, kVersions);
  if (Uniform(rng, 0, 1) == 0) {
    do {
      version = 0x80000000 | static_cast<uint32_t>(rng());
    } while ((version >> 16) == 0x8001);
  }
  return Frame(DefaultedCall(rng, t, version));
}

// Old-style messages: name length first, no version word.
std::string Unversioned(std::mt19937& rng, const RpcTarget& t) {
  return Frame(Wire().Str(Pick(rng, t.methods)).U8(1).I32(rng()).str() + WrongTypedArgs(rng));
}

// REPLY, EXCEPTION, ONEWAY and undefined message types.
std::string WrongMessageType(std::mt19937& rng, const RpcTarget& t) {
  static const std::vector<uint32_t> kTypes = {0, 2, 3, 4, 5, 0x7F, 0xFF};
  return Frame(DefaultedCall(rng, t, 0x80010000 | Pick(rng, kTypes)));
}

std::string NegativeSize(std::mt19937& rng, const RpcTarget& t) {
  auto negative = static_cast<uint32_t>(-static_cast<int32_t>(Uniform(rng, 1, 0x7FFFFFFF)));
  if (Uniform(rng, 0, 1) == 0) negative = Pick(rng, std::vector<uint32_t>{0xFFFFFFFF, 0x80000000});
  switch (Uniform(rng, 0, 2)) {
    case 0:  // the method name
      return Frame(Wire().I32(kCallHeader).I32(negative).Raw("Put").I32(1).str());
    case 1:
      return Frame(Wire().Call(Pick(rng, t.methods)).Field(kString, 1).I32(negative).Stop().str());
    default:
      return Frame(
          Wire().Call(Pick(rng, t.methods)).Field(kList, 1).U8(kString).I32(negative).Stop().str());
  }
}

// Offset of the first byte after a call's method name: mutations start there
// so they never turn a read-only call into another method.
size_t ArgsOffset(std::string_view call) {
  uint32_t name = 0;
  for (int i = 4; i < 8; ++i) name = (name << 8) | static_cast<uint8_t>(call[i]);
  return 8 + name + 4;
}

// Bit flips, truncation, splicing, insertions and overwritten size words of
// a valid read-only call.
std::string MutatedValid(std::mt19937& rng, const RpcTarget& t) {
  std::string call = Pick(rng, t.read_only_calls);
  const size_t start = ArgsOffset(call);
  auto at = [&] { return Uniform(rng, start, call.size() - 1); };
  switch (Uniform(rng, 0, 4)) {
    case 0:
      for (uint64_t i = 0, n = Uniform(rng, 1, 8); i < n; ++i) {
        call[at()] ^= static_cast<char>(1u << Uniform(rng, 0, 7));
      }
      break;
    case 1: {
      size_t original = call.size();
      call.resize(Uniform(rng, start, call.size() - 1));
      if (Uniform(rng, 0, 1) == 0) return Frame(call, static_cast<uint32_t>(original));
      break;
    }
    case 2: {
      const std::string& other = Pick(rng, t.read_only_calls);
      size_t from = Uniform(rng, ArgsOffset(other), other.size() - 1);
      call = call.substr(0, at()) + other.substr(from);
      break;
    }
    case 3:
      call.insert(at(), RandomBytes(rng, Uniform(rng, 1, 16)));
      break;
    default: {
      static const std::vector<uint32_t> kWords = {0x7FFFFFFF, 0x80000000, 0xFFFFFFFF,
                                                   0x7FFFFFF0, 0,          kRpcMaxFrameBytes};
      std::string word = Wire().I32(Pick(rng, kWords)).str();
      size_t pos = at();
      call.replace(pos, std::min<size_t>(4, call.size() - pos), word);
    }
  }
  return Frame(call);
}

// Frames of 0..8 bytes; sometimes a run of empty frames first (Thrift reads
// a message across frames, so the reader walks the run).
std::string TinyFrame(std::mt19937& rng) {
  std::string out;
  if (Uniform(rng, 0, 2) == 0) out.assign(4 * Uniform(rng, 1, 2000), '\0');
  auto size = static_cast<uint32_t>(Uniform(rng, 0, 8));
  return out + Frame(RandomBytes(rng, size), size);
}

std::string MakeFrame(FrameKind kind, std::mt19937& rng, const RpcTarget& t);

// Harmless frames (valid read-only calls, unknown methods) and then one
// malformed frame, all on one connection.
std::string Pipelined(std::mt19937& rng, const RpcTarget& t, int* frames) {
  std::string out;
  int harmless = static_cast<int>(Uniform(rng, 1, 5));
  for (int i = 0; i < harmless; ++i) {
    out += Uniform(rng, 0, 2) == 0
               ? Frame(Wire().Call("Fuzz" + RandomText(rng, 6)).str() + WrongTypedArgs(rng))
               : Frame(Pick(rng, t.read_only_calls));
  }
  auto last = static_cast<FrameKind>(Uniform(rng, 0, static_cast<int>(FrameKind::kPipelined) - 1));
  *frames = harmless + 1;
  return out + MakeFrame(last, rng, t);
}

// A whole kRpcMaxFrameBytes frame: a defaulted call whose unknown field
// carries the rest of the frame (a 16 MiB allocation while it is skipped).
std::string MaxFrame(std::mt19937& rng, const RpcTarget& t) {
  std::string head = Wire().Call(Pick(rng, t.methods)).Field(kString, 999).str();
  size_t rest = kRpcMaxFrameBytes - head.size() - 4 - 1;
  std::string filler(rest, static_cast<char>(rng()));
  return Frame(head + Wire().I32(static_cast<uint32_t>(rest)).str() + filler +
               std::string(1, '\0'));
}

std::string MakeFrame(FrameKind kind, std::mt19937& rng, const RpcTarget& t) {
  switch (kind) {
    case FrameKind::kRandomBytes:
      return RandomBytes(rng, Uniform(rng, 1, 512));
    case FrameKind::kAbsurdLength:
      return AbsurdLength(rng, t);
    case FrameKind::kTruncated:
      return Truncated(rng, t);
    case FrameKind::kWrongFieldTypes:
      return Frame(DefaultedCall(rng, t));
    case FrameKind::kHugeString:
      return HugeString(rng, t);
    case FrameKind::kHugeContainer:
      return HugeContainer(rng, t);
    case FrameKind::kDeepNesting:
      return DeepNesting(rng, t);
    case FrameKind::kUnknownFields:
      return UnknownFields(rng, t);
    case FrameKind::kBadVersion:
      return BadVersion(rng, t);
    case FrameKind::kUnversioned:
      return Unversioned(rng, t);
    case FrameKind::kWrongMessageType:
      return WrongMessageType(rng, t);
    case FrameKind::kNegativeSize:
      return NegativeSize(rng, t);
    case FrameKind::kMutatedValid:
      return MutatedValid(rng, t);
    case FrameKind::kTinyFrame:
      return TinyFrame(rng);
    case FrameKind::kMaxFrame:
      return MaxFrame(rng, t);
    case FrameKind::kPipelined:
    case FrameKind::kCount:
      break;
  }
  return {};
}

// ---- malformed HTTP requests, by kind ----

enum class HttpKind : uint8_t {
  kBadRequestLine,
  kHugeHeaders,
  kBadMethod,
  kBadChunked,
  kBadContentLength,
  kBinaryGarbage,
  kPathTraversal,
  kHugeQuery,
  kJsonGarbage,
  kBadToken,
  kTruncatedRequest,
  kPipelined,
  kCount,
};
constexpr std::array<const char*, static_cast<size_t>(HttpKind::kCount)> kHttpKindNames = {
    "bad_request_line",   "huge_headers",   "bad_method",     "bad_chunked",
    "bad_content_length", "binary_garbage", "path_traversal", "huge_query",
    "json_garbage",       "bad_token",      "truncated",      "pipelined"};

std::string Request(std::string_view method, std::string_view target,
                    std::string_view extra_headers = {}, std::string_view body = {}) {
  std::string out =
      std::string(method) + " " + std::string(target) + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  out += extra_headers;
  if (!body.empty()) out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  return out + "\r\n" + std::string(body);
}

std::string BadRequestLine(std::mt19937& rng) {
  static const std::vector<std::string> kLines = {
      "GET\r\n\r\n",
      "GET /health\r\n\r\n",
      "GET /health HTTP/1.1",
      " /health HTTP/1.1\r\n\r\n",
      "GET /health HTTP/9.9\r\n\r\n",
      "GET /health HTTP/1.1 extra\r\n\r\n",
      "GET  /health   HTTP/1.1\r\n\r\n",
      "\r\n\r\n",
      "GET /health HTTP/1.1\n\n",
      "get /health HTTP/1.1\r\n\r\n",
      "GET health HTTP/1.1\r\n\r\n",
      "GET http://127.0.0.1/health HTTP/1.1\r\n\r\n",
      std::string("GET /he\0alth HTTP/1.1\r\n\r\n", 26),
      "GET /health HTTP/1.1\rHost: x\r\n\r\n",
      "GET /health\tHTTP/1.1\r\n\r\n",
      "GET * HTTP/1.1\r\n\r\n",
      "GET /%zz%g HTTP/1.1\r\n\r\n",
      "GET /health HTTP/1.1\r\n: novalue\r\n\r\n",
      "GET /health HTTP/\r\n\r\n",
      "GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Length: 0\r\nContent-Length: "
      "9\r\n\r\n"};
  switch (Uniform(rng, 0, 2)) {
    case 0:
      return Pick(rng, kLines);
    case 1:
      return RandomText(rng, Uniform(rng, 1, 200)) + "\r\n\r\n";
    default:  // a request line over httplib's 8 KiB URI limit
      return "GET /" + std::string(Uniform(rng, 8 * kKiB, 32 * kKiB), 'a') + " HTTP/1.1\r\n\r\n";
  }
}

std::string HugeHeaders(std::mt19937& rng) {
  std::string headers;
  switch (Uniform(rng, 0, 4)) {
    case 0:
      headers = "X-Fuzz: " + std::string(Uniform(rng, 8 * kKiB, 64 * kKiB), 'h') + "\r\n";
      break;
    case 1:
      for (uint64_t i = 0, n = Uniform(rng, 100, 400); i < n; ++i) {
        headers += "X-H" + std::to_string(i) + ": " + RandomText(rng, 8) + "\r\n";
      }
      break;
    case 2:
      headers = "no colon in this header line\r\nX Bad Name: v\r\n";
      break;
    case 3:
      headers = "X-Fold: a\r\n  continued\r\n\tagain\r\nX-Bin: " + RandomBytes(rng, 64) + "\r\n";
      break;
    default:
      headers = std::string(Uniform(rng, 1000, 20000), ':') + "\r\n";
  }
  return Request("GET", "/health", headers);
}

const std::vector<std::string>& Targets() {
  static const std::vector<std::string> kTargets = {"/health",
                                                    "/metrics",
                                                    "/stats",
                                                    "/objects/fuzz%2Fknown",
                                                    "/objects/fuzz/known",
                                                    "/evict",
                                                    "/keys",
                                                    "/keys/fuzz/known",
                                                    "/nodes",
                                                    "/config",
                                                    "*"};
  return kTargets;
}

// Unknown, odd and mutating methods; none carries the token.
std::string BadMethod(std::mt19937& rng) {
  static const std::vector<std::string> kMethods = {
      "FOO",  "CONNECT", "TRACE",  "PATCH", "PRI",  "OPTIONS", "HEAD",     "M-SEARCH",
      "GETT", "G\x01T",  "DELETE", "PUT",   "POST", "get",     "PROPFIND", std::string(300, 'M')};
  std::string method =
      Uniform(rng, 0, 4) == 0 ? RandomText(rng, Uniform(rng, 1, 20)) : Pick(rng, kMethods);
  return Request(method, Pick(rng, Targets()));
}

std::string BadChunked(std::mt19937& rng) {
  static const std::vector<std::string> kEncodings = {
      "Transfer-Encoding: chunked\r\n", "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
      "Transfer-Encoding: gzip, chunked\r\n", "Transfer-Encoding: chunkedx\r\n",
      "Transfer-Encoding: CHUNKED\r\n"};
  static const std::vector<std::string> kBodies = {"zz\r\nabc\r\n0\r\n\r\n",
                                                   "FFFFFFFFFFFFFFFFFFFF\r\nabc",
                                                   "-1\r\nabc\r\n0\r\n\r\n",
                                                   "5\r\nab\r\n",
                                                   "3\r\nabcdef\r\n0\r\n\r\n",
                                                   "3;ext=\x01\x02\r\nabc\r\n0\r\n\r\n",
                                                   "3\r\nabc",
                                                   "3\r\nabc\r\n0\r\nTrailer: x",
                                                   "\r\n\r\n",
                                                   "7fffffffffffffff\r\nab",
                                                   "0x10\r\n0123456789abcdef\r\n",
                                                   " 3\r\nabc\r\n0\r\n\r\n"};
  std::string body =
      Uniform(rng, 0, 3) == 0 ? RandomBytes(rng, Uniform(rng, 1, 256)) : Pick(rng, kBodies);
  std::string method = Pick(rng, std::vector<std::string>{"POST", "DELETE", "GET"});
  return Request(method, "/evict", Pick(rng, kEncodings)) + body;
}

std::string BadContentLength(std::mt19937& rng) {
  static const std::vector<std::string> kLengths = {"-1",
                                                    "abc",
                                                    "99999999999999999999999",
                                                    "18446744073709551615",
                                                    "1e3",
                                                    " 5",
                                                    "5, 6",
                                                    "0x10",
                                                    "+5",
                                                    "",
                                                    "1000",
                                                    "2",
                                                    "2000000"};
  std::string length = Pick(rng, kLengths);
  std::string body = RandomText(rng, Uniform(rng, 0, 40));
  std::string headers = "Content-Length: " + length + "\r\n";
  if (Uniform(rng, 0, 4) == 0) headers += "Content-Length: 50\r\n";
  std::string method = Pick(rng, std::vector<std::string>{"POST", "DELETE", "GET", "PUT"});
  return Request(method, Pick(rng, Targets()), headers) + body;
}

std::string PathTraversal(std::mt19937& rng) {
  static const std::vector<std::string> kPaths = {"/../../../etc/passwd",
                                                  "/objects/../../etc/passwd",
                                                  "/objects/..%2F..%2Fetc%2Fpasswd",
                                                  "/objects/%2e%2e/%2e%2e/",
                                                  "/keys/../health",
                                                  "/objects/fuzz%00known",
                                                  "//health",
                                                  "/health/..",
                                                  "/./health",
                                                  "/objects/%ff%fe",
                                                  "/keys/%",
                                                  "/config/../../proc/self/environ",
                                                  "/%2e%2e%2f",
                                                  "/objects/",
                                                  "/keys/"};
  std::string path = Pick(rng, kPaths);
  if (Uniform(rng, 0, 2) == 0) {
    path = "/objects/";
    for (uint64_t i = 0, n = Uniform(rng, 1, 200); i < n; ++i) path += "../";
  }
  std::string method = Uniform(rng, 0, 3) == 0 ? "DELETE" : "GET";
  return Request(method, path);
}

std::string HugeQuery(std::mt19937& rng) {
  std::string query;
  switch (Uniform(rng, 0, 3)) {
    case 0:
      query = "limit=" + Pick(rng, std::vector<std::string>{"-1", "0", "99999999999999999999",
                                                            "10001", "1e3", "abc", "", "%00"});
      break;
    case 1:
      query = "prefix=" + std::string(Uniform(rng, 1000, 7000), 'p') + "&limit=10000";
      break;
    case 2:
      for (uint64_t i = 0, n = Uniform(rng, 100, 3000); i < n; ++i) query += "a=b&";
      break;
    default:
      query = "cursor=%zz%" + RandomText(rng, Uniform(rng, 10, 60000));
  }
  static const std::vector<std::string> kPaths = {"/keys", "/health", "/metrics",
                                                  "/objects/fuzz%2Fknown", "/nodes"};
  return Request("GET", Pick(rng, kPaths) + "?" + query);
}

// Never a valid eviction request: random bytes, token soup without a real
// tier name, deep nesting, or a near miss that breaks one rule.
std::string JsonGarbageBody(std::mt19937& rng) {
  static const std::vector<std::string> kNearMisses = {
      R"({"tier": 5, "target_ratio": 0})",
      R"({"tier": "", "target_ratio": 0})",
      R"({"tier": "dram", "target_ratio": 1.5})",
      R"({"tier": "dram", "target_ratio": -0.1})",
      R"({"tier": "dram", "target_ratio": "0"})",
      R"({"tier": "dram", "target_ratio": null})",
      R"({"tier": "dram", "target_ratio": 1e999})",
      R"({"tier": "dram", "target_ratio": -1e999})",
      R"({"tier": "dram", "target_ratio": 0, "x": 1})",
      R"({"tier": "dram"})",
      R"({"ratio": 0.5})",
      R"({"tier": "dram", "target_ratio": 0)",
      R"([{"tier": "dram", "target_ratio": 0}])",
      R"("tier")",
      R"({"tier": ["dram"], "target_ratio": 0})"};
  static const std::vector<std::string> kTokens = {
      "{",     "}",    "[",           "]",
      ",",     ":",    "\"tier\"",    "\"target_ratio\"",
      "0.5",   "null", "true",        "\"nosuchtier\"",
      "1e999", "-",    "\"\\u0000\"", "\"\\ud800\"",
      "0",     "\"",   "\\"};
  switch (Uniform(rng, 0, 4)) {
    case 0:
      return RandomBytes(rng, Uniform(rng, 1, 2000));
    case 1: {
      std::string out;
      for (uint64_t i = 0, n = Uniform(rng, 1, 40); i < n; ++i) out += Pick(rng, kTokens);
      return out;
    }
    case 2:
      return std::string(Uniform(rng, 1000, 200000), '[');
    case 3: {
      std::string out;
      for (uint64_t i = 0, n = Uniform(rng, 1000, 50000); i < n; ++i) out += "{\"a\":";
      return out;
    }
    default:
      return Pick(rng, kNearMisses);
  }
}

std::string JsonGarbage(std::mt19937& rng) {
  std::string headers = "Authorization: Bearer " + std::string(kToken) + "\r\n";
  if (Uniform(rng, 0, 1) == 0) headers += "Content-Type: application/json\r\n";
  return Request("POST", "/evict", headers, JsonGarbageBody(rng));
}

// A valid eviction or removal of the known object, without the right token.
std::string BadToken(std::mt19937& rng) {
  const std::string token(kToken);
  static const std::vector<std::string> kAuth = {
      "",
      "Authorization: Bearer\r\n",
      "Authorization: Bearer \r\n",
      "Authorization: Bearer " + token + "x\r\n",
      "Authorization: Bearer " + token.substr(0, token.size() - 1) + "\r\n",
      "Authorization: Basic " + token + "\r\n",
      "Authorization: Bearer wrong\r\nAuthorization: Bearer " + token + "x\r\n",
      "Authorization: " + token + "\r\n",
      "X-Authorization: Bearer " + token + "\r\n"};
  std::string auth = Pick(rng, kAuth);
  if (Uniform(rng, 0, 1) == 0) {
    return Request("POST", "/evict", auth, R"({"tier": "dram", "target_ratio": 0})");
  }
  std::string target = Pick(rng, std::vector<std::string>{"/objects/fuzz/known?force=true",
                                                          "/objects/fuzz%2Fknown?force=true",
                                                          "/objects/fuzz/known?token=" + token});
  return Request("DELETE", target, auth);
}

std::string TruncatedRequest(std::mt19937& rng) {
  static const std::vector<std::string> kRequests = {
      Request("GET", "/health"), Request("GET", "/keys?limit=5"),
      Request("POST", "/evict", {}, R"({"tier": "dram", "target_ratio": 0.5})"),
      Request("DELETE", "/objects/fuzz/known")};
  const std::string& full = Pick(rng, kRequests);
  return full.substr(0, Uniform(rng, 1, full.size() - 1));
}

std::string MakeRequest(HttpKind kind, std::mt19937& rng, int* requests);

// Keep-alive GETs that are fine, then garbage of another kind.
std::string PipelinedRequests(std::mt19937& rng, int* requests) {
  static const std::vector<std::string> kGood = {
      Request("GET", "/health"), Request("GET", "/metrics"), Request("GET", "/keys?limit=3"),
      Request("GET", "/objects/fuzz%2Fknown"), Request("HEAD", "/health")};
  std::string out;
  int good = static_cast<int>(Uniform(rng, 1, 3));
  for (int i = 0; i < good; ++i) out += Pick(rng, kGood);
  auto last = static_cast<HttpKind>(Uniform(rng, 0, static_cast<int>(HttpKind::kPipelined) - 1));
  int last_requests = 1;
  out += MakeRequest(last, rng, &last_requests);
  *requests = good + last_requests;
  return out;
}

std::string MakeRequest(HttpKind kind, std::mt19937& rng, int* requests) {
  *requests = 1;
  switch (kind) {
    case HttpKind::kBadRequestLine:
      return BadRequestLine(rng);
    case HttpKind::kHugeHeaders:
      return HugeHeaders(rng);
    case HttpKind::kBadMethod:
      return BadMethod(rng);
    case HttpKind::kBadChunked:
      return BadChunked(rng);
    case HttpKind::kBadContentLength:
      return BadContentLength(rng);
    case HttpKind::kBinaryGarbage:
      return RandomBytes(rng, Uniform(rng, 1, 4096));
    case HttpKind::kPathTraversal:
      return PathTraversal(rng);
    case HttpKind::kHugeQuery:
      return HugeQuery(rng);
    case HttpKind::kJsonGarbage:
      return JsonGarbage(rng);
    case HttpKind::kBadToken:
      return BadToken(rng);
    case HttpKind::kTruncatedRequest:
      return TruncatedRequest(rng);
    case HttpKind::kPipelined:
      return PipelinedRequests(rng, requests);
    case HttpKind::kCount:
      break;
  }
  return {};
}

// ---- flooding ----

// One connection's bytes: `units` frames or requests of `kind`.
struct Payload {
  std::string bytes;
  size_t kind = 0;
  int units = 1;
  // When set, the reply must start with this ("HTTP/1.1 401").
  std::string expect_prefix;
  // How long to wait for an answer before half-closing (see Exchange).
  std::chrono::milliseconds answer_wait{0};
};

struct FloodResult {
  std::vector<int64_t> per_kind;  // units by kind
  int64_t units = 0;
  int64_t connections = 0;
  int64_t hung = 0;                 // neither answered nor closed within 2 s
  int64_t unconnected = 0;          // connect() failed
  int64_t unexpected = 0;           // reply without Payload::expect_prefix
  int64_t server_errors = 0;        // HTTP 5xx replies
  std::map<int, int64_t> statuses;  // first HTTP status of each reply
  double seconds = 0;

  void Add(const FloodResult& other) {
    for (size_t i = 0; i < per_kind.size(); ++i) per_kind[i] += other.per_kind[i];
    units += other.units;
    connections += other.connections;
    hung += other.hung;
    unconnected += other.unconnected;
    unexpected += other.unexpected;
    server_errors += other.server_errors;
    for (const auto& [status, n] : other.statuses) statuses[status] += n;
  }
};

void Record(const Payload& p, Outcome outcome, const std::string& reply, FloodResult& r) {
  r.per_kind[p.kind] += p.units;
  r.units += p.units;
  ++r.connections;
  if (outcome == Outcome::kHung) ++r.hung;
  if (outcome == Outcome::kNoConnection) ++r.unconnected;
  if (!p.expect_prefix.empty() && !reply.starts_with(p.expect_prefix)) ++r.unexpected;
  if (reply.starts_with("HTTP/1.1 ")) ++r.statuses[std::atoi(reply.c_str() + 9)];
  for (size_t pos = reply.find("HTTP/1.1 5"); pos != std::string::npos;
       pos = reply.find("HTTP/1.1 5", pos + 1)) {
    ++r.server_errors;
  }
}

// Sends make(0) .. make(count - 1), each on its own connection, from
// kFloodThreads threads; stops taking work after kFloodBudget.
FloodResult Flood(int port, int count, size_t kinds, const std::function<Payload(int)>& make) {
  std::atomic<int> next{0};
  std::mutex mu;
  FloodResult total{.per_kind = std::vector<int64_t>(kinds, 0)};
  const auto start = Clock::now();
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kFloodThreads; ++t) {
      threads.emplace_back([&] {
        FloodResult mine{.per_kind = std::vector<int64_t>(kinds, 0)};
        for (int i; (i = next.fetch_add(1)) < count && Clock::now() - start < kFloodBudget;) {
          Payload p = make(i);
          std::string reply;
          Outcome outcome = Exchange(port, p.bytes, &reply, p.answer_wait);
          Record(p, outcome, reply, mine);
        }
        std::lock_guard lock(mu);
        total.Add(mine);
      });
    }
  }
  total.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return total;
}

FloodResult FloodRpc(const RpcTarget& t) {
  return Flood(t.port, kRpcConnections, kFrameKindNames.size(), [&t](int i) {
    std::mt19937 rng = RngFor(t.stream, i);
    FrameKind kind = FrameKindFor(i);
    Payload p{.kind = static_cast<size_t>(kind)};
    p.bytes = kind == FrameKind::kPipelined ? Pipelined(rng, t, &p.units) : MakeFrame(kind, rng, t);
    return p;
  });
}

FloodResult FloodHttp(int port, uint32_t stream, bool is_worker) {
  return Flood(port, kHttpRequests, kHttpKindNames.size(), [=](int i) {
    std::mt19937 rng = RngFor(stream, i);
    auto kind = static_cast<HttpKind>(i % static_cast<int>(HttpKind::kCount));
    Payload p{.kind = static_cast<size_t>(kind), .answer_wait = kHttpAnswerWait};
    p.bytes = MakeRequest(kind, rng, &p.units);
    // The worker has these routes: its token check must answer. These
    // requests are complete, so the long wait costs nothing.
    if (kind == HttpKind::kBadToken && is_worker) {
      p.expect_prefix = "HTTP/1.1 401";
      p.answer_wait = std::chrono::seconds(2);
    }
    return p;
  });
}

std::string Describe(const FloodResult& r, const auto& names) {
  std::ostringstream out;
  out << r.units << " units on " << r.connections << " connections in " << r.seconds << " s (hung "
      << r.hung << ", unconnected " << r.unconnected << ", unexpected " << r.unexpected << ", 5xx "
      << r.server_errors << "):";
  for (size_t i = 0; i < names.size(); ++i) out << " " << names[i] << "=" << r.per_kind[i];
  if (!r.statuses.empty()) out << "; statuses:";
  for (const auto& [status, n] : r.statuses) out << " " << status << "=" << n;
  return out.str();
}

// ---- the processes under test ----

// Opens `n` connections that each declare a kRpcMaxFrameBytes frame, send
// only its first bytes, and stay open.
std::vector<RawConnection> OpenStalledFrames(int port, int n) {
  std::vector<RawConnection> stalled;
  const std::string start = Frame(Wire().Call("Put").str(), kRpcMaxFrameBytes);
  for (int i = 0; i < n; ++i) {
    RawConnection conn(port, kSocketTimeout);
    if (!conn.connected()) continue;
    conn.Send(start);
    stalled.push_back(std::move(conn));
  }
  return stalled;
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The value of `field` ("VmHWM:") in /proc/<pid>/status, in KiB; 0 if absent.
uint64_t StatusKib(pid_t pid, std::string_view field) {
  std::string status = ReadFile("/proc/" + std::to_string(pid) + "/status");
  size_t pos = status.find(field);
  if (pos == std::string::npos) return 0;
  return std::strtoull(status.c_str() + pos + field.size(), nullptr, 10);
}

// True if `pid` exists and is not a zombie.
bool AliveNotZombie(pid_t pid) {
  if (pid <= 0 || kill(pid, 0) != 0) return false;
  std::string status = ReadFile("/proc/" + std::to_string(pid) + "/status");
  size_t pos = status.find("State:");
  if (pos == std::string::npos) return false;
  pos = status.find_first_not_of(" \t", pos + 6);
  return pos != std::string::npos && status[pos] != 'Z' && status[pos] != 'X';
}

// Our child whose command line names `ready_file` (the harness gives each
// process its own), or -1.
pid_t FindChild(const std::filesystem::path& ready_file) {
  const std::string parent = "PPid:\t" + std::to_string(getpid()) + "\n";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (ReadFile(entry.path() / "status").find(parent) == std::string::npos) continue;
    std::string cmdline = ReadFile(entry.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(ready_file.string()) != std::string::npos) return std::stoi(name);
  }
  return -1;
}

std::string HttpGetBody(int port, const std::string& path) {
  auto reply = Http(port, "GET", path);
  return reply ? reply->body : std::string();
}

// A number field of GET /health; -1 when it cannot be read.
int64_t HealthNumber(int admin_port, const std::string& field) {
  auto doc = nlohmann::json::parse(HttpGetBody(admin_port, "/health"), nullptr, false);
  if (doc.is_discarded() || !doc.contains(field) || !doc[field].is_number()) return -1;
  return doc[field].get<int64_t>();
}

// The value of `series` in a Prometheus text page; -1 when absent.
double MetricValue(const std::string& page, const std::string& series) {
  const double value = MetricIn(page, series);
  return std::isnan(value) ? -1 : value;
}

std::string RejectedSeries(std::string_view reason) {
  return "mooncake_rpc_rejected_frames_total{reason=\"" + std::string(reason) + "\"}";
}

// Rejected-frame counters of one process's /metrics, for the closing line.
std::string DescribeRejections(const std::string& page) {
  std::string out;
  for (size_t i = 0; i < kRpcFaultCount; ++i) {
    auto fault = static_cast<RpcFault>(i);
    if (fault == RpcFault::kIdleTimeout) continue;
    out += " " + std::string(RpcFaultName(fault)) + "=" +
           std::to_string(
               static_cast<int64_t>(MetricValue(page, RejectedSeries(RpcFaultName(fault)))));
  }
  return out;
}

void ExpectRejectionsCounted(const std::string& who, const std::string& page) {
  for (RpcFault fault : {RpcFault::kSizeLimit, RpcFault::kFrameTooLarge, RpcFault::kMalformed,
                         RpcFault::kDepthLimit, RpcFault::kTruncatedFrame}) {
    EXPECT_GT(MetricValue(page, RejectedSeries(RpcFaultName(fault))), 0)
        << who << " did not count " << RpcFaultName(fault);
  }
}

// The whole flood against a master and a worker serving RPC with `engine`
// (--rpc-engine).
void FloodAndExpectNothingChanged(const std::string& engine) {
  std::signal(SIGPIPE, SIG_IGN);  // sends use MSG_NOSIGNAL; this covers the rest
  const auto test_start = Clock::now();
  TestCluster cluster;
  ASSERT_TRUE(cluster.StartMaster({"--admin-token", kToken, "--rpc-engine", engine}));
  ASSERT_TRUE(
      cluster.StartWorker("w1", {.dram = kWorkerDram,
                                 .ssd = 0,
                                 .extra_args = {"--admin-token", kToken, "--rpc-engine", engine}}));
  auto client = cluster.NewClient();
  ASSERT_TRUE(client);
  const std::string known = Pattern(kKnownSize, kSeed);
  ASSERT_TRUE(IsOk(client->Put(kKnownKey, known, {.preferred_node = "w1"})));

  const pid_t master_pid = FindChild(cluster.dir() / "master.port");
  const pid_t worker_pid = FindChild(cluster.dir() / "w1.port");
  ASSERT_GT(master_pid, 0);
  ASSERT_GT(worker_pid, 0);
  const int master_admin = cluster.master_admin_port();
  const int worker_admin = cluster.worker_admin_port("w1");
  const int64_t keys_before = HealthNumber(master_admin, "keys");
  const int64_t objects_before = HealthNumber(worker_admin, "objects");
  ASSERT_EQ(keys_before, 1);
  ASSERT_EQ(objects_before, 1);
  const uint64_t master_quiet = StatusKib(master_pid, "VmRSS:");
  const uint64_t worker_quiet = StatusKib(worker_pid, "VmRSS:");

  // Given connections stalled inside declared 16 MiB frames for the whole
  // flood, expect a few KiB each, not 16 MiB.
  std::vector<RawConnection> stalled_master =
      OpenStalledFrames(cluster.master_port(), kStalledFrames);
  std::vector<RawConnection> stalled_worker =
      OpenStalledFrames(cluster.worker_port("w1"), kStalledFrames);
  ASSERT_EQ(stalled_master.size(), static_cast<size_t>(kStalledFrames));
  ASSERT_EQ(stalled_worker.size(), static_cast<size_t>(kStalledFrames));
  EXPECT_TRUE(Eventually(
      [&] {
        return MetricValue(HttpGetBody(master_admin, "/metrics"), "mooncake_rpc_connections") >=
                   kStalledFrames &&
               MetricValue(HttpGetBody(worker_admin, "/metrics"), "mooncake_rpc_connections") >=
                   kStalledFrames;
      },
      std::chrono::seconds(5)));
  const uint64_t master_stalled = StatusKib(master_pid, "VmRSS:");
  const uint64_t worker_stalled = StatusKib(worker_pid, "VmRSS:");
  EXPECT_LT((master_stalled - std::min(master_stalled, master_quiet)) * kKiB,
            kStalledRssGrowthBound);
  EXPECT_LT((worker_stalled - std::min(worker_stalled, worker_quiet)) * kKiB,
            kStalledRssGrowthBound);

  // When both RPC ports, then both admin ports, are flooded at once.
  const auto flood_start = Clock::now();
  FloodResult master_rpc, worker_rpc, master_http, worker_http;
  {
    std::jthread a([&] { master_rpc = FloodRpc(MasterTarget(cluster.master_port())); });
    std::jthread b([&] { worker_rpc = FloodRpc(WorkerTarget(cluster.worker_port("w1"))); });
  }
  {
    std::jthread a([&] { master_http = FloodHttp(master_admin, 3, /*is_worker=*/false); });
    std::jthread b([&] { worker_http = FloodHttp(worker_admin, 4, /*is_worker=*/true); });
  }
  const double flood_seconds = std::chrono::duration<double>(Clock::now() - flood_start).count();
  stalled_master.clear();  // closes them
  stalled_worker.clear();
  std::cout << "fuzz: master rpc " << Describe(master_rpc, kFrameKindNames) << "\n"
            << "fuzz: worker rpc " << Describe(worker_rpc, kFrameKindNames) << "\n"
            << "fuzz: master http " << Describe(master_http, kHttpKindNames) << "\n"
            << "fuzz: worker http " << Describe(worker_http, kHttpKindNames) << "\n";

  // Then every frame and request went out, and none hung a connection.
  for (const FloodResult* r : {&master_rpc, &worker_rpc}) {
    EXPECT_GE(r->units, kRpcConnections);
    EXPECT_EQ(r->connections, kRpcConnections);
  }
  for (const FloodResult* r : {&master_http, &worker_http}) {
    EXPECT_GE(r->units, kHttpRequests);
    EXPECT_EQ(r->connections, kHttpRequests);
    EXPECT_EQ(r->server_errors, 0) << "an admin handler failed on malformed input";
  }
  for (const FloodResult* r : {&master_rpc, &worker_rpc, &master_http, &worker_http}) {
    EXPECT_EQ(r->hung, 0);
    EXPECT_EQ(r->unconnected, 0);
  }
  EXPECT_EQ(worker_http.unexpected, 0) << "a mutating admin request without the token was served";

  // Both processes live (checked before IsRunning, which reaps a zombie),
  // within their memory bounds.
  EXPECT_TRUE(AliveNotZombie(master_pid));
  EXPECT_TRUE(AliveNotZombie(worker_pid));
  EXPECT_TRUE(cluster.IsRunning("master"));
  EXPECT_TRUE(cluster.IsRunning("w1"));
  const uint64_t master_peak = StatusKib(master_pid, "VmHWM:");
  const uint64_t worker_peak = StatusKib(worker_pid, "VmHWM:");
  EXPECT_GT(master_peak, 0u);
  EXPECT_GT(worker_peak, 0u);
  EXPECT_LT(master_peak * kKiB, FloodRssAllowance());
  EXPECT_LT(worker_peak * kKiB, kWorkerDram + FloodRssAllowance());

  // Nothing changed, the rejections were counted, and the cache still works.
  EXPECT_TRUE(ReadsBack(*client, kKnownKey, known));
  EXPECT_EQ(HealthNumber(master_admin, "keys"), keys_before);
  EXPECT_EQ(HealthNumber(worker_admin, "objects"), objects_before);
  const std::string master_metrics = HttpGetBody(master_admin, "/metrics");
  const std::string worker_metrics = HttpGetBody(worker_admin, "/metrics");
  ExpectRejectionsCounted("master", master_metrics);
  ExpectRejectionsCounted("worker", worker_metrics);
  const std::string fresh = Pattern(4 * kKiB, kSeed + 1);
  EXPECT_TRUE(IsOk(client->Put("fuzz/after", fresh)));
  EXPECT_TRUE(ReadsBack(*client, "fuzz/after", fresh));
  EXPECT_EQ(HealthNumber(master_admin, "keys"), keys_before + 1);

  std::cout << "fuzz: frames=" << master_rpc.units + worker_rpc.units
            << " (master=" << master_rpc.units << " worker=" << worker_rpc.units << ")"
            << " http=" << master_http.units + worker_http.units
            << " flood_seconds=" << flood_seconds
            << " test_seconds=" << std::chrono::duration<double>(Clock::now() - test_start).count()
            << " master_quiet_rss_kib=" << master_quiet << " worker_quiet_rss_kib=" << worker_quiet
            << " master_stalled_rss_kib=" << master_stalled
            << " worker_stalled_rss_kib=" << worker_stalled
            << " master_peak_rss_kib=" << master_peak << " worker_peak_rss_kib=" << worker_peak
            << "\n"
            << "fuzz: master rejected" << DescribeRejections(master_metrics) << "\n"
            << "fuzz: worker rejected" << DescribeRejections(worker_metrics) << std::endl;
}

TEST(FuzzTest, MalformedFramesAndRequestsChangeNothing) { FloodAndExpectNothingChanged("threads"); }

TEST(FuzzTest, MalformedFramesAndRequestsChangeNothingOnTheEpollEngine) {
  FloodAndExpectNothingChanged("epoll");
}

// A POST /evict whose `mib` MiB body is chunked (1 MiB chunks), or has no
// length at all (the server may read it to EOF).
std::string OversizedBody(bool chunked, uint64_t mib) {
  std::string out = "POST /evict HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  if (!chunked) return out + "\r\n" + std::string(mib * kMiB, 'b');
  out += "Transfer-Encoding: chunked\r\n\r\n";
  for (uint64_t i = 0; i < mib; ++i) out += "100000\r\n" + std::string(kMiB, 'b') + "\r\n";
  return out + "0\r\n\r\n";
}

// The master's and worker w1's processes and admin ports, for the admin
// floods.
struct AdminTarget {
  std::string name;
  pid_t pid;
  int admin_port;
};
// Starts a master and worker w1 with the admin token; empty if either fails.
std::vector<AdminTarget> StartForAdminFloods(TestCluster& cluster) {
  std::signal(SIGPIPE, SIG_IGN);
  if (!cluster.StartMaster({"--admin-token", kToken}) ||
      !cluster.StartWorker(
          "w1", {.dram = kWorkerDram, .ssd = 0, .extra_args = {"--admin-token", kToken}})) {
    ADD_FAILURE() << "cluster did not start\n" << cluster.AllLogTails();
    return {};
  }
  return {{"master", FindChild(cluster.dir() / "master.port"), cluster.master_admin_port()},
          {"worker", FindChild(cluster.dir() / "w1.port"), cluster.worker_admin_port("w1")}};
}

// The admin servers limit bodies to 1 MiB (AdminServerOptions::max_body_bytes),
// but cpp-httplib 0.11 checks the limit only against a Content-Length: a
// chunked body, or a POST without a length (read until EOF), is buffered
// whole, on any path, before routing or the token check. Expect neither to
// raise a process's peak RSS by more than a few MiB.
TEST(FuzzTest, AdminServersDoNotBufferBodiesOverTheLimit) {
  constexpr uint64_t kBodyMiB = 48;
  constexpr uint64_t kGrowthBound = 16 * kMiB;
  TestCluster cluster;
  const std::vector<AdminTarget> targets = StartForAdminFloods(cluster);
  ASSERT_EQ(targets.size(), 2u);
  for (const AdminTarget& t : targets) {
    ASSERT_GT(t.pid, 0) << t.name;
    for (bool chunked : {true, false}) {
      const uint64_t before = StatusKib(t.pid, "VmHWM:");
      std::string reply;
      Exchange(t.admin_port, OversizedBody(chunked, kBodyMiB), &reply,
               std::chrono::milliseconds(500));
      const uint64_t after = StatusKib(t.pid, "VmHWM:");
      const char* how = chunked ? "chunked" : "unsized";
      std::cout << "fuzz: " << t.name << " " << how << " " << kBodyMiB << " MiB body: peak_rss_kib "
                << before << " -> " << after << ", reply \"" << reply.substr(0, reply.find('\r'))
                << "\"" << std::endl;
      EXPECT_LT((after - std::min(after, before)) * kKiB, kGrowthBound)
          << t.name << " buffered a " << how << " body of " << kBodyMiB << " MiB";
      EXPECT_TRUE(AliveNotZombie(t.pid)) << t.name;
    }
  }
}

// Sends `head`, then `filler` repeated for `total` bytes in 1 MiB sends,
// stopping at the first send the server no longer takes (it closed), then
// reads until it closes. The reply's status line, "" if none came.
std::string SendEndlessHead(int port, std::string_view head, std::string_view filler,
                            uint64_t total) {
  RawConnection conn(port, kSocketTimeout);
  if (!conn.connected()) return "(no connection)";
  std::string chunk;
  while (chunk.size() < kMiB) chunk += filler;  // whole fillers: lines stay intact
  bool taken = conn.Send(head);
  for (uint64_t sent = 0; taken && sent < total; sent += chunk.size()) taken = conn.Send(chunk);
  std::string reply;
  conn.ReadUntilClosed(kSocketTimeout, &reply);
  return reply.substr(0, reply.find('\r'));
}

// cpp-httplib 0.11 reads a request line or a header line whole before it
// checks its length, and takes any number of headers, all before routing or
// the token check: one endless line took a master's peak RSS from 11 MB to
// 600 MB, endless short headers to 1.2 GB. The admin servers read the head
// themselves, at most 16 KiB (AdminServerOptions::max_head_bytes). Expect
// neither flood to raise a process's peak RSS by more than a few MiB, and the
// process to answer /health after it.
TEST(FuzzTest, AdminServersBoundTheRequestHead) {
  constexpr uint64_t kFloodBytes = 32 * kMiB;
  constexpr uint64_t kGrowthBound = 16 * kMiB;
  TestCluster cluster;
  const std::vector<AdminTarget> targets = StartForAdminFloods(cluster);
  ASSERT_EQ(targets.size(), 2u);
  struct Flood {
    std::string name, head, filler;
  };
  const Flood floods[] = {{"endless request line", "GET /", "A"},
                          {"endless headers", "GET /health HTTP/1.1\r\nHost: x\r\n", "a:b\r\n"}};
  for (const AdminTarget& t : targets) {
    ASSERT_GT(t.pid, 0) << t.name;
    for (const Flood& f : floods) {
      const uint64_t before = StatusKib(t.pid, "VmHWM:");
      const std::string status = SendEndlessHead(t.admin_port, f.head, f.filler, kFloodBytes);
      const uint64_t after = StatusKib(t.pid, "VmHWM:");
      std::cout << "fuzz: " << t.name << " " << f.name << " of " << kFloodBytes / kMiB
                << " MiB: peak_rss_kib " << before << " -> " << after << ", reply \"" << status
                << "\"" << std::endl;
      EXPECT_LT((after - std::min(after, before)) * kKiB, kGrowthBound)
          << t.name << " buffered an " << f.name;
      EXPECT_TRUE(AliveNotZombie(t.pid)) << t.name;
      auto health = Http(t.admin_port, "GET", "/health");
      EXPECT_TRUE(health && health->status == 200) << t.name << " no /health after an " << f.name;
    }
  }
}

}  // namespace
}  // namespace mooncake::testing
