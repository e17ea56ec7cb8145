// examples/grafana/mooncake-dashboard.json queries only metrics that exist:
// every metric name in its PromQL expressions (and template queries) appears
// in a live master's or worker's /metrics after a little traffic. A renamed
// metric, or a dashboard typo, fails here instead of leaving an empty panel.

#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "tests/integration/test_cluster.h"
#include "tests/raw_rpc.h"

#ifndef MOONCAKE_SOURCE_DIR
#define MOONCAKE_SOURCE_DIR "."
#endif

namespace mooncake::testing {
namespace {

using nlohmann::json;

bool IsIdentStart(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':';
}
bool IsIdentChar(char c) { return IsIdentStart(c) || std::isdigit(static_cast<unsigned char>(c)); }

// Names PromQL gives meaning to: never metrics.
const std::set<std::string>& PromqlWords() {
  static const std::set<std::string> kWords = {
      // aggregation operators (may be followed by `by (...)` before their '(')
      "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
      "count_values", "group",
      // keywords and binary operators
      "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
      "offset", "atan2", "inf", "nan"};
  return kWords;
}

// Index just past the bracketed group opening at `pos` (`open`...`close`),
// skipping quoted strings inside it.
size_t SkipGroup(std::string_view expr, size_t pos, char open, char close) {
  int depth = 0;
  for (size_t i = pos; i < expr.size(); ++i) {
    char c = expr[i];
    if (c == '"' || c == '\'' || c == '`') {
      for (++i; i < expr.size() && expr[i] != c; ++i) {
        if (expr[i] == '\\') ++i;
      }
    } else if (c == open) {
      ++depth;
    } else if (c == close && --depth == 0) {
      return i + 1;
    }
  }
  return expr.size();
}

// The metric names a PromQL expression selects. Skips label matchers {...},
// ranges [...], strings, numbers, $variables, functions (an identifier
// followed by '('), PromQL's words and the label lists after by/without/
// on/ignoring/group_left/group_right.
std::set<std::string> MetricNames(std::string_view expr) {
  static const std::set<std::string> kLabelListWords = {"by",       "without",    "on",
                                                        "ignoring", "group_left", "group_right"};
  std::set<std::string> names;
  size_t i = 0;
  while (i < expr.size()) {
    char c = expr[i];
    if (c == '{') {
      i = SkipGroup(expr, i, '{', '}');
    } else if (c == '[') {
      i = SkipGroup(expr, i, '[', ']');
    } else if (c == '"' || c == '\'' || c == '`') {
      for (++i; i < expr.size() && expr[i] != c; ++i) {
        if (expr[i] == '\\') ++i;
      }
      ++i;
    } else if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
      while (i < expr.size() && (IsIdentChar(expr[i]) || expr[i] == '.')) ++i;
    } else if (c == '$') {
      for (++i; i < expr.size() && IsIdentChar(expr[i]); ++i) {
      }
    } else if (IsIdentStart(c)) {
      size_t start = i;
      while (i < expr.size() && IsIdentChar(expr[i])) ++i;
      std::string word(expr.substr(start, i - start));
      size_t next = i;
      while (next < expr.size() && std::isspace(static_cast<unsigned char>(expr[next]))) ++next;
      bool call = next < expr.size() && expr[next] == '(';
      if (kLabelListWords.contains(word)) {
        if (call) i = SkipGroup(expr, next, '(', ')');
      } else if (!call && !PromqlWords().contains(word)) {
        names.insert(word);
      }
    } else {
      ++i;
    }
  }
  return names;
}

// Every PromQL expression of the dashboard: panel targets (rows nest panels)
// and the metric of each label_values(...) template query.
void CollectExprs(const json& node, std::vector<std::string>* exprs) {
  if (node.is_object()) {
    for (const auto& [key, value] : node.items()) {
      if (key == "expr" && value.is_string()) exprs->push_back(value.get<std::string>());
      if ((key == "definition" || key == "query") && value.is_string() &&
          value.get<std::string>().starts_with("label_values(")) {
        static const std::regex kLabelValues(R"(label_values\(\s*([^,)]+))");
        std::smatch m;
        std::string text = value.get<std::string>();
        if (std::regex_search(text, m, kLabelValues)) exprs->push_back(m[1].str());
      }
      CollectExprs(value, exprs);
    }
  } else if (node.is_array()) {
    for (const auto& item : node) CollectExprs(item, exprs);
  }
}

// Series names in a Prometheus text exposition.
std::set<std::string> ExposedNames(const std::string& text) {
  std::set<std::string> names;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t end = line.find_first_of("{ ");
    names.insert(line.substr(0, end));
  }
  return names;
}

