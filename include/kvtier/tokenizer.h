// Tokenizers that turn the text of a trace (chat messages, agent steps) into token ids, so
// that replay keys blocks the way an engine would.
//
// Two kinds:
//  - LoadHfTokenizer: a real byte-level BPE loaded from a Hugging Face tokenizer.json
//    (GPT-2, Llama-3, Qwen2 and others with model.type "BPE" and a ByteLevel pre-tokenizer).
//    It splits added (special) tokens first, pre-tokenizes with the model's regex (the GPT-2
//    or the Llama-3 / GPT-4 / Qwen2 pattern, matched by hand: see byte_level_pretokenizer.h),
//    maps bytes through GPT-2's byte-to-unicode table and applies merges by rank, lowest
//    first. The ids equal the Hugging Face tokenizer's for the same text, except where the
//    Unicode tables differ (kind() names the table in use) and for the features listed in
//    docs/traces.md (normalizers other than NFC-on-NFC-text, lstrip/rstrip on added tokens).
//  - NewApproximateTokenizer: no vocabulary; a documented pre-tokenizer that splits text into
//    words, numbers, punctuation and whitespace, cuts each piece into chunks of a few bytes
//    and hashes each chunk to an id. Deterministic and fast; counts are within tens of
//    percent of a real tokenizer on English text, and equal text always gives equal ids, so
//    prefix reuse is preserved. Its kind() is "approximate".
//
// Thread-safety: a Tokenizer is immutable after creation; Encode may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The token ids of `text`. Never fails: bytes the vocabulary lacks fall back to byte
  // tokens or the unknown token (LoadHfTokenizer refuses vocabularies that have neither).
  // Invalid UTF-8 is tokenized byte by byte.
  virtual std::vector<uint32_t> Encode(std::string_view text) const = 0;

  // What produced the ids, for trace headers and reports: "hf-bpe:<file> (...)" or
  // "approximate".
  virtual std::string_view kind() const = 0;
};

// Loads a byte-level BPE tokenizer.json. Errors name the file and what is unsupported
// (a non-BPE model, an unknown pre-tokenizer regex, a merge whose parts are not in the vocab).
Result<std::unique_ptr<Tokenizer>> LoadHfTokenizer(const std::string& path);
// The same from the document's text; `source` names it in errors and in kind().
Result<std::unique_ptr<Tokenizer>> ParseHfTokenizer(std::string_view json_text, std::string_view source);

struct ApproximateTokenizerOptions {
  // Ids are hashes of chunks reduced modulo this. Default: 2^17 (Llama-3's vocabulary is 128,256).
  uint32_t vocab_size = 1u << 17;

  Status Validate() const;
};

// The approximate tokenizer (see the opening comment; the exact rules are in docs/traces.md).
Result<std::unique_ptr<Tokenizer>> NewApproximateTokenizer(const ApproximateTokenizerOptions& options = {});

}  // namespace kvtier
