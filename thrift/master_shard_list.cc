#include "thrift/master_shard_list.h"

#include <utility>
#include <vector>

namespace mooncake {
namespace {

Result<SlotTable> Invalid(std::string* why, std::string message) {
  if (why) *why = std::move(message);
  return Err(ErrorCode::kInvalidParams);
}

std::vector<std::string> SplitList(std::string_view text) {
  std::vector<std::string> items;
  for (size_t begin = 0; begin <= text.size();) {
    size_t comma = text.find(',', begin);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view item = text.substr(begin, comma - begin);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    items.emplace_back(item);
    begin = comma + 1;
  }
  return items;
}

}  // namespace

Result<SlotTable> ParseMasterShards(std::string_view text, std::string* why) {
  if (text.find('=') != std::string_view::npos) return SlotTable::Parse(text, why);
  // A plain address list: an even split, written as the slot table it means
  // so that SlotTable::Parse checks every address.
  std::vector<std::string> addresses = SplitList(text);
  auto even = SlotTable::Even(static_cast<uint32_t>(addresses.size()));
  if (!even) return Invalid(why, "master shard list is empty or too long");
  std::string table;
  for (const SlotRange& range : even->ranges()) {
    if (!table.empty()) table += ',';
    table += std::to_string(range.first) + '-' + std::to_string(range.last) + '=' +
             addresses[range.shard];
  }
  auto parsed = SlotTable::Parse(table, why);
  if (!parsed) return parsed;
  if (parsed->shard_count() != addresses.size()) {
    return Invalid(why, "master shard list names an address twice");
  }
  return parsed;
}

}  // namespace mooncake
