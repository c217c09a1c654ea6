// A byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json (tokenizer.h).
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <queue>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvtier/tokenizer.h"
#include "replay/byte_level_pretokenizer.h"
#include "util/json_document.h"

namespace kvtier {
namespace {

using replay::PreTokenizerPattern;

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes map to themselves, the other 68 bytes
// to U+0100 upward in byte order, so that every byte is a visible character in the vocab.
std::array<std::string, 256> ByteLevelAlphabet() {
  std::array<std::string, 256> out;
  uint32_t next_extra = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const uint32_t cp = printable ? b : next_extra++;
    std::string utf8;
    if (cp < 0x80) {
      utf8 += static_cast<char>(cp);
    } else {
      utf8 += static_cast<char>(0xC0 | (cp >> 6));
      utf8 += static_cast<char>(0x80 | (cp & 0x3F));
    }
    out[b] = std::move(utf8);
  }
  return out;
}

std::string ByteFallbackToken(uint8_t byte) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  return std::string("<0x") + kHex[byte >> 4] + kHex[byte & 0xF] + ">";
}

struct AddedToken {
  std::string content;
  uint32_t id = 0;
};

struct MergeRule {
  uint32_t rank = 0;
  uint32_t merged = 0;
};

Result<std::unique_ptr<Tokenizer>> ParseDocument(const nlohmann::json& doc, std::string_view source);

class HfBpeTokenizer final : public Tokenizer {
 public:
  std::vector<uint32_t> Encode(std::string_view text) const override {
    std::vector<uint32_t> out;
    std::size_t segment_start = 0;
    std::size_t i = 0;
    while (i < text.size()) {
      const AddedToken* added = MatchAdded(text, i);
      if (added == nullptr) {
        ++i;
        continue;
      }
      EncodeSegment(text.substr(segment_start, i - segment_start), out);
      out.push_back(added->id);
      i += added->content.size();
      segment_start = i;
    }
    EncodeSegment(text.substr(segment_start), out);
    return out;
  }

  std::string_view kind() const override { return kind_; }

 private:
  friend Result<std::unique_ptr<Tokenizer>> ParseDocument(const nlohmann::json& doc, std::string_view source);

  // The longest added token that starts at text[i], or null.
  const AddedToken* MatchAdded(std::string_view text, std::size_t i) const {
    const auto& candidates = added_by_first_byte_[static_cast<uint8_t>(text[i])];
    for (const AddedToken* token : candidates) {  // sorted longest first
      if (text.compare(i, token->content.size(), token->content) == 0) return token;
    }
    return nullptr;
  }

  void EncodeSegment(std::string_view segment, std::vector<uint32_t>& out) const {
    if (segment.empty()) return;
    std::string prefixed;
    if (add_prefix_space_ && segment.front() != ' ') {
      prefixed = " " + std::string(segment);
      segment = prefixed;
    }
    for (std::string_view piece : replay::PreTokenize(segment, pattern_)) EncodeWord(piece, out);
  }

  void EncodeWord(std::string_view word, std::vector<uint32_t>& out) const {
    std::string mapped;
    for (char c : word) mapped += alphabet_[static_cast<uint8_t>(c)];
    if (ignore_merges_) {
      if (auto it = vocab_.find(mapped); it != vocab_.end()) {
        out.push_back(it->second);
        return;
      }
    }
    // Initial symbols: one per byte; bytes missing from the vocab fall back here (Load
    // guarantees one of the fallbacks exists).
    std::vector<uint32_t> ids;
    ids.reserve(word.size());
    for (char c : word) {
      const uint8_t b = static_cast<uint8_t>(c);
      if (byte_ids_[b] != kNone) {
        ids.push_back(byte_ids_[b]);
      } else if (byte_fallback_) {
        for (char m : alphabet_[b]) ids.push_back(fallback_ids_[static_cast<uint8_t>(m)]);
      } else {
        ids.push_back(unk_id_);
      }
    }
    MergeAll(ids);
    out.insert(out.end(), ids.begin(), ids.end());
  }

