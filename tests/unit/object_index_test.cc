// ObjectIndex (worker/object_index.h), the worker's key -> record table: it
// agrees with std::unordered_map over random inserts and erases (the
// backward-shift deletion keeps every key reachable), records never move
// while the table grows and shrinks, and tables past 2 MiB (kernel memory
// with huge-page advice) behave as small ones.

#include "worker/object_index.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace mooncake {
namespace {

struct Record {
  std::string key_bytes;
  int value = 0;
  std::string_view key() const { return key_bytes; }
  static void Destroy(Record* record) { delete record; }
};

std::pair<Record*, bool> Insert(ObjectIndex<Record>& index, const std::string& key, int value) {
  return index.FindOrInsert(key, [&] { return new Record{key, value}; });
}

TEST(ObjectIndexTest, FindsWhatWasInsertedAndNothingElse) {
  ObjectIndex<Record> index;
  EXPECT_EQ(index.Find("absent"), nullptr);
  EXPECT_FALSE(index.Erase("absent"));
  auto [added, inserted] = Insert(index, "k", 1);
  ASSERT_TRUE(inserted);
  EXPECT_EQ(added->key(), "k");
  EXPECT_EQ(index.Find("k"), added);
  EXPECT_EQ(index.Find("k2"), nullptr);
  EXPECT_EQ(index.Find(std::string("k\0", 2)), nullptr);  // bytes, not C strings
  EXPECT_EQ(index.size(), 1u);
}

TEST(ObjectIndexTest, InsertOfAPresentKeyKeepsTheRecordAndMakesNothing) {
  ObjectIndex<Record> index;
  Record* first = Insert(index, "k", 1).first;
  bool made = false;
  auto [found, inserted] = index.FindOrInsert("k", [&] {
    made = true;
    return new Record{"k", 2};
  });
  EXPECT_FALSE(inserted);
  EXPECT_FALSE(made);
  EXPECT_EQ(found, first);
  EXPECT_EQ(found->value, 1);
  EXPECT_EQ(index.size(), 1u);
}

// ObjectTable keeps a soft pin's end by its key's hash and record id, not by
// pointer: the lookup finds the record while it lives and nothing after.
TEST(ObjectIndexTest, FindHashedFindsAMatchingRecordUnderTheHashUntilItIsErased) {
  ObjectIndex<Record> index;
  EXPECT_EQ(index.FindHashed(ObjectKeyHash("k"), [](const Record&) { return true; }), nullptr);
  for (int i = 0; i < 200; ++i) Insert(index, "k" + std::to_string(i), i);
  const uint64_t hash = ObjectKeyHash("k7");
  auto value_is = [](int value) { return [value](const Record& r) { return r.value == value; }; };
  EXPECT_EQ(index.FindHashed(hash, value_is(7)), index.Find("k7"));
  EXPECT_EQ(index.FindHashed(hash, value_is(8)), nullptr);  // k8 lives under another hash
  ASSERT_TRUE(index.Erase("k7"));
  EXPECT_EQ(index.FindHashed(hash, value_is(7)), nullptr);
  Insert(index, "k7", 70);  // a new record under the same key
  EXPECT_EQ(index.FindHashed(hash, value_is(7)), nullptr);
  EXPECT_EQ(index.FindHashed(hash, value_is(70)), index.Find("k7"));
}

// Random inserts and erases over a small key space, so that probe runs form,
// wrap around the table's end and are cut by erasures, checked against
// std::unordered_map after every step.
TEST(ObjectIndexTest, AgreesWithAMapOverRandomInsertsAndErases) {
  ObjectIndex<Record> index;
  std::unordered_map<std::string, Record*> model;
  std::mt19937 rng(12345);
  for (int step = 0; step < 60000; ++step) {
    // Phases that fill and drain the table, so it grows and shrinks.
    const bool filling = (step / 10000) % 2 == 0;
    std::string key = "key-" + std::to_string(rng() % 3000);
    if (rng() % 100 < (filling ? 70u : 30u)) {
      auto [record, inserted] = Insert(index, key, step);
      auto [it, model_inserted] = model.try_emplace(key, record);
      ASSERT_EQ(inserted, model_inserted) << key;
      ASSERT_EQ(record, it->second) << "a record moved: " << key;
    } else {
      ASSERT_EQ(index.Erase(key), model.erase(key) == 1) << key;
    }
    ASSERT_EQ(index.size(), model.size());
    if (step % 997 == 0) {
      for (const auto& [k, record] : model) ASSERT_EQ(index.Find(k), record) << k;
      size_t visited = 0;
      index.ForEach([&](Record& record) {
        ++visited;
        EXPECT_EQ(model.at(std::string(record.key())), &record);
      });
      ASSERT_EQ(visited, model.size());
    }
  }
}

// FindMany answers each key as Find does, across its runs of 16 keys, for
// present, absent and repeated keys.
TEST(ObjectIndexTest, FindManyAnswersEachKeyAsFindDoes) {
  ObjectIndex<Record> index;
  for (int i = 0; i < 500; i += 2) Insert(index, "many-" + std::to_string(i), i);
  std::vector<std::string> keys;
  for (int i = 0; i < 70; ++i) keys.push_back("many-" + std::to_string(i * 7 % 500));
  keys.push_back("many-0");  // twice in one batch
  keys.push_back("");
  std::vector<Record*> found(keys.size(), nullptr);
  std::vector<int> calls(keys.size(), 0);
  index.FindMany(std::span<const std::string>(keys), [&](size_t i, Record* record) {
    found[i] = record;
    ++calls[i];
  });
  for (size_t i = 0; i < keys.size(); ++i) ASSERT_EQ(calls[i], 1) << "key " << i;
  int present = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(found[i], index.Find(keys[i])) << keys[i];
    present += found[i] != nullptr;
  }
  EXPECT_GT(present, 30);
  EXPECT_LT(present, static_cast<int>(keys.size()) - 30);

  ObjectIndex<Record> empty;
  std::vector<Record*> none(keys.size(), reinterpret_cast<Record*>(1));
  empty.FindMany(std::span<const std::string>(keys),
                 [&](size_t i, Record* record) { none[i] = record; });
  for (Record* record : none) EXPECT_EQ(record, nullptr);
}

// Past 2 MiB of slots (131,072 of 16 bytes) the table is kernel memory;
// growing into it, shrinking out of it and freeing it keep every record.
TEST(ObjectIndexTest, LargeTablesGrowAndShrinkKeepingEveryRecord) {
  ObjectIndex<Record> index;
  constexpr int kKeys = 200000;
  std::vector<Record*> records;
  records.reserve(kKeys);
  for (int i = 0; i < kKeys; ++i) {
    records.push_back(Insert(index, "big-" + std::to_string(i), i).first);
  }
  EXPECT_GE(index.table_bytes(), size_t{2} << 20);
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_EQ(index.Find("big-" + std::to_string(i)), records[i]) << i;
  }
  for (int i = 0; i < kKeys - 100; ++i) ASSERT_TRUE(index.Erase("big-" + std::to_string(i)));
  EXPECT_LT(index.table_bytes(), size_t{2} << 20) << "the table did not shrink";
  for (int i = kKeys - 100; i < kKeys; ++i) {
    Record* record = index.Find("big-" + std::to_string(i));
    ASSERT_EQ(record, records[i]) << i;
    EXPECT_EQ(record->value, i);
  }
  EXPECT_EQ(index.Find("big-0"), nullptr);
  EXPECT_EQ(index.size(), 100u);
}

}  // namespace
}  // namespace mooncake
