#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kvtier/tokenizer.h"
#include "replay/byte_level_pretokenizer.h"
#include "testing/test_paths.h"

namespace kvtier {
namespace {

using nlohmann::json;

const std::string kFixtures = testing::FixturesDir() + "/traces";

// GPT-2's byte-to-unicode alphabet: printable Latin-1 bytes are themselves, the others U+0100
// upward; 'Ġ' (U+0120) is the space. Bytes in `skip` (ASCII) are left out of the vocabulary.
json ByteVocab(uint32_t& next_id, const std::string& skip = "") {
  json vocab = json::object();
  uint32_t extra = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const uint32_t cp = printable ? b : extra++;
    std::string c;
    if (cp < 0x80) {
      c += static_cast<char>(cp);
    } else {
      c += static_cast<char>(0xC0 | (cp >> 6));
      c += static_cast<char>(0x80 | (cp & 0x3F));
    }
    if (b < 0x80 && skip.find(static_cast<char>(b)) != std::string::npos) continue;
    vocab[c] = next_id++;
  }
  return vocab;
}

json Llama3PreTokenizer() {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern",
              {{"Regex",
                R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
}

// A tokenizer.json over printable ASCII plus the given merges (each adds its result to the vocab).
json MakeDoc(const std::vector<std::pair<std::string, std::string>>& merges, json model_extra = json::object(),
             const std::string& skip = "") {
  uint32_t next = 0;
  json vocab = ByteVocab(next, skip);
  json merge_list = json::array();
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
    merge_list.push_back({a, b});
  }
  json model = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}};
  model.update(model_extra);
  return {{"model", model}, {"pre_tokenizer", Llama3PreTokenizer()}, {"normalizer", nullptr}};
}

std::vector<std::string> Pieces(const Tokenizer& tok, const json& doc, std::string_view text) {
  std::map<uint32_t, std::string> by_id;
  for (const auto& [piece, id] : doc["model"]["vocab"].items()) by_id[id.get<uint32_t>()] = piece;
  std::vector<std::string> out;
  for (uint32_t id : tok.Encode(text)) out.push_back(by_id.count(id) ? by_id[id] : "#" + std::to_string(id));
  return out;
}

std::unique_ptr<Tokenizer> Parse(const json& doc) {
  auto tok = ParseHfTokenizer(doc.dump(), "test.json");
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  return tok.ok() ? std::move(tok).value() : nullptr;
}

TEST(BpeTokenizer, FixtureMatchesAnIndependentReferenceEncoder) {
  auto tok = LoadHfTokenizer(kFixtures + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_NE((*tok)->kind().find("hf-bpe:"), std::string_view::npos);
  EXPECT_NE((*tok)->kind().find("llama3"), std::string_view::npos);
  std::ifstream in(kFixtures + "/tokenizer_expected.json");
  const json expected = json::parse(in);
  ASSERT_GE(expected.size(), 5u);
  for (const json& sample : expected) {
    const std::string text = sample["text"].get<std::string>();
    EXPECT_EQ((*tok)->Encode(text), sample["ids"].get<std::vector<uint32_t>>()) << text;
  }
}

TEST(BpeTokenizer, MergesApplyByRankNotByPosition) {
  // Same merges, opposite ranks: "abc" ends as [ab, c] or [a, bc].
  const json ab_first = MakeDoc({{"a", "b"}, {"b", "c"}});
  const json bc_first = MakeDoc({{"b", "c"}, {"a", "b"}});
  EXPECT_EQ(Pieces(*Parse(ab_first), ab_first, "abc"), (std::vector<std::string>{"ab", "c"}));
  EXPECT_EQ(Pieces(*Parse(bc_first), bc_first, "abc"), (std::vector<std::string>{"a", "bc"}));
  // A later merge builds on an earlier result.
  const json chain = MakeDoc({{"b", "c"}, {"a", "bc"}});
  EXPECT_EQ(Pieces(*Parse(chain), chain, "abcbc"), (std::vector<std::string>{"abc", "bc"}));
}

TEST(BpeTokenizer, EqualRanksMergeLeftmostFirst) {
  const json doc = MakeDoc({{"a", "a"}});
  EXPECT_EQ(Pieces(*Parse(doc), doc, "aaa"), (std::vector<std::string>{"aa", "a"}));
  EXPECT_EQ(Pieces(*Parse(doc), doc, "aaaa"), (std::vector<std::string>{"aa", "aa"}));
}

TEST(BpeTokenizer, MergesNeverCrossPreTokens) {
  const json doc = MakeDoc({{"a", "\xC4\xA0"}, {"\xC4\xA0", "b"}});
  // " b" is one pre-token (space joins the word); "a" another: no 'aĠ'.
  EXPECT_EQ(Pieces(*Parse(doc), doc, "a b"), (std::vector<std::string>{"a", "\xC4\xA0" "b"}));
}

TEST(BpeTokenizer, AddedTokensSplitFirstLongestMatch) {
  json doc = MakeDoc({{"h", "i"}});
  doc["added_tokens"] = {{{"id", 1000}, {"content", "<|im_start|>"}, {"special", true}},
                         {{"id", 1001}, {"content", "<|im"}, {"special", true}}};
  auto tok = Parse(doc);
  const std::vector<uint32_t> ids = tok->Encode("hi<|im_start|>hi<|imhi");
  const uint32_t hi = doc["model"]["vocab"]["hi"].get<uint32_t>();
  EXPECT_EQ(ids, (std::vector<uint32_t>{hi, 1000, hi, 1001, hi}));
}

TEST(BpeTokenizer, ByteFallbackAndUnknownToken) {
  // 'z' is missing from the vocabulary.
  json with_fallback = MakeDoc({}, {{"byte_fallback", true}}, "z");
  uint32_t next = 5000;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    with_fallback["model"]["vocab"][name] = next++;
  }
  auto tok = Parse(with_fallback);
  EXPECT_EQ(tok->Encode("z"), (std::vector<uint32_t>{5000 + 0x7A}));

  json with_unk = MakeDoc({}, {{"unk_token", "<unk>"}}, "z");
  with_unk["model"]["vocab"]["<unk>"] = 7777;
  EXPECT_EQ(Parse(with_unk)->Encode("zz"), (std::vector<uint32_t>{7777, 7777}));

  // Neither: refused at load, since Encode could not represent 'z'.
  auto neither = ParseHfTokenizer(MakeDoc({}, json::object(), "z").dump(), "t.json");
  ASSERT_FALSE(neither.ok());
  EXPECT_NE(neither.status().message().find("byte_fallback"), std::string::npos);
}