  // Applies merges lowest rank first (leftmost first among equal ranks), as Hugging Face's
  // Word::merge_all does: a heap of candidate pairs, entries made stale by an earlier merge
  // skipped when popped. O(n log n) in the word's length.
  void MergeAll(std::vector<uint32_t>& ids) const {
    const std::size_t n = ids.size();
    if (n < 2) return;
    std::vector<std::size_t> next(n);
    std::vector<std::size_t> prev(n);
    std::vector<bool> alive(n, true);
    constexpr std::size_t kEnd = std::numeric_limits<std::size_t>::max();
    for (std::size_t k = 0; k < n; ++k) {
      next[k] = k + 1 < n ? k + 1 : kEnd;
      prev[k] = k > 0 ? k - 1 : kEnd;
    }
    using Candidate = std::tuple<uint32_t, std::size_t, uint32_t, uint32_t>;  // rank, pos, left, right
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
    const auto consider = [&](std::size_t pos) {
      if (pos == kEnd || next[pos] == kEnd) return;
      if (const MergeRule* rule = FindMerge(ids[pos], ids[next[pos]])) {
        heap.emplace(rule->rank, pos, ids[pos], ids[next[pos]]);
      }
    };
    for (std::size_t k = 0; k + 1 < n; ++k) consider(k);
    while (!heap.empty()) {
      const auto [rank, pos, left, right] = heap.top();
      heap.pop();
      const std::size_t right_pos = next[pos];
      if (!alive[pos] || ids[pos] != left || right_pos == kEnd || ids[right_pos] != right) continue;
      ids[pos] = FindMerge(left, right)->merged;
      alive[right_pos] = false;
      next[pos] = next[right_pos];
      if (next[pos] != kEnd) prev[next[pos]] = pos;
      consider(prev[pos]);
      consider(pos);
    }
    std::size_t kept = 0;
    for (std::size_t k = 0; k != kEnd; k = next[k]) ids[kept++] = ids[k];
    ids.resize(kept);
  }

  const MergeRule* FindMerge(uint32_t left, uint32_t right) const {
    const auto it = merges_.find((uint64_t{left} << 32) | right);
    return it == merges_.end() ? nullptr : &it->second;
  }

  static constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

  std::string kind_;
  PreTokenizerPattern pattern_ = PreTokenizerPattern::kGpt2;
  bool add_prefix_space_ = false;
  bool ignore_merges_ = false;
  bool byte_fallback_ = false;
  uint32_t unk_id_ = kNone;
  std::array<std::string, 256> alphabet_ = ByteLevelAlphabet();
  std::array<uint32_t, 256> byte_ids_{};
  std::array<uint32_t, 256> fallback_ids_{};
  std::unordered_map<std::string, uint32_t> vocab_;
  std::unordered_map<uint64_t, MergeRule> merges_;
  std::vector<AddedToken> added_;
  std::array<std::vector<const AddedToken*>, 256> added_by_first_byte_;
};

