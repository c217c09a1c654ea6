#include "replay/byte_level_pretokenizer.h"

#include <string>

#include <gtest/gtest.h>

namespace kvtier::replay {
namespace {

std::vector<std::string> Split(std::string_view text, PreTokenizerPattern pattern) {
  std::vector<std::string> out;
  for (std::string_view piece : PreTokenize(text, pattern)) out.emplace_back(piece);
  return out;
}

using V = std::vector<std::string>;

// Expected splits are Python `regex.findall(<pattern>, text)` results.
TEST(PreTokenizer, Llama3PatternMatchesTheRegex) {
  EXPECT_EQ(Split("Hello world's   test\n\n  123456 !!", PreTokenizerPattern::kLlama3),
            (V{"Hello", " world", "'s", "  ", " test", "\n\n", " ", " ", "123", "456", " !!"}));
  EXPECT_EQ(Split("I'LL (see) x\r\n", PreTokenizerPattern::kLlama3), (V{"I", "'LL", " (", "see", ")", " x", "\r\n"}));
  EXPECT_EQ(Split("a\n  b", PreTokenizerPattern::kLlama3), (V{"a", "\n", " ", " b"}));
  EXPECT_EQ(Split("x  ", PreTokenizerPattern::kLlama3), (V{"x", "  "}));
  EXPECT_EQ(Split("{\n\"k\": 1}", PreTokenizerPattern::kLlama3), (V{"{\n", "\"k", "\":", " ", "1", "}"}));
  EXPECT_EQ(Split("Café 東京12", PreTokenizerPattern::kLlama3), (V{"Café", " 東京", "12"}));
}

TEST(PreTokenizer, Gpt2AndQwen2Patterns) {
  EXPECT_EQ(Split("Hello world's   test 123456 !!", PreTokenizerPattern::kGpt2),
            (V{"Hello", " world", "'s", "  ", " test", " 123456", " !!"}));
  EXPECT_EQ(Split("I'LL", PreTokenizerPattern::kGpt2), (V{"I", "'", "LL"}));  // case-sensitive
  EXPECT_EQ(Split("1234", PreTokenizerPattern::kQwen2), (V{"1", "2", "3", "4"}));
}

TEST(PreTokenizer, PiecesCoverTheTextEvenWhenInvalid) {
  const std::string text = "ok \xff\xfe bad \xe6\x9d utf8\xc3";
  std::string joined;
  for (std::string_view piece : PreTokenize(text, PreTokenizerPattern::kLlama3)) joined += piece;
  EXPECT_EQ(joined, text);
}

TEST(PreTokenizer, RecognizesTheRegexesOfTokenizerFiles) {
  EXPECT_EQ(RecognizePreTokenizerRegex(
                R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"),
            PreTokenizerPattern::kQwen2);
  EXPECT_FALSE(RecognizePreTokenizerRegex("\\w+").has_value());
}

TEST(PreTokenizer, UnicodeClasses) {
  EXPECT_TRUE(BuiltinUnicodeTableIsSorted());
  EXPECT_EQ(ClassifyCodePoint(U'é'), CharClass::kLetter);
  EXPECT_EQ(ClassifyCodePoint(U'中'), CharClass::kLetter);
  EXPECT_EQ(ClassifyCodePoint(U'٣'), CharClass::kNumber);
  EXPECT_EQ(ClassifyCodePoint(U'\u00A0'), CharClass::kSpace);
  EXPECT_EQ(ClassifyCodePoint(U'—'), CharClass::kOther);
  EXPECT_EQ(ClassifyCodePoint(U'😀'), CharClass::kOther);
  EXPECT_EQ(ClassifyCodePoint(U'\u0301'), CharClass::kOther);  // a combining mark is not \p{L}
}

}  // namespace
}  // namespace kvtier::replay
