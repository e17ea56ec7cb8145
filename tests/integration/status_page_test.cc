// The status page (issue: "a status page on the admin ports"): GET / on the
// master's and each worker's admin port, loaded in headless Chromium against
// a live 2-worker cluster. What an operator relies on:
//  * the master page lists every node with its liveness and every tier with
//    its used/capacity, and the counters and latency are real numbers;
//  * the numbers move after puts and gets (the page refreshes itself);
//  * a killed worker shows as dead;
//  * each worker's page shows its own tiers, counters and request latency;
//  * the page is one self-contained document (no asset from the network).
//
// The browser runs with a bounded virtual-time budget and a wall-clock
// deadline; the tests skip (visibly) when Chromium is absent or cannot start.
// Screenshots land in the build tree (printed paths): status-page.png (laptop
// width), status-page-phone.png (phone width), status-page-worker.png.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/test_cluster.h"
#include "tests/raw_rpc.h"

#ifndef MOONCAKE_BUILD_DIR
#define MOONCAKE_BUILD_DIR "."
#endif
#ifndef MOONCAKE_CHROMIUM_BIN
#define MOONCAKE_CHROMIUM_BIN ""
#endif

namespace mooncake::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr uint64_t kDram = 32ull << 20;
constexpr uint64_t kSsd = 64ull << 20;

// ---- A headless Chromium, bounded in time --------------------------------

struct BrowserRun {
  int exit_code = -1;  // -1: killed (deadline) or could not start
  std::string out;
  std::string err;
};

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// MOONCAKE_CHROMIUM, else what CMake found, else Debian's path.
std::string ChromiumPath() {
  if (const char* env = std::getenv("MOONCAKE_CHROMIUM"); env && *env) return env;
  if (std::string built = MOONCAKE_CHROMIUM_BIN; !built.empty()) return built;
  return "/usr/bin/chromium";
}

class Browser {
 public:
  explicit Browser(fs::path dir) : dir_(std::move(dir)) { fs::create_directories(dir_); }

