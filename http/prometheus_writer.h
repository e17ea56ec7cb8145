#pragma once

// Builds a Prometheus text exposition (format 0.0.4). Callers open a family
// (which writes its # HELP and # TYPE lines once) and then write that
// family's samples; the writer appends "_total" to counters and "_bucket",
// "_sum", "_count" to histograms, formats numbers and escapes label values.
//
// Samples of one family must be written together, right after its Begin*
// call: the text format does not allow a family to reappear later.
//
// Thread-safety: none; one writer builds one response.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/metrics.h"
#include "thrift/rpc_limits.h"

namespace mooncake {

using PrometheusLabels = std::vector<std::pair<std::string, std::string>>;

class PrometheusWriter {
 public:
  // `name` without the "_total" suffix, which the writer adds.
  void BeginCounter(std::string_view name, std::string_view help);
  void BeginGauge(std::string_view name, std::string_view help);
  void BeginHistogram(std::string_view name, std::string_view help);

  // One sample of the open counter or gauge family.
  void Sample(const PrometheusLabels& labels, double value);
  // Integers print exactly, even above 2^53.
  void Sample(const PrometheusLabels& labels, uint64_t value);
  // The _bucket (cumulative, ending with le="+Inf"), _sum and _count samples
  // of the open histogram family.
  void Histogram(const PrometheusLabels& labels, const HistogramSnapshot& histogram);

  // A family with one unlabelled sample.
  void Counter(std::string_view name, std::string_view help, uint64_t value);
  void Gauge(std::string_view name, std::string_view help, double value);

  // Labels written first on every sample from now on (e.g. the worker's
  // {node="<id>"}, so its series join with the master's `node` label).
  void SetConstLabels(PrometheusLabels labels) { const_labels_ = std::move(labels); }

  // The text so far; the writer is empty afterwards.
  std::string Take() { return std::exchange(out_, {}); }

  // "text/plain; version=0.0.4; charset=utf-8", what Prometheus expects.
  static constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

  // Backslash, double quote and newline escaped as the format requires; a
  // byte that is not part of well-formed UTF-8 becomes the text \xNN (upper
  // case hex), so the exposition is always valid UTF-8.
  static std::string EscapeLabelValue(std::string_view value);
  // Any character outside [a-zA-Z0-9_:] (or a leading digit) becomes '_'.
  static std::string SanitizeName(std::string_view name);

 private:
  void Begin(std::string name, std::string_view type, std::string_view help);
  void WriteSample(std::string_view suffix, const PrometheusLabels& labels,
                   std::string_view extra_label, std::string_view extra_value,
                   std::string_view value);

  std::string out_;
  std::string family_;  // the open family's full name (with _total for counters)
  PrometheusLabels const_labels_;
};

// Writes `<prefix>_requests_total{op,code}` (one sample per code answered)
// and the `<prefix>_request_duration_seconds{op}` histogram.
void WriteRequestMetrics(PrometheusWriter& writer, std::string_view prefix,
                         const RequestMetrics& metrics);

// Writes the mooncake_rpc_* families of one process's RPC server:
// connections (gauge), accepted/refused connections, connections closed idle
// and rejected frames by reason.
void WriteRpcServerMetrics(PrometheusWriter& writer, const RpcServerStats& stats);
// Counters of a process's RPC server, read on each /metrics request.
using RpcStatsFn = std::function<RpcServerStats()>;

}  // namespace mooncake
