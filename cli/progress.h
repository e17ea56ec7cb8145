#pragma once

// A one-line progress bar with transfer rate, drawn on stderr. It draws only
// when stderr is a terminal and the transfer is large enough to be worth
// watching, so pipes and logs never see carriage returns.
//
// Thread-safety: not thread-safe; one transfer drives one bar.

#include <chrono>
#include <cstdint>
#include <string>

namespace mooncake::cli {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Called after each chunk; the total may first be known here (get).
  void Update(uint64_t done, uint64_t total);
  // Draws the final state and ends the line, if anything was drawn.
  void Finish();

 private:
  void Draw(uint64_t done, uint64_t total);

  const std::string label_;
  const bool terminal_;
  const std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_{};
  uint64_t done_ = 0;
  uint64_t total_ = 0;
  bool drawn_ = false;
  bool finished_ = false;
};

}  // namespace mooncake::cli