  // Runs Chromium headless with `args` after the common flags; kills its whole
  // process group at `deadline`.
  BrowserRun Run(const std::vector<std::string>& args,
                 std::chrono::seconds deadline = std::chrono::seconds(60)) {
    ++runs_;
    fs::path out = dir_ / ("run" + std::to_string(runs_) + ".out");
    fs::path err = dir_ / ("run" + std::to_string(runs_) + ".err");
    std::vector<std::string> argv = {ChromiumPath(),
                                     "--headless=new",
                                     "--no-sandbox",  // CI runs as root
                                     "--disable-gpu",
                                     "--disable-dev-shm-usage",
                                     "--no-first-run",
                                     "--no-default-browser-check",
                                     "--disable-extensions",
                                     "--disable-background-networking",
                                     "--disable-component-update",
                                     "--disable-sync",
                                     "--mute-audio",
                                     "--hide-scrollbars",
                                     "--user-data-dir=" + (dir_ / "profile").string()};
    argv.insert(argv.end(), args.begin(), args.end());
    BrowserRun run;
    pid_t pid = fork();
    if (pid < 0) return run;
    if (pid == 0) {
      setpgid(0, 0);  // its own group: the deadline kills renderers too
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int n = open("/dev/null", O_RDONLY);
      if (o < 0 || e < 0 || n < 0) _exit(126);
      dup2(n, 0);
      dup2(o, 1);
      dup2(e, 2);
      std::vector<char*> cargv;
      for (auto& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      execv(cargv[0], cargv.data());
      _exit(127);
    }
    setpgid(pid, pid);
    auto until = std::chrono::steady_clock::now() + deadline;
    int status = 0;
    bool exited = false;
    while (std::chrono::steady_clock::now() < until) {
      if (waitpid(pid, &status, WNOHANG) == pid) {
        exited = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill(-pid, SIGKILL);  // the deadline, or helpers left behind
    if (!exited) waitpid(pid, &status, 0);
    if (exited && WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
    run.out = ReadFile(out);
    run.err = ReadFile(err);
    return run;
  }

  // Empty when Chromium works; else why not.
  std::string Probe() {
    if (!fs::exists(ChromiumPath())) return "no Chromium at " + ChromiumPath();
    auto run = Run({"--dump-dom", "data:text/html,<p id=probe>ok</p>"}, std::chrono::seconds(30));
    if (run.exit_code == 0 && run.out.find("probe") != std::string::npos) return {};
    std::string tail = run.err.size() > 600 ? run.err.substr(run.err.size() - 600) : run.err;
    return ChromiumPath() + " cannot start (exit " + std::to_string(run.exit_code) + "): " + tail;
  }

  // The page's DOM after its first successful refresh, or nullopt after
  // three tries (a try is ~4 s of virtual time, bounded in wall time).
  std::optional<std::string> LoadedDom(const std::string& url, std::string* why) {
    for (int attempt = 0; attempt < 3; ++attempt) {
      auto run = Run({"--virtual-time-budget=4000", "--dump-dom", url});
      if (run.exit_code == 0 && run.out.find("data-loaded=\"0\"") == std::string::npos &&
          run.out.find("data-loaded=\"") != std::string::npos &&
          run.out.find("data-error=") == std::string::npos) {
        return run.out;
      }
      *why = "exit " + std::to_string(run.exit_code) + ", dom: " + run.out.substr(0, 2000) +
             "\nstderr tail: " + run.err.substr(run.err.size() > 800 ? run.err.size() - 800 : 0);
    }
    return std::nullopt;
  }

  // A PNG of `url` after its data arrived, at `width`x`height` CSS pixels,
  // published at `png`. Drawn in this test's own directory and renamed into
  // place, so a concurrent run of the suite never sees a half-written file.
  ::testing::AssertionResult Screenshot(const std::string& url, const fs::path& png, int width,
                                        int height) {
    fs::path drawn = dir_ / png.filename();
    fs::remove(drawn);
    auto run = Run({"--virtual-time-budget=4000", "--screenshot=" + drawn.string(),
                    "--window-size=" + std::to_string(width) + "," + std::to_string(height), url});
    std::string bytes = fs::exists(drawn) ? ReadFile(drawn) : "";
    if (bytes.size() < 8 || bytes.compare(1, 3, "PNG") != 0) {
      return ::testing::AssertionFailure()
             << "no PNG at " << drawn << " (exit " << run.exit_code << "): " << run.err;
    }
    std::error_code ec;
    fs::path staged = png;
    staged += ".tmp." + std::to_string(getpid());
    fs::copy_file(drawn, staged, fs::copy_options::overwrite_existing, ec);
    if (!ec) fs::rename(staged, png, ec);
    if (ec)
      return ::testing::AssertionFailure() << "cannot publish " << png << ": " << ec.message();
    return ::testing::AssertionSuccess();
  }

 private:
  fs::path dir_;
  int runs_ = 0;
};

// ---- Reading the serialized DOM ------------------------------------------

using Attrs = std::map<std::string, std::string>;

std::string Unescape(std::string s) {
  static const std::pair<const char*, const char*> kEntities[] = {
      {"&quot;", "\""}, {"&lt;", "<"}, {"&gt;", ">"}, {"&nbsp;", "\xc2\xa0"}, {"&amp;", "&"}};
  for (const auto& [from, to] : kEntities) {
    for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + 1)) {
      s.replace(pos, std::string_view(from).size(), to);
    }
  }
  return s;
}

// Every start tag of `dom` carrying attribute `name`, as its attribute map
// (Chromium writes values double-quoted; '>' may appear inside one).
std::vector<Attrs> ElementsWith(const std::string& dom, const std::string& name) {
  std::vector<Attrs> found;
  size_t pos = 0;
  while ((pos = dom.find('<', pos)) != std::string::npos) {
    ++pos;
    if (pos >= dom.size() || !std::isalpha(static_cast<unsigned char>(dom[pos]))) continue;
    while (pos < dom.size() && std::isalnum(static_cast<unsigned char>(dom[pos]))) ++pos;
    Attrs attrs;
    while (pos < dom.size() && dom[pos] != '>') {
      if (std::isspace(static_cast<unsigned char>(dom[pos])) || dom[pos] == '/') {
        ++pos;
        continue;
      }
      size_t start = pos;
      while (pos < dom.size() && !std::isspace(static_cast<unsigned char>(dom[pos])) &&
             dom[pos] != '=' && dom[pos] != '>')
        ++pos;
      std::string attr = dom.substr(start, pos - start);
      std::string value;
      if (pos < dom.size() && dom[pos] == '=' && pos + 1 < dom.size() && dom[pos + 1] == '"') {
        size_t close = dom.find('"', pos + 2);
        if (close == std::string::npos) break;
        value = Unescape(dom.substr(pos + 2, close - pos - 2));
        pos = close + 1;
      }
      attrs[attr] = value;
    }
    if (attrs.contains(name)) found.push_back(std::move(attrs));
  }
  return found;
}

// The page's numbers for one scope.
struct PageView {
  std::map<std::string, std::string> node_alive;              // node -> "true"/"false"
  std::map<std::string, std::map<std::string, Attrs>> tiers;  // node -> tier -> attrs
  std::map<std::string, double> summary;                      // data-stat -> value (first seen)
  std::map<std::string, Attrs> latency;                       // op -> row attrs
  std::string body;                                           // <body> attrs, for messages

  double TotalUsed() const {
    double used = 0;
    for (const auto& [node, tiers_of] : tiers) {
      for (const auto& [name, a] : tiers_of) used += std::stod(a.at("data-used"));
    }
    return used;
  }
  double Stat(const std::string& key) const {
    auto it = summary.find(key);
    return it == summary.end() ? -1 : it->second;
  }
};

PageView Read(const std::string& dom) {
  PageView view;
  for (auto& a : ElementsWith(dom, "data-alive")) view.node_alive[a["data-node"]] = a["data-alive"];
  for (auto& a : ElementsWith(dom, "data-tier")) view.tiers[a["data-node"]][a["data-tier"]] = a;
  // Summary tiles come first in the document; per-node counters repeat keys.
  for (auto& a : ElementsWith(dom, "data-stat")) {
    if (!a.contains("data-value") || a["data-value"].empty()) continue;
    view.summary.try_emplace(a["data-stat"], std::stod(a["data-value"]));
  }
  for (auto& a : ElementsWith(dom, "data-op")) view.latency[a["data-op"]] = a;
  for (auto& a : ElementsWith(dom, "data-role")) {
    for (const auto& [k, v] : a) view.body += k + "=" + v + " ";
  }
  return view;
}

// ---- The fixture -----------------------------------------------------------

class StatusPageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster({"--node-ttl-ms", "1500"}));
    for (const char* node : {"w1", "w2"}) {
      ASSERT_TRUE(cluster_.StartWorker(node, {.dram = kDram, .ssd = kSsd}));
    }
    // Both nodes have heartbeated their tiers to the master.
    ASSERT_TRUE(Eventually([&] {
      auto nodes = NodesJson();
      if (nodes.size() != 2) return false;
      for (const auto& n : nodes) {
        if (!n["alive"].get<bool>() || n["tiers"].size() != 2) return false;
      }
      return true;
    })) << cluster_.AllLogTails();
    // No local node: puts and gets travel as put/get RPCs, which the
    // worker's latency table names.
    client_ = cluster_.NewClient();
    ASSERT_NE(client_, nullptr);
  }

  json NodesJson() {
    auto reply = Http(cluster_.master_admin_port(), "GET", "/nodes");
    if (!reply || reply->status != 200) return json::array();
    return json::parse(reply->body, nullptr, false).value("nodes", json::array());
  }

  json ClusterStats() {
    auto reply = Http(cluster_.master_admin_port(), "GET", "/cluster/stats");
    if (!reply || reply->status != 200) return json::object();
    return json::parse(reply->body, nullptr, false);
  }

  // Puts `n` objects of `size` bytes spread over both nodes, and reads each back.
  void PutAndGet(const std::string& prefix, int n, size_t size) {
    for (int i = 0; i < n; ++i) {
      std::string key = prefix + std::to_string(i);
      std::string value = PatternBytes(static_cast<uint64_t>(i) + 7, size);
      ASSERT_TRUE(IsOk(client_->Put(key, value, {.preferred_node = i % 2 ? "w2" : "w1"})));
      ASSERT_TRUE(ReadsBack(*client_, key, value));
    }
  }

  std::string MasterUrl() const {
    return "http://127.0.0.1:" + std::to_string(cluster_.master_admin_port()) + "/";
  }
  std::string WorkerUrl(const std::string& node) const {
    return "http://127.0.0.1:" + std::to_string(cluster_.worker_admin_port(node)) + "/";
  }

  // Empty when Chromium can run here; else why not (the tests skip with it).
  std::string BrowserMissing() { return browser_.Probe(); }

  std::string Dom(const std::string& url) {
    std::string why;
    auto dom = browser_.LoadedDom(url, &why);
    EXPECT_TRUE(dom.has_value()) << "the page at " << url << " never loaded its data: " << why;
    return dom.value_or("");
  }

  TestCluster cluster_;
  std::unique_ptr<Client> client_;
  Browser browser_{cluster_.dir() / "browser"};
};

