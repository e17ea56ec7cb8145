#include "http/prometheus_writer.h"

#include <cctype>
#include <charconv>
#include <cmath>

namespace mooncake {
namespace {

// Prometheus parses Go floats: "+Inf", "-Inf", "NaN" and decimal or exponent
// forms. The general format gives what Go's client writes (%g, shortest
// round-trip): le="0.0001" and le="5e-05", so bucket labels match the ones
// other exporters use.
std::string FormatDouble(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::general);
  return ec == std::errc() ? std::string(buf, end) : "NaN";
}

// HELP text escapes only backslash and newline.
std::string EscapeHelp(std::string_view help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// The length of the well-formed UTF-8 sequence at the start of `s` (RFC 3629:
// no overlong forms, no surrogates, nothing above U+10FFFF), or 0 if none.
size_t Utf8SequenceLength(std::string_view s) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    len = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    len = 3;
    if (lead == 0xE0) lo = 0xA0;  // overlong
    if (lead == 0xED) hi = 0x9F;  // surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    len = 4;
    if (lead == 0xF0) lo = 0x90;  // overlong
    if (lead == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (s.size() < len || byte(1) < lo || byte(1) > hi) return 0;
  for (size_t i = 2; i < len; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  }
  return len;
}

}  // namespace

std::string PrometheusWriter::EscapeLabelValue(std::string_view value) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(value.size());
  while (!value.empty()) {
    const char c = value.front();
    const size_t len = Utf8SequenceLength(value);
    if (len == 0) {
      // Prometheus rejects a whole scrape over one label value that is not
      // UTF-8, and a node id or tier name may be any bytes. The byte becomes
      // the text \xNN (its backslash escaped): valid UTF-8 and readable.
      // A value that holds that text itself reads the same (node ids are
      // chosen by the operator; telling them apart is not worth a stranger
      // escape).
      const auto b = static_cast<unsigned char>(c);
      out += "\\\\x";
      out += kHex[b >> 4];
      out += kHex[b & 0xF];
      value.remove_prefix(1);
      continue;
    }
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.append(value.data(), len);
    }
    value.remove_prefix(len);
  }
  return out;
}

std::string PrometheusWriter::SanitizeName(std::string_view name) {
  std::string out(name.empty() ? "_" : name);
  for (size_t i = 0; i < out.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(out[i]);
    bool ok = std::isalpha(c) || c == '_' || c == ':' || (i > 0 && std::isdigit(c));
    if (!ok) out[i] = '_';
  }
  return out;
}

void PrometheusWriter::Begin(std::string name, std::string_view type, std::string_view help) {
  family_ = std::move(name);
  out_ += "# HELP " + family_ + " " + EscapeHelp(help) + "\n";
  out_ += "# TYPE " + family_ + " " + std::string(type) + "\n";
}

void PrometheusWriter::BeginCounter(std::string_view name, std::string_view help) {
  Begin(SanitizeName(name) + "_total", "counter", help);
}

void PrometheusWriter::BeginGauge(std::string_view name, std::string_view help) {
  Begin(SanitizeName(name), "gauge", help);
}

void PrometheusWriter::BeginHistogram(std::string_view name, std::string_view help) {
  Begin(SanitizeName(name), "histogram", help);
}

void PrometheusWriter::WriteSample(std::string_view suffix, const PrometheusLabels& labels,
                                   std::string_view extra_label, std::string_view extra_value,
                                   std::string_view value) {
  out_ += family_;
  out_ += suffix;
  if (!const_labels_.empty() || !labels.empty() || !extra_label.empty()) {
    out_ += '{';
    bool first = true;
    auto add = [&](std::string_view name, std::string_view val) {
      if (!first) out_ += ',';
      first = false;
      out_ += SanitizeName(name) + "=\"" + EscapeLabelValue(val) + "\"";
    };
    for (const auto& [name, val] : const_labels_) add(name, val);
    for (const auto& [name, val] : labels) add(name, val);
    if (!extra_label.empty()) add(extra_label, extra_value);
    out_ += '}';
  }
  out_ += ' ';
  out_ += value;
  out_ += '\n';
}

