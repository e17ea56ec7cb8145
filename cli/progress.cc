#include "cli/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "cli/cli_args.h"

namespace mooncake::cli {
namespace {

constexpr int kBarWidth = 30;
// Redrawing faster than the eye reads only costs terminal bandwidth.
constexpr auto kRedrawInterval = std::chrono::milliseconds(100);

}  // namespace

ProgressBar::ProgressBar(std::string label)
    : label_(std::move(label)),
      terminal_(isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()) {}

ProgressBar::~ProgressBar() { Finish(); }

void ProgressBar::Update(uint64_t done, uint64_t total) {
  done_ = done;
  total_ = total;
  if (!terminal_ || total <= kProgressThresholdBytes) return;
  auto now = std::chrono::steady_clock::now();
  if (drawn_ && now - last_draw_ < kRedrawInterval && done < total) return;
  last_draw_ = now;
  Draw(done, total);
}

void ProgressBar::Finish() {
  if (finished_) return;
  finished_ = true;
  if (!drawn_) return;
  Draw(done_, total_);
  std::fputc('\n', stderr);
  std::fflush(stderr);
}

void ProgressBar::Draw(uint64_t done, uint64_t total) {
  drawn_ = true;
  double fraction = total ? std::min(1.0, static_cast<double>(done) / total) : 1.0;
  int filled = static_cast<int>(fraction * kBarWidth);
  std::string bar(filled, '#');
  bar.resize(kBarWidth, '.');
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  uint64_t rate = seconds > 0 ? static_cast<uint64_t>(done / seconds) : 0;
  std::fprintf(stderr, "\r%s [%s] %3d%% %s / %s  %s/s\x1b[K", label_.c_str(), bar.c_str(),
               static_cast<int>(fraction * 100), FormatBytes(done).c_str(),
               FormatBytes(total).c_str(), FormatBytes(rate).c_str());
  std::fflush(stderr);
}

}  // namespace mooncake::cli