// Without a browser: GET / is one HTML document that loads nothing from the
// network, on both admin servers.
TEST_F(StatusPageTest, PageIsOneSelfContainedDocument) {
  for (int port : {cluster_.master_admin_port(), cluster_.worker_admin_port("w1")}) {
    auto reply = Http(port, "GET", "/");
    ASSERT_TRUE(reply.has_value()) << "port " << port;
    EXPECT_EQ(reply->status, 200);
    EXPECT_NE(reply->headers.find("content-type: text/html"), std::string::npos) << reply->headers;
    EXPECT_NE(reply->headers.find("content-security-policy: default-src 'none'"), std::string::npos)
        << reply->headers;
    const std::string& page = reply->body;
    EXPECT_TRUE(page.starts_with("<!DOCTYPE html>"));
    EXPECT_NE(page.find("<script>"), std::string::npos);
    EXPECT_NE(page.find("<style>"), std::string::npos);
    for (const char* external : {"http://", "https://", "src=", "<link", "@import", "url("}) {
      EXPECT_EQ(page.find(external), std::string::npos) << "the page references " << external;
    }
  }
  // The JSON the master page reads exists and has the counters it shows.
  auto stats = Http(cluster_.master_admin_port(), "GET", "/stats");
  ASSERT_TRUE(stats.has_value());
  EXPECT_EQ(stats->status, 200);
  json s = json::parse(stats->body, nullptr, false);
  EXPECT_TRUE(s.contains("requests") && s.contains("keys")) << stats->body;
  json cluster = ClusterStats();
  ASSERT_EQ(cluster["nodes"].size(), 2u) << cluster.dump();
  for (const auto& n : cluster["nodes"]) {
    EXPECT_TRUE(n["ok"].get<bool>()) << n.dump();
    EXPECT_TRUE(n["totals"].contains("prefetch_started")) << n.dump();
  }
}

