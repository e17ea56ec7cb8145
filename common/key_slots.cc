#include "common/key_slots.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <optional>

namespace mooncake {
namespace {

// The CRC16-XMODEM table, built at compile time: one lookup per key byte.
constexpr std::array<uint16_t, 256> MakeCrc16Table() {
  std::array<uint16_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint16_t crc = static_cast<uint16_t>(i << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = static_cast<uint16_t>((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    table[i] = crc;
  }
  return table;
}

constexpr std::array<uint16_t, 256> kCrc16Table = MakeCrc16Table();

Result<SlotTable> Invalid(std::string* why, std::string text) {
  if (why) *why = std::move(text);
  return Err(ErrorCode::kInvalidParams);
}

// A whole decimal number in `text`; nullopt for empty text, signs, other
// characters or overflow.
std::optional<uint32_t> ParseNumber(std::string_view text) {
  uint32_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// HOST:PORT with a non-empty host free of spaces and a port in 1..65535.
bool ValidAddress(std::string_view address) {
  size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  std::string_view host = address.substr(0, colon);
  if (host.find_first_of(" \t=,") != std::string_view::npos) return false;
  auto port = ParseNumber(address.substr(colon + 1));
  return port && *port >= 1 && *port <= 65535;
}

std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

// One "FIRST-LAST" or "SLOT" entry; false (and why) when malformed.
bool ParseRange(std::string_view text, SlotRange& range, std::string* why) {
  size_t dash = text.find('-');
  auto first = ParseNumber(text.substr(0, dash));
  auto last = dash == std::string_view::npos ? first : ParseNumber(text.substr(dash + 1));
  if (!first || !last) {
    if (why) *why = "slot range '" + std::string(text) + "' is not FIRST-LAST or SLOT";
    return false;
  }
  if (*first > *last || *last >= kKeySlots) {
    if (why) {
      *why = "slot range '" + std::string(text) + "' must satisfy FIRST <= LAST < " +
             std::to_string(kKeySlots);
    }
    return false;
  }
  range.first = *first;
  range.last = *last;
  return true;
}

}  // namespace

uint16_t Crc16Xmodem(std::string_view data) {
  uint16_t crc = 0;
  for (unsigned char byte : data) {
    crc = static_cast<uint16_t>((crc << 8) ^ kCrc16Table[((crc >> 8) ^ byte) & 0xff]);
  }
  return crc;
}

uint32_t KeySlot(std::string_view key) {
  size_t open = key.find('{');
  if (open != std::string_view::npos) {
    size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return Crc16Xmodem(key) % kKeySlots;
}

Result<SlotTable> SlotTable::Even(uint32_t shards, std::vector<std::string> addresses) {
  if (shards == 0 || shards > kKeySlots) return Err(ErrorCode::kInvalidParams);
  if (!addresses.empty() && addresses.size() != shards) return Err(ErrorCode::kInvalidParams);
  SlotTable table;
  table.addresses_ = addresses.empty() ? std::vector<std::string>(shards) : std::move(addresses);
  // The first kKeySlots % shards shards take one slot more.
  uint32_t base = kKeySlots / shards, extra = kKeySlots % shards, first = 0;
  for (uint32_t s = 0; s < shards; ++s) {
    uint32_t size = base + (s < extra ? 1 : 0);
    table.ranges_.push_back({first, first + size - 1, s});
    first += size;
  }
  table.BuildOwners();
  return table;
}

Result<SlotTable> SlotTable::Parse(std::string_view text, std::string* why) {
  SlotTable table;
  std::vector<SlotRange> ranges;
  for (size_t start = 0; start <= text.size();) {
    size_t comma = std::min(text.find(',', start), text.size());
    std::string_view entry = Trim(text.substr(start, comma - start));
    start = comma + 1;
    size_t eq = entry.find('=');
    if (eq == std::string_view::npos) {
      return Invalid(why, "slot table entry '" + std::string(entry) + "' is not RANGE=HOST:PORT");
    }
    SlotRange range;
    if (!ParseRange(Trim(entry.substr(0, eq)), range, why)) return Err(ErrorCode::kInvalidParams);
    std::string address(Trim(entry.substr(eq + 1)));
    if (!ValidAddress(address)) {
      return Invalid(why, "slot table address '" + address + "' is not HOST:PORT");
    }
    auto known = std::ranges::find(table.addresses_, address);
    range.shard = static_cast<uint32_t>(known - table.addresses_.begin());
    if (known == table.addresses_.end()) table.addresses_.push_back(std::move(address));
    ranges.push_back(range);
  }
  std::ranges::sort(ranges, {}, &SlotRange::first);
  uint32_t next = 0;  // the first slot no range has covered yet
  for (const SlotRange& r : ranges) {
    if (r.first < next) {
      return Invalid(why, "slot " + std::to_string(r.first) + " is assigned twice (overlap)");
    }
    if (r.first > next) {
      return Invalid(why, "slots " + std::to_string(next) + "-" + std::to_string(r.first - 1) +
                              " have no shard (gap)");
    }
    next = r.last + 1;
    // Adjacent ranges of one shard become one, so Format prints it once.
    if (!table.ranges_.empty() && table.ranges_.back().shard == r.shard) {
      table.ranges_.back().last = r.last;
    } else {
      table.ranges_.push_back(r);
    }
  }
  if (next < kKeySlots) {
    return Invalid(why, "slots " + std::to_string(next) + "-" + std::to_string(kKeySlots - 1) +
                            " have no shard (gap)");
  }
  table.BuildOwners();
  return table;
}

std::string SlotTable::Format() const {
  std::string out;
  for (const SlotRange& r : ranges_) {
    if (!out.empty()) out += ',';
    out += std::to_string(r.first) + "-" + std::to_string(r.last) + "=";
    const std::string& address = addresses_[r.shard];
    out += address.empty() ? "#" + std::to_string(r.shard) : address;
  }
  return out;
}

void SlotTable::BuildOwners() {
  owner_.assign(kKeySlots, 0);
  for (const SlotRange& r : ranges_) {
    std::fill(owner_.begin() + r.first, owner_.begin() + r.last + 1,
              static_cast<uint16_t>(r.shard));
  }
}

}  // namespace mooncake