TEST(GrafanaDashboardTest, ExtractorFindsMetricsOnly) {
  EXPECT_EQ(MetricNames(R"(histogram_quantile(0.99, sum by (le, op) )"
                        R"((rate(a_bucket{node=~"$node", x="b{c}"}[$__rate_interval]))))"),
            (std::set<std::string>{"a_bucket"}));
  EXPECT_EQ(MetricNames("sum(rate(x_total[5m])) / clamp_min(sum(y) + z offset 5m, 1e-9)"),
            (std::set<std::string>{"x_total", "y", "z"}));
  EXPECT_EQ(MetricNames("a / on (node) group_left (tier) b"), (std::set<std::string>{"a", "b"}));
}

TEST(GrafanaDashboardTest, EveryQueriedMetricExistsInALiveCluster) {
  const std::string path =
      std::string(MOONCAKE_SOURCE_DIR) + "/examples/grafana/mooncake-dashboard.json";
  std::ifstream file(path);
  ASSERT_TRUE(file.good()) << "cannot read " << path;
  json dashboard = json::parse(file, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(dashboard.is_discarded()) << path << " is not valid JSON";
  ASSERT_TRUE(dashboard.contains("panels")) << path << " has no panels";

  std::vector<std::string> exprs;
  CollectExprs(dashboard, &exprs);
  std::set<std::string> queried;
  for (const auto& e : exprs) queried.merge(MetricNames(e));
  // A dashboard covering nodes, tiers, cache activity, moves and latency.
  ASSERT_GE(exprs.size(), 30u);
  ASSERT_GE(queried.size(), 30u);

  // Given a live cluster with some traffic (puts, hits, a miss, a move-free
  // workload: the move counters exist from the start)
  TestCluster cluster;
  ASSERT_TRUE(cluster.StartMaster());
  ASSERT_TRUE(cluster.StartWorker("w1"));
  ASSERT_TRUE(cluster.StartWorker("w2"));
  auto client = cluster.NewClient();
  ASSERT_NE(client, nullptr);
  for (int i = 0; i < 8; ++i) {
    std::string key = "dash-" + std::to_string(i);
    ASSERT_TRUE(
        IsOk(client->Put(key, std::string(4096, 'x'), {.preferred_node = i % 2 ? "w2" : "w1"})));
    ASSERT_TRUE(IsOk(client->Get(key)));
  }
  EXPECT_TRUE(FailsWith(client->Get("dash-absent"), ErrorCode::kObjectNotFound));
  ASSERT_TRUE(Eventually([&] {
    auto reply = Http(cluster.master_admin_port(), "GET", "/metrics");
    return reply && reply->body.find("mooncake_master_node_tier_used_bytes") != std::string::npos;
  }));

  std::set<std::string> exposed;
  for (int port : {cluster.master_admin_port(), cluster.worker_admin_port("w1"),
                   cluster.worker_admin_port("w2")}) {
    auto reply = Http(port, "GET", "/metrics");
    ASSERT_TRUE(reply.has_value() && reply->status == 200) << "no /metrics on port " << port;
    exposed.merge(ExposedNames(reply->body));
  }
  // Expect every metric the dashboard queries to be one of them.
  for (const auto& name : queried) {
    EXPECT_TRUE(exposed.contains(name))
        << "the dashboard queries " << name << ", which no /metrics exposes";
  }
}

}  // namespace
}  // namespace mooncake::testing