TEST_F(StatusPageTest, MasterPageShowsEveryNodeAndTierAndMovesAfterPuts) {
  if (std::string why = BrowserMissing(); !why.empty()) GTEST_SKIP() << why;
  PageView before = Read(Dom(MasterUrl()));
  ASSERT_FALSE(HasFailure());

  // Every node, alive, with both tiers and their real capacities.
  EXPECT_EQ(before.node_alive, (std::map<std::string, std::string>{{"w1", "true"}, {"w2", "true"}}))
      << before.body;
  for (const char* node : {"w1", "w2"}) {
    ASSERT_TRUE(before.tiers.contains(node)) << node;
    const auto& tiers = before.tiers.at(node);
    ASSERT_TRUE(tiers.contains("dram") && tiers.contains("ssd")) << node;
    EXPECT_EQ(std::stoull(tiers.at("dram").at("data-capacity")), kDram);
    EXPECT_EQ(std::stoull(tiers.at("ssd").at("data-capacity")), kSsd);
    // Counters arrived from the worker (via /cluster/stats), not just usage.
    EXPECT_TRUE(tiers.at("dram").contains("data-hits")) << node;
  }
  EXPECT_EQ(before.Stat("nodes_alive"), 2);
  for (const char* key : {"keys", "gets", "hits", "puts", "promotions", "demotions", "evictions",
                          "prefetches", "moved_in", "moved_out"}) {
    EXPECT_GE(before.Stat(key), 0) << "no " << key << " on the page";
  }
  EXPECT_FALSE(before.latency.empty()) << "no master latency rows";

  // When a client puts and reads back 16 objects of 256 KiB over both nodes
  const double puts_before = before.Stat("puts");
  PutAndGet("page-", 16, 256 << 10);
  ASSERT_FALSE(HasFailure());
  // (the master hears of them through heartbeats and Stats calls)
  ASSERT_TRUE(Eventually([&] {
    uint64_t puts = 0;
    for (const auto& n : ClusterStats().value("nodes", json::array())) {
      if (n.value("ok", false)) puts += n["totals"]["puts"].get<uint64_t>();
    }
    uint64_t used = 0;
    for (const auto& n : NodesJson()) {
      for (const auto& t : n["tiers"]) used += t["used"].get<uint64_t>();
    }
    return puts >= puts_before + 16 && used >= 16 * (256 << 10);
  }));

  // Expect the page's numbers to follow.
  PageView after = Read(Dom(MasterUrl()));
  EXPECT_EQ(after.Stat("keys"), before.Stat("keys") + 16);
  EXPECT_GE(after.Stat("puts"), before.Stat("puts") + 16);
  EXPECT_GE(after.Stat("gets"), before.Stat("gets") + 16);
  EXPECT_GT(after.Stat("hits"), before.Stat("hits"));
  EXPECT_GE(after.TotalUsed(), before.TotalUsed() + 16 * (256 << 10));
  for (const char* node : {"w1", "w2"}) {
    EXPECT_GT(std::stod(after.tiers[node]["dram"]["data-used"]),
              std::stod(before.tiers[node]["dram"]["data-used"]))
        << node << "'s DRAM bar did not move";
  }

  // Screenshots in the build tree, at laptop and phone widths.
  fs::path laptop = fs::path(MOONCAKE_BUILD_DIR) / "status-page.png";
  fs::path phone = fs::path(MOONCAKE_BUILD_DIR) / "status-page-phone.png";
  EXPECT_TRUE(browser_.Screenshot(MasterUrl(), laptop, 1280, 900));
  EXPECT_TRUE(browser_.Screenshot(MasterUrl(), phone, 390, 1400));
  std::cout << "status page screenshot: " << fs::absolute(laptop).string() << "\n"
            << "status page screenshot (phone width): " << fs::absolute(phone).string() << "\n";

  // When w2 dies, expect the page to say so.
  cluster_.KillWorker("w2", SIGKILL);
  ASSERT_TRUE(Eventually([&] {
    for (const auto& n : NodesJson()) {
      if (n["node_id"] == "w2") return !n["alive"].get<bool>();
    }
    return false;
  }));
  PageView dead = Read(Dom(MasterUrl()));
  EXPECT_EQ(dead.node_alive["w2"], "false");
  EXPECT_EQ(dead.node_alive["w1"], "true");
  EXPECT_EQ(dead.Stat("nodes_alive"), 1);
}