// Which hand-matched pattern and prefix-space setting a tokenizer.json pre_tokenizer means.
Status ReadPreTokenizer(const nlohmann::json& pre, std::string_view source, PreTokenizerPattern& pattern,
                        bool& add_prefix_space) {
  const auto unsupported = [&](std::string_view why) {
    return Status::Unsupported(std::string(source) + ": pre_tokenizer " + std::string(why) +
                               "; supported: ByteLevel (GPT-2 regex), or Sequence[Split(GPT-2, Llama-3 or Qwen2 "
                               "regex), ByteLevel(use_regex=false)]; use the approximate tokenizer instead");
  };
  if (!pre.is_object() || !pre.contains("type") || !pre["type"].is_string()) return unsupported("is missing");
  const std::string type = pre["type"].get<std::string>();
  const auto byte_level_flags = [&](const nlohmann::json& node, bool& use_regex) {
    use_regex = !node.contains("use_regex") || !node["use_regex"].is_boolean() || node["use_regex"].get<bool>();
    add_prefix_space = node.contains("add_prefix_space") && node["add_prefix_space"].is_boolean() &&
                       node["add_prefix_space"].get<bool>();
  };
  if (type == "ByteLevel") {
    bool use_regex = true;
    byte_level_flags(pre, use_regex);
    if (!use_regex) return unsupported("ByteLevel without a regex splits nothing");
    pattern = PreTokenizerPattern::kGpt2;
    return Status::Ok();
  }
  if (type != "Sequence" || !pre.contains("pretokenizers") || !pre["pretokenizers"].is_array() ||
      pre["pretokenizers"].size() != 2) {
    return unsupported("of type '" + type + "'");
  }
  const nlohmann::json& split = pre["pretokenizers"][0];
  const nlohmann::json& byte_level = pre["pretokenizers"][1];
  if (!split.is_object() || split.value("type", "") != "Split" || !byte_level.is_object() ||
      byte_level.value("type", "") != "ByteLevel") {
    return unsupported("is a Sequence other than [Split, ByteLevel]");
  }
  bool use_regex = false;
  byte_level_flags(byte_level, use_regex);
  if (use_regex) return unsupported("applies two regexes");
  if (split.value("invert", false) || split.value("behavior", "") != "Isolated") {
    return unsupported("Split is not Isolated/non-inverted");
  }
  const nlohmann::json* regex = nullptr;
  if (split.contains("pattern") && split["pattern"].is_object() && split["pattern"].contains("Regex")) {
    regex = &split["pattern"]["Regex"];
  }
  if (regex == nullptr || !regex->is_string()) return unsupported("Split has no Regex pattern");
  const auto recognized = replay::RecognizePreTokenizerRegex(regex->get<std::string>());
  if (!recognized) return unsupported("Split regex is not one kvtier matches");
  pattern = *recognized;
  return Status::Ok();
}