void PrometheusWriter::Sample(const PrometheusLabels& labels, double value) {
  WriteSample("", labels, {}, {}, FormatDouble(value));
}

void PrometheusWriter::Sample(const PrometheusLabels& labels, uint64_t value) {
  WriteSample("", labels, {}, {}, std::to_string(value));
}

void PrometheusWriter::Histogram(const PrometheusLabels& labels,
                                 const HistogramSnapshot& histogram) {
  auto cumulative = histogram.Cumulative();
  for (size_t i = 0; i < kLatencyBucketBounds.size(); ++i) {
    WriteSample("_bucket", labels, "le", FormatDouble(kLatencyBucketBounds[i]),
                std::to_string(cumulative[i]));
  }
  WriteSample("_bucket", labels, "le", "+Inf", std::to_string(cumulative.back()));
  WriteSample("_sum", labels, {}, {}, FormatDouble(histogram.sum_seconds));
  WriteSample("_count", labels, {}, {}, std::to_string(histogram.count));
}

void PrometheusWriter::Counter(std::string_view name, std::string_view help, uint64_t value) {
  BeginCounter(name, help);
  Sample({}, value);
}

void PrometheusWriter::Gauge(std::string_view name, std::string_view help, double value) {
  BeginGauge(name, help);
  Sample({}, value);
}

void WriteRequestMetrics(PrometheusWriter& writer, std::string_view prefix,
                         const RequestMetrics& metrics) {
  auto ops = metrics.Snapshot();
  std::string name(prefix);
  writer.BeginCounter(name + "_requests", "Requests served, by operation and answered error code");
  for (const auto& op : ops) {
    for (const auto& [code, n] : op.codes) {
      writer.Sample({{"op", op.op}, {"code", std::string(ToString(code))}}, n);
    }
  }
  writer.BeginHistogram(name + "_request_duration_seconds",
                        "Time to serve a request, by operation");
  for (const auto& op : ops) writer.Histogram({{"op", op.op}}, op.latency);
}

void WriteRpcServerMetrics(PrometheusWriter& writer, const RpcServerStats& stats) {
  writer.Gauge("mooncake_rpc_connections", "RPC connections being served",
               static_cast<double>(stats.active_connections));
  writer.Counter("mooncake_rpc_accepted_connections", "RPC connections accepted and served",
                 stats.accepted_connections);
  writer.Counter("mooncake_rpc_refused_connections",
                 "RPC connections closed at once because --max-connections were being served",
                 stats.refused_connections);
  writer.Counter("mooncake_rpc_idle_closed_connections",
                 "RPC connections closed after --rpc-idle-timeout-ms without a request",
                 stats.fault_count(RpcFault::kIdleTimeout));
  writer.BeginCounter("mooncake_rpc_rejected_frames",
                      "RPC connections closed for a frame over a limit or undecodable, by reason");
  for (size_t i = 0; i < kRpcFaultCount; ++i) {
    auto fault = static_cast<RpcFault>(i);
    if (fault == RpcFault::kIdleTimeout) continue;
    writer.Sample({{"reason", std::string(RpcFaultName(fault))}}, stats.faults[i]);
  }
  writer.BeginCounter("mooncake_rpc_frame_polls",
                      "Waits for an RPC frame in this process (requests served, replies to its "
                      "calls) with --rpc-poll-us, by outcome: data (came while polling), "
                      "expired (slept after the poll), busy (no CPU spare, did not poll)");
  writer.Sample({{"outcome", "data"}}, stats.polls.data);
  writer.Sample({{"outcome", "expired"}}, stats.polls.expired);
  writer.Sample({{"outcome", "busy"}}, stats.polls.busy);
}

}  // namespace mooncake