TEST(BpeTokenizer, IgnoreMergesTakesWholeWordsFromTheVocab) {
  json doc = MakeDoc({{"a", "b"}, {"b", "c"}}, {{"ignore_merges", true}});
  doc["model"]["vocab"]["abc"] = 9000;
  EXPECT_EQ(Parse(doc)->Encode("abc"), (std::vector<uint32_t>{9000}));
}

TEST(BpeTokenizer, Gpt2ByteLevelPreTokenizerAndPrefixSpace) {
  json doc = MakeDoc({{"\xC4\xA0", "a"}});
  doc["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  auto tok = Parse(doc);
  EXPECT_NE(tok->kind().find("gpt2"), std::string_view::npos);
  EXPECT_EQ(Pieces(*tok, doc, "a"), (std::vector<std::string>{"\xC4\xA0" "a"}));
}

TEST(BpeTokenizer, ArrayAndStringMergesAreEquivalent) {
  json doc = MakeDoc({{"a", "b"}});
  json as_strings = doc;
  as_strings["model"]["merges"] = {"a b"};
  EXPECT_EQ(Parse(doc)->Encode("abab"), Parse(as_strings)->Encode("abab"));
}

TEST(BpeTokenizer, RefusesWhatItCannotReproduce) {
  json doc = MakeDoc({});
  doc["pre_tokenizer"] = {{"type", "Metaspace"}};
  auto metaspace = ParseHfTokenizer(doc.dump(), "t.json");
  ASSERT_FALSE(metaspace.ok());
  EXPECT_EQ(metaspace.status().code(), StatusCode::kUnsupported);

  json odd_regex = MakeDoc({});
  odd_regex["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
  EXPECT_EQ(ParseHfTokenizer(odd_regex.dump(), "t.json").status().code(), StatusCode::kUnsupported);

  json wordpiece = MakeDoc({});
  wordpiece["model"]["type"] = "WordPiece";
  EXPECT_EQ(ParseHfTokenizer(wordpiece.dump(), "t.json").status().code(), StatusCode::kUnsupported);

  json bad_merge = MakeDoc({});
  bad_merge["model"]["merges"] = json::array({json::array({"a", "NOT-IN-VOCAB"})});
  auto bad = ParseHfTokenizer(bad_merge.dump(), "t.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("merges[0]"), std::string::npos);

  json wrong_type = MakeDoc({});
  wrong_type["model"]["type"] = 7;
  EXPECT_FALSE(ParseHfTokenizer(wrong_type.dump(), "t.json").ok());
  EXPECT_FALSE(ParseHfTokenizer("{not json", "t.json").ok());
  EXPECT_EQ(LoadHfTokenizer("/nonexistent/tokenizer.json").status().code(), StatusCode::kNotFound);
}

TEST(BpeTokenizer, LongWordsMergeInLinearithmicTime) {
  json doc = MakeDoc({{"a", "a"}, {"aa", "aa"}});
  const std::string word(200000, 'a');
  const std::vector<uint32_t> ids = Parse(doc)->Encode(word);
  EXPECT_EQ(ids.size(), 50000u);
}

TEST(ApproximateTokenizer, DeterministicAndRoughlyWordSized) {
  auto tok = NewApproximateTokenizer();
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ((*tok)->kind(), "approximate");
  const std::string text = "The quick brown fox jumps over the lazy dog.";
  EXPECT_EQ((*tok)->Encode(text), (*tok)->Encode(text));
  EXPECT_EQ((*tok)->Encode(text).size(), 10u);  // 9 words + '.'
  EXPECT_TRUE((*tok)->Encode("").empty());
  EXPECT_EQ((*tok)->Encode("1234567").size(), 3u);        // 3-digit chunks
  EXPECT_EQ((*tok)->Encode(" tokenization").size(), 2u);  // 8-byte chunks
  // Chat markers are one token each, also after a space.
  EXPECT_EQ((*tok)->Encode("<|im_start|>user\n").size(), 3u);
  EXPECT_EQ((*tok)->Encode("a <|im_end|>").size(), 3u);
  // A prefix of words encodes to a prefix of ids.
  const auto whole = (*tok)->Encode("hello world again");
  const auto head = (*tok)->Encode("hello world");
  EXPECT_TRUE(std::equal(head.begin(), head.end(), whole.begin()));
  for (uint32_t id : (*tok)->Encode("東京 Café ☃ \x01\xff")) EXPECT_LT(id, 1u << 17);
  EXPECT_FALSE(NewApproximateTokenizer({.vocab_size = 10}).ok());
}

}  // namespace
}  // namespace kvtier
