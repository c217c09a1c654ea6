// The pre-tokenizer split of byte-level BPE tokenizers: the regexes of GPT-2 and of
// Llama-3 / GPT-4 (cl100k) / Qwen2, matched by hand because std::regex has no \p{L} and no
// PCRE2 headers are installed here. Each function follows its regex alternative by
// alternative, with the same greedy and backtracking outcome (comments quote the regex).
//
// The classes \p{L}, \p{N} and \s come from ICU when the build found it, and otherwise from
// a built-in table of the ranges that are not letters (numbers, spaces, punctuation, symbols,
// marks of the common scripts); every code point the table does not list counts as a letter.
// UnicodeTablesName() says which is in use.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace kvtier::replay {

enum class PreTokenizerPattern {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // Llama-3's with \p{N} instead of \p{N}{1,3}: one digit per pre-token.
  kQwen2,
};

std::string_view PreTokenizerPatternName(PreTokenizerPattern pattern);

// The pattern a tokenizer.json Split regex spells, or nullopt when it is none of the above.
std::optional<PreTokenizerPattern> RecognizePreTokenizerRegex(std::string_view regex);

// Splits `text` into consecutive pieces that cover it exactly. Invalid UTF-8 bytes count as
// single non-letter, non-number, non-space characters.
std::vector<std::string_view> PreTokenize(std::string_view text, PreTokenizerPattern pattern);

enum class CharClass { kLetter, kNumber, kSpace, kOther };
CharClass ClassifyCodePoint(char32_t c);
std::string_view UnicodeTablesName();  // "icu" or "built-in"

// True when the built-in table's ranges are sorted and disjoint (a unit test checks it).
bool BuiltinUnicodeTableIsSorted();

}  // namespace kvtier::replay