TEST_F(StatusPageTest, WorkerPageShowsItsTiersCountersAndLatency) {
  if (std::string why = BrowserMissing(); !why.empty()) GTEST_SKIP() << why;
  PageView before = Read(Dom(WorkerUrl("w1")));
  ASSERT_FALSE(HasFailure());
  EXPECT_NE(before.body.find("data-role=worker"), std::string::npos) << before.body;
  ASSERT_EQ(before.tiers.size(), 1u) << "the worker page shows its own node only";
  ASSERT_TRUE(before.tiers.contains("w1"));
  EXPECT_EQ(std::stoull(before.tiers["w1"]["dram"]["data-capacity"]), kDram);
  EXPECT_EQ(std::stoull(before.tiers["w1"]["ssd"]["data-capacity"]), kSsd);
  for (const char* key : {"gets", "hits", "puts", "promotions", "demotions", "evictions",
                          "prefetches", "moved_in", "moved_out"}) {
    EXPECT_GE(before.Stat(key), 0) << "no " << key << " on the page";
  }

  PutAndGet("worker-page-", 8, 64 << 10);  // half on w1
  ASSERT_FALSE(HasFailure());

  PageView after = Read(Dom(WorkerUrl("w1")));
  EXPECT_GE(after.Stat("puts"), before.Stat("puts") + 4);
  EXPECT_GE(after.Stat("gets"), before.Stat("gets") + 4);
  EXPECT_GT(after.Stat("hits"), before.Stat("hits"));
  EXPECT_GT(std::stod(after.tiers["w1"]["dram"]["data-used"]),
            std::stod(before.tiers["w1"]["dram"]["data-used"]));
  // Its request latency: the puts and gets it served, with percentiles.
  for (const char* op : {"put", "get"}) {
    ASSERT_TRUE(after.latency.contains(op)) << "no latency row for " << op;
    EXPECT_GE(std::stoull(after.latency[op]["data-requests"]), 4u) << op;
    EXPECT_GT(std::stod(after.latency[op]["data-p99-ms"]), 0) << op;
  }

  fs::path png = fs::path(MOONCAKE_BUILD_DIR) / "status-page-worker.png";
  EXPECT_TRUE(browser_.Screenshot(WorkerUrl("w1"), png, 1280, 900));
  std::cout << "worker status page screenshot: " << fs::absolute(png).string() << "\n";
}

}  // namespace
}  // namespace mooncake::testing
