// The approximate tokenizer (tokenizer.h): no vocabulary, a fixed split, hashed ids. Its
// rules are documented in docs/traces.md; the chunk lengths were chosen so that common
// English words, numbers and code come out near a real ~128k-vocabulary BPE's counts.
#include <xxhash.h>

#include <string>

#include "kvtier/tokenizer.h"

namespace kvtier {
namespace {

constexpr std::size_t kAsciiWordChunk = 8;   // " the", " running", " tokenization" -> 1, 1, 2
constexpr std::size_t kUnicodeWordChunk = 4; // ~1.3 CJK characters, ~2 accented Latin letters
constexpr std::size_t kDigitChunk = 3;       // Llama-3 / GPT-4 split numbers into 3 digits
constexpr std::size_t kPunctChunk = 3;
constexpr std::size_t kSpaceChunk = 8;
constexpr std::size_t kMaxSpecialName = 64;

bool IsAsciiLetter(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsWordByte(unsigned char c) { return IsAsciiLetter(c) || c >= 0x80; }
bool IsDigit(unsigned char c) { return c >= '0' && c <= '9'; }
bool IsSpace(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
bool IsPunct(unsigned char c) { return !IsWordByte(c) && !IsDigit(c) && !IsSpace(c); }

class ApproximateTokenizer final : public Tokenizer {
 public:
  explicit ApproximateTokenizer(uint32_t vocab_size) : vocab_size_(vocab_size) {}

  std::vector<uint32_t> Encode(std::string_view text) const override {
    std::vector<uint32_t> out;
    out.reserve(text.size() / 4 + 1);
    std::size_t i = 0;
    const auto at = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
    const auto run = [&](std::size_t k, bool (*pred)(unsigned char)) {
      while (k < text.size() && pred(at(k))) ++k;
      return k;
    };
    while (i < text.size()) {
      if (std::size_t len = SpecialLength(text, i)) {
        Emit(text.substr(i, len), len, out);
        i += len;
        continue;
      }
      // A single space joins the word or punctuation run after it (not a number: Llama-3 keeps
      // " 123" as " " + "123").
      const bool lead_space = at(i) == ' ' && i + 1 < text.size() && !IsSpace(at(i + 1)) && !IsDigit(at(i + 1)) &&
                              SpecialLength(text, i + 1) == 0;
      const std::size_t start = lead_space ? i + 1 : i;
      const unsigned char c = at(start);
      std::size_t end = 0;
      std::size_t chunk = 0;
      if (IsWordByte(c)) {
        end = run(start, IsWordByte);
        bool ascii = true;
        for (std::size_t k = start; k < end; ++k) ascii = ascii && at(k) < 0x80;
        chunk = ascii ? kAsciiWordChunk : kUnicodeWordChunk;
      } else if (IsDigit(c)) {
        end = run(start, IsDigit), chunk = kDigitChunk;
      } else if (IsPunct(c)) {
        end = run(start, IsPunct), chunk = kPunctChunk;
        // Stop before a special marker so that it stays one token.
        for (std::size_t k = start; k < end; ++k) {
          if (k > start && SpecialLength(text, k) > 0) {
            end = k;
            break;
          }
        }
      } else {
        end = run(start, IsSpace), chunk = kSpaceChunk;
        // Leave the last space of a run to the word after it, as BPE pre-tokenizers do.
        if (end < text.size() && end - start > 1 && at(end - 1) == ' ' && !IsSpace(at(end))) --end;
      }
      Emit(text.substr(i, end - i), chunk, out);
      i = end;
    }
    return out;
  }

  std::string_view kind() const override { return "approximate"; }

 private:
  // "<|name|>" with 1-64 letters, digits or '_' in the name, as chat templates' markers.
  static std::size_t SpecialLength(std::string_view text, std::size_t i) {
    if (text.compare(i, 2, "<|") != 0) return 0;
    std::size_t k = i + 2;
    while (k < text.size() && k - i - 2 <= kMaxSpecialName &&
           (IsAsciiLetter(static_cast<unsigned char>(text[k])) || IsDigit(static_cast<unsigned char>(text[k])) ||
            text[k] == '_')) {
      ++k;
    }
    if (k == i + 2 || k - i - 2 > kMaxSpecialName || text.compare(k, 2, "|>") != 0) return 0;
    return k + 2 - i;
  }

  void Emit(std::string_view piece, std::size_t chunk, std::vector<uint32_t>& out) const {
    for (std::size_t k = 0; k < piece.size(); k += chunk) {
      const std::string_view part = piece.substr(k, chunk);
      out.push_back(static_cast<uint32_t>(XXH3_64bits(part.data(), part.size()) % vocab_size_));
    }
  }

  uint32_t vocab_size_;
};

}  // namespace

Status ApproximateTokenizerOptions::Validate() const {
  if (vocab_size < 256) {
    return Status::InvalidArgument("approximate tokenizer: vocab_size must be >= 256, got " + std::to_string(vocab_size));
  }
  return Status::Ok();
}

Result<std::unique_ptr<Tokenizer>> NewApproximateTokenizer(const ApproximateTokenizerOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  return std::unique_ptr<Tokenizer>(std::make_unique<ApproximateTokenizer>(options.vocab_size));
}

}  // namespace kvtier