Result<std::unique_ptr<Tokenizer>> ParseDocument(const nlohmann::json& doc, std::string_view source) {
  const std::string where(source);
  const auto invalid = [&](const std::string& what) { return Status::InvalidArgument(where + ": " + what); };
  if (!doc.is_object() || !doc.contains("model") || !doc["model"].is_object()) return invalid("no 'model' object");
  const nlohmann::json& model = doc["model"];
  if (model.value("type", "BPE") != "BPE") {
    return Status::Unsupported(where + ": model.type '" + model.value("type", "") +
                               "' is not BPE; use the approximate tokenizer");
  }
  if (model.contains("continuing_subword_prefix") && !model["continuing_subword_prefix"].is_null()) {
    return Status::Unsupported(where + ": model.continuing_subword_prefix is not supported");
  }
  if (model.contains("end_of_word_suffix") && !model["end_of_word_suffix"].is_null()) {
    return Status::Unsupported(where + ": model.end_of_word_suffix is not supported");
  }
  if (doc.contains("normalizer") && !doc["normalizer"].is_null() && doc["normalizer"].value("type", "") != "NFC") {
    return Status::Unsupported(where + ": normalizer '" + doc["normalizer"].value("type", "?") +
                               "' is not supported (only none or NFC)");
  }

  auto tok = std::make_unique<HfBpeTokenizer>();
  if (!doc.contains("pre_tokenizer")) return invalid("no 'pre_tokenizer'");
  KVTIER_RETURN_IF_ERROR(ReadPreTokenizer(doc["pre_tokenizer"], source, tok->pattern_, tok->add_prefix_space_));

  if (!model.contains("vocab") || !model["vocab"].is_object()) return invalid("model.vocab is not an object");
  for (const auto& [piece, id] : model["vocab"].items()) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= HfBpeTokenizer::kNone) {
      return invalid("model.vocab['" + piece + "'] is not a token id");
    }
    tok->vocab_.emplace(piece, id.get<uint32_t>());
  }
  const auto lookup = [&](const std::string& piece) {
    const auto it = tok->vocab_.find(piece);
    return it == tok->vocab_.end() ? HfBpeTokenizer::kNone : it->second;
  };

  if (!model.contains("merges") || !model["merges"].is_array()) return invalid("model.merges is not an array");
  const nlohmann::json& merges = model["merges"];
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const nlohmann::json& m = merges[rank];
    std::string left;
    std::string right;
    if (m.is_string()) {  // "a b" (older files)
      const std::string s = m.get<std::string>();
      const std::size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return invalid("model.merges[" + std::to_string(rank) + "] is not 'left right'");
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["a", "b"]
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return invalid("model.merges[" + std::to_string(rank) + "] is neither 'a b' nor [a, b]");
    }
    const uint32_t l = lookup(left);
    const uint32_t r = lookup(right);
    const uint32_t merged = lookup(left + right);
    if (l == HfBpeTokenizer::kNone || r == HfBpeTokenizer::kNone || merged == HfBpeTokenizer::kNone) {
      return invalid("model.merges[" + std::to_string(rank) + "] ('" + left + "', '" + right +
                     "'): a part or the merged token is not in model.vocab");
    }
    // A repeated pair keeps its first (lowest) rank, as Hugging Face's loader does.
    tok->merges_.try_emplace((uint64_t{l} << 32) | r, MergeRule{static_cast<uint32_t>(rank), merged});
  }

  tok->ignore_merges_ = model.value("ignore_merges", false);
  tok->byte_fallback_ = model.value("byte_fallback", false);
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    tok->unk_id_ = lookup(model["unk_token"].get<std::string>());
    if (tok->unk_id_ == HfBpeTokenizer::kNone) return invalid("model.unk_token is not in model.vocab");
  }
  bool all_bytes = true;
  for (uint32_t b = 0; b < 256; ++b) {
    tok->byte_ids_[b] = lookup(tok->alphabet_[b]);
    all_bytes = all_bytes && tok->byte_ids_[b] != HfBpeTokenizer::kNone;
    tok->fallback_ids_[b] = lookup(ByteFallbackToken(static_cast<uint8_t>(b)));
    if (tok->byte_fallback_ && tok->fallback_ids_[b] == HfBpeTokenizer::kNone) {
      return invalid("model.byte_fallback is set but " + ByteFallbackToken(static_cast<uint8_t>(b)) +
                     " is not in model.vocab");
    }
  }
  if (!all_bytes && !tok->byte_fallback_ && tok->unk_id_ == HfBpeTokenizer::kNone) {
    return invalid("model.vocab lacks some of the 256 byte-level symbols and has neither byte_fallback nor "
                   "unk_token, so some text could not be encoded");
  }

  if (doc.contains("added_tokens") && doc["added_tokens"].is_array()) {
    for (const nlohmann::json& added : doc["added_tokens"]) {
      if (!added.is_object() || !added.contains("id") || !added["id"].is_number_unsigned() ||
          !added.contains("content") || !added["content"].is_string() || added["content"].get<std::string>().empty()) {
        return invalid("added_tokens has an entry without a non-empty 'content' and an 'id'");
      }
      tok->added_.push_back({added["content"].get<std::string>(), added["id"].get<uint32_t>()});
    }
  }
  for (const AddedToken& added : tok->added_) {
    tok->added_by_first_byte_[static_cast<uint8_t>(added.content[0])].push_back(&added);
  }
  for (auto& list : tok->added_by_first_byte_) {
    std::stable_sort(list.begin(), list.end(),
                     [](const AddedToken* a, const AddedToken* b) { return a->content.size() > b->content.size(); });
  }

  tok->kind_ = "hf-bpe:" + where + " (pre-tokenizer " +
               std::string(replay::PreTokenizerPatternName(tok->pattern_)) + ", unicode classes " +
               std::string(replay::UnicodeTablesName()) + ")";
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> ParseHfTokenizer(std::string_view json_text, std::string_view source) {
  KVTIER_ASSIGN_OR_RETURN(const nlohmann::json doc, ParseLenientJson(json_text, source));
  // nlohmann's value() throws on a field of the wrong type; the file is outside input, so
  // any such throw becomes an error here instead of crossing the API.
  try {
    return ParseDocument(doc, source);
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(std::string(source) + ": unexpected field type (" + e.what() + ")");
  }
}

Result<std::unique_ptr<Tokenizer>> LoadHfTokenizer(const std::string& path) {
  KVTIER_ASSIGN_OR_RETURN(const std::string text, ReadTextFile(path));
  return ParseHfTokenizer(text, path);
}

}  // namespace kvtier
