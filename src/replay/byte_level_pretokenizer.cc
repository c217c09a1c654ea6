#include "replay/byte_level_pretokenizer.h"

#include <algorithm>
#include <array>
#include <cstdint>

#ifdef KVTIER_HAVE_ICU
#include <unicode/uchar.h>
#endif

namespace kvtier::replay {
namespace {

constexpr std::string_view kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct Range {
  char32_t first;
  char32_t last;
  CharClass cls;
};

constexpr CharClass N = CharClass::kNumber;
constexpr CharClass S = CharClass::kSpace;
constexpr CharClass O = CharClass::kOther;
constexpr CharClass L = CharClass::kLetter;

// Non-ASCII code points that are not letters (\p{L}), sorted and disjoint. Code points not
// listed are letters. Covers Latin-1, combining marks, Greek/Cyrillic/Armenian/Hebrew/Arabic
// punctuation and marks, the digits and vowel signs of the Indic scripts and Thai, general
// punctuation, currency, letterlike and number forms, arrows, math, box drawing, shapes,
// dingbats, CJK punctuation and enclosed forms, full-width forms, emoji and private use.
// Indic blocks are listed by their shared layout (signs at 00-03, 3A-4F, 51-57, 62-63,
// digits at 66-6F), which is right for most code points in them; ICU builds are exact.
constexpr Range kTable[] = {
    {0x80, 0x9F, O}, {0xA0, 0xA0, S}, {0xA1, 0xA9, O}, {0xAA, 0xAA, L}, {0xAB, 0xB1, O}, {0xB2, 0xB3, N},
    {0xB4, 0xB4, O}, {0xB5, 0xB5, L}, {0xB6, 0xB8, O}, {0xB9, 0xB9, N}, {0xBA, 0xBA, L}, {0xBB, 0xBB, O},
    {0xBC, 0xBE, N}, {0xBF, 0xBF, O}, {0xD7, 0xD7, O}, {0xF7, 0xF7, O}, {0x2C2, 0x2C5, O}, {0x2D2, 0x2DF, O},
    {0x2E5, 0x2EB, O}, {0x2ED, 0x2ED, O}, {0x2EF, 0x36F, O}, {0x375, 0x375, O}, {0x37E, 0x37E, O},
    {0x384, 0x385, O}, {0x387, 0x387, O}, {0x3F6, 0x3F6, O}, {0x482, 0x489, O}, {0x55A, 0x55F, O},
    {0x589, 0x58F, O}, {0x591, 0x5C7, O}, {0x5F3, 0x5F4, O}, {0x600, 0x61F, O}, {0x64B, 0x65F, O},
    {0x660, 0x669, N}, {0x66A, 0x66D, O}, {0x670, 0x670, O}, {0x6D4, 0x6D4, O}, {0x6D6, 0x6E4, O},
    {0x6E7, 0x6ED, O}, {0x6F0, 0x6F9, N}, {0x6FD, 0x6FE, O}, {0x700, 0x70F, O}, {0x7C0, 0x7C9, N},
    // Indic scripts: Devanagari 0900 to Malayalam 0D7F, one 128-code-point block each.
    {0x900, 0x903, O}, {0x93A, 0x93C, O}, {0x93E, 0x94F, O}, {0x951, 0x957, O}, {0x962, 0x965, O}, {0x966, 0x96F, N},
    {0x970, 0x970, O}, {0x981, 0x983, O}, {0x9BC, 0x9BC, O}, {0x9BE, 0x9CD, O}, {0x9D7, 0x9D7, O},
    {0x9E2, 0x9E3, O}, {0x9E6, 0x9EF, N}, {0x9F2, 0x9FB, O}, {0xA01, 0xA03, O}, {0xA3C, 0xA51, O},
    {0xA66, 0xA6F, N}, {0xA70, 0xA71, O}, {0xA75, 0xA76, O}, {0xA81, 0xA83, O}, {0xABC, 0xABC, O},
    {0xABE, 0xACD, O}, {0xAE2, 0xAE3, O}, {0xAE6, 0xAEF, N}, {0xAF0, 0xAF1, O}, {0xAFA, 0xAFF, O},
    {0xB01, 0xB03, O}, {0xB3C, 0xB3C, O}, {0xB3E, 0xB57, O}, {0xB62, 0xB63, O}, {0xB66, 0xB6F, N},
    {0xB70, 0xB70, O}, {0xB72, 0xB77, N}, {0xB82, 0xB82, O}, {0xBBE, 0xBD7, O}, {0xBE6, 0xBF2, N},
    {0xBF3, 0xBFA, O}, {0xC00, 0xC04, O}, {0xC3C, 0xC3C, O}, {0xC3E, 0xC56, O}, {0xC62, 0xC63, O},
    {0xC66, 0xC6F, N}, {0xC77, 0xC77, O}, {0xC78, 0xC7E, N}, {0xC7F, 0xC7F, O}, {0xC81, 0xC84, O},
    {0xCBC, 0xCBC, O}, {0xCBE, 0xCD6, O}, {0xCE2, 0xCE3, O}, {0xCE6, 0xCEF, N}, {0xD00, 0xD03, O},
    {0xD3B, 0xD3C, O}, {0xD3E, 0xD4D, O}, {0xD4F, 0xD4F, O}, {0xD57, 0xD57, O}, {0xD58, 0xD5E, N},
    {0xD62, 0xD63, O}, {0xD66, 0xD78, N}, {0xD79, 0xD79, O},
    // Thai and Lao.
    {0xE31, 0xE31, O}, {0xE34, 0xE3F, O}, {0xE47, 0xE4F, O}, {0xE50, 0xE59, N}, {0xE5A, 0xE5B, O},
    {0xEB1, 0xEB1, O}, {0xEB4, 0xEBC, O}, {0xEC8, 0xECE, O}, {0xED0, 0xED9, N},
    {0xF01, 0xF1F, O}, {0xF20, 0xF33, N}, {0xF34, 0xF3F, O}, {0x102B, 0x103E, O}, {0x1040, 0x1049, N},
    {0x104A, 0x104F, O}, {0x10FB, 0x10FB, O}, {0x1360, 0x1368, O}, {0x1369, 0x137C, N}, {0x1680, 0x1680, S},
    {0x16EB, 0x16ED, O}, {0x16EE, 0x16F0, N}, {0x17B4, 0x17D6, O}, {0x17D8, 0x17DB, O}, {0x17DD, 0x17DD, O},
    {0x17E0, 0x17E9, N}, {0x1800, 0x180F, O}, {0x1810, 0x1819, N}, {0x1AB0, 0x1AFF, O}, {0x1DC0, 0x1DFF, O},
    {0x1FBD, 0x1FBD, O}, {0x1FBF, 0x1FC1, O}, {0x1FCD, 0x1FCF, O}, {0x1FDD, 0x1FDF, O}, {0x1FED, 0x1FEF, O},
    {0x1FFD, 0x1FFE, O}, {0x2000, 0x200A, S}, {0x200B, 0x2027, O}, {0x2028, 0x2029, S}, {0x202A, 0x202E, O},
    {0x202F, 0x202F, S}, {0x2030, 0x205E, O}, {0x205F, 0x205F, S}, {0x2060, 0x206F, O}, {0x2070, 0x2070, N},
    {0x2074, 0x2079, N}, {0x207A, 0x207E, O}, {0x2080, 0x2089, N}, {0x208A, 0x208E, O}, {0x20A0, 0x2101, O},
    {0x2103, 0x2106, O}, {0x2108, 0x2109, O}, {0x2114, 0x2114, O}, {0x2116, 0x2118, O}, {0x211E, 0x2123, O},
    {0x2125, 0x2125, O}, {0x2127, 0x2127, O}, {0x2129, 0x2129, O}, {0x212E, 0x212E, O}, {0x213A, 0x213B, O},
    {0x2140, 0x2144, O}, {0x214A, 0x214D, O}, {0x214F, 0x214F, O}, {0x2150, 0x2182, N}, {0x2185, 0x2189, N},
    {0x218A, 0x245F, O}, {0x2460, 0x249B, N}, {0x249C, 0x24E9, O}, {0x24EA, 0x24FF, N}, {0x2500, 0x2775, O},
    {0x2776, 0x2793, N}, {0x2794, 0x2BFF, O}, {0x2CE5, 0x2CEA, O}, {0x2CEF, 0x2CF1, O}, {0x2CF9, 0x2CFF, O},
    {0x2DE0, 0x2E2E, O}, {0x2E30, 0x2FFF, O}, {0x3000, 0x3000, S}, {0x3001, 0x3004, O}, {0x3007, 0x3007, N},
    {0x3008, 0x3020, O}, {0x3021, 0x3029, N}, {0x302A, 0x3030, O}, {0x3036, 0x3037, O}, {0x3038, 0x303A, N},
    {0x303D, 0x303F, O}, {0x3099, 0x309C, O}, {0x30A0, 0x30A0, O}, {0x30FB, 0x30FB, O}, {0x3190, 0x3191, O},
    {0x3192, 0x3195, N}, {0x3196, 0x319F, O}, {0x31C0, 0x31EF, O}, {0x3200, 0x321F, O}, {0x3220, 0x3229, N},
    {0x322A, 0x3247, O}, {0x3248, 0x324F, N}, {0x3250, 0x3250, O}, {0x3251, 0x325F, N}, {0x3260, 0x327F, O},
    {0x3280, 0x3289, N}, {0x328A, 0x32B0, O}, {0x32B1, 0x32BF, N}, {0x32C0, 0x33FF, O}, {0x4DC0, 0x4DFF, O},
    {0xA490, 0xA4CF, O}, {0xA4FE, 0xA4FF, O}, {0xA60D, 0xA60F, O}, {0xA620, 0xA629, N}, {0xA66F, 0xA67E, O},
    {0xA69E, 0xA69F, O}, {0xA6F0, 0xA6F7, O}, {0xA700, 0xA716, O}, {0xA720, 0xA721, O}, {0xA789, 0xA78A, O},
    {0xA802, 0xA802, O}, {0xA806, 0xA806, O}, {0xA80B, 0xA80B, O}, {0xA823, 0xA82C, O}, {0xA830, 0xA835, N},
    {0xA836, 0xA839, O}, {0xA8E0, 0xA8F1, O}, {0xA8F8, 0xA8FA, O}, {0xA8FC, 0xA8FC, O}, {0xA900, 0xA909, N},
    {0xD800, 0xF8FF, O}, {0xFB1E, 0xFB1E, O}, {0xFB29, 0xFB29, O}, {0xFBB2, 0xFBC2, O}, {0xFD3E, 0xFD4F, O},
    {0xFDFC, 0xFDFF, O}, {0xFE00, 0xFE6F, O}, {0xFEFF, 0xFEFF, O}, {0xFF01, 0xFF0F, O}, {0xFF10, 0xFF19, N},
    {0xFF1A, 0xFF20, O}, {0xFF3B, 0xFF40, O}, {0xFF5B, 0xFF65, O}, {0xFFE0, 0xFFFF, O}, {0x10100, 0x1013F, O},
    {0x1D000, 0x1D24F, O}, {0x1D7CE, 0x1D7FF, N}, {0x1F000, 0x1F0FF, O}, {0x1F100, 0x1F10C, N},
    {0x1F10D, 0x1FBEF, O}, {0x1FBF0, 0x1FBF9, N}, {0xE0000, 0xE01EF, O}, {0xF0000, 0x10FFFF, O},
};

CharClass ClassifyAscii(char32_t c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return CharClass::kLetter;
  if (c >= '0' && c <= '9') return CharClass::kNumber;
  if (c == ' ' || (c >= '\t' && c <= '\r')) return CharClass::kSpace;
  // Other C0 controls (0x1C-0x1F are White_Space in Unicode: \s matches them too).
  if (c >= 0x1C && c <= 0x1F) return CharClass::kSpace;
  return CharClass::kOther;
}

CharClass ClassifyBuiltin(char32_t c) {
  const Range* end = std::end(kTable);
  const Range* it = std::upper_bound(std::begin(kTable), end, c, [](char32_t v, const Range& r) { return v < r.first; });
  if (it == std::begin(kTable)) return CharClass::kLetter;
  --it;
  return c <= it->last ? it->cls : CharClass::kLetter;
}

// A decoded text: code points, their classes and byte offsets (offsets has one more entry,
// the text's size).
struct Decoded {
  std::vector<char32_t> cps;
  std::vector<CharClass> cls;
  std::vector<std::size_t> offsets;
};

// Decodes UTF-8; an invalid or truncated sequence yields U+FFFD (class kOther) for its first
// byte, and decoding resumes at the next byte.
Decoded Decode(std::string_view text) {
  Decoded d;
  d.cps.reserve(text.size());
  d.offsets.reserve(text.size() + 1);
  std::size_t i = 0;
  const auto byte = [&](std::size_t k) { return static_cast<uint8_t>(text[k]); };
  while (i < text.size()) {
    const uint8_t b0 = byte(i);
    char32_t cp = 0xFFFD;
    std::size_t len = 1;
    std::size_t need = 0;
    char32_t min = 0;
    if (b0 < 0x80) {
      cp = b0;
    } else if ((b0 & 0xE0) == 0xC0) {
      need = 1, cp = b0 & 0x1Fu, min = 0x80;
    } else if ((b0 & 0xF0) == 0xE0) {
      need = 2, cp = b0 & 0x0Fu, min = 0x800;
    } else if ((b0 & 0xF8) == 0xF0) {
      need = 3, cp = b0 & 0x07u, min = 0x10000;
    }
    if (need > 0) {
      bool ok = true;
      for (std::size_t k = 1; ok && k <= need; ++k) {
        if (i + k >= text.size() || (byte(i + k) & 0xC0) != 0x80) {
          ok = false;
        } else {
          cp = (cp << 6) | (byte(i + k) & 0x3Fu);
        }
      }
      if (ok && cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF)) {
        len = need + 1;
      } else {
        cp = 0xFFFD;
      }
    }
    d.cps.push_back(cp);
    d.cls.push_back(ClassifyCodePoint(cp));
    d.offsets.push_back(i);
    i += len;
  }
  d.offsets.push_back(text.size());
  return d;
}

bool IsCrLf(char32_t c) { return c == '\r' || c == '\n'; }

// Length (in code points) of a contraction at i: 's 't 're 've 'm 'll 'd, or 0.
std::size_t Contraction(const Decoded& d, std::size_t i, bool ignore_case) {
  const std::size_t n = d.cps.size();
  if (d.cps[i] != '\'' || i + 1 >= n) return 0;
  const auto lower = [&](std::size_t k) -> char32_t {
    const char32_t c = d.cps[k];
    return ignore_case && c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
  };
  const char32_t a = lower(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 < n) {
    const char32_t b = lower(i + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  return 0;
}

std::size_t RunOf(const Decoded& d, std::size_t i, CharClass cls) {
  std::size_t j = i;
  while (j < d.cps.size() && d.cls[j] == cls) ++j;
  return j;
}

// \s+(?!\S) then \s+ at a whitespace code point i: the run minus its last space when a
// non-space follows (that space joins the next word), else the whole run.
std::size_t TrailingSpaceRule(const Decoded& d, std::size_t i) {
  const std::size_t j = RunOf(d, i, CharClass::kSpace);
  if (j == d.cps.size() || j - i == 1) return j;
  return j - 1;
}

// The end (code point index) of the GPT-2 pre-token that starts at i.
std::size_t NextGpt2(const Decoded& d, std::size_t i) {
  const std::size_t n = d.cps.size();
  if (std::size_t c = Contraction(d, i, /*ignore_case=*/false)) return i + c;
  // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+"
  const std::size_t start = (d.cps[i] == ' ' && i + 1 < n && d.cls[i + 1] != CharClass::kSpace) ? i + 1 : i;
  if (d.cls[start] != CharClass::kSpace) return RunOf(d, start, d.cls[start]);
  return TrailingSpaceRule(d, i);
}

// The end of the Llama-3 / Qwen2 pre-token that starts at i.
std::size_t NextLlama3(const Decoded& d, std::size_t i, std::size_t max_digits) {
  const std::size_t n = d.cps.size();
  if (std::size_t c = Contraction(d, i, /*ignore_case=*/true)) return i + c;
  const CharClass c0 = d.cls[i];
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (c0 == CharClass::kLetter) return RunOf(d, i, CharClass::kLetter);
  if (c0 != CharClass::kNumber && !IsCrLf(d.cps[i]) && i + 1 < n && d.cls[i + 1] == CharClass::kLetter) {
    return RunOf(d, i + 1, CharClass::kLetter);
  }
  // \p{N}{1,3}
  if (c0 == CharClass::kNumber) return std::min(RunOf(d, i, CharClass::kNumber), i + max_digits);
  // " ?[^\s\p{L}\p{N}]+[\r\n]*"
  const std::size_t start = (d.cps[i] == ' ' && i + 1 < n && d.cls[i + 1] == CharClass::kOther) ? i + 1 : i;
  if (d.cls[start] == CharClass::kOther) {
    std::size_t j = RunOf(d, start, CharClass::kOther);
    while (j < n && IsCrLf(d.cps[j])) ++j;
    return j;
  }
  // \s*[\r\n]+ : the whitespace run up to and including its last \r or \n.
  const std::size_t run_end = RunOf(d, i, CharClass::kSpace);
  for (std::size_t k = run_end; k > i; --k) {
    if (IsCrLf(d.cps[k - 1])) return k;
  }
  return TrailingSpaceRule(d, i);
}

}  // namespace

std::string_view PreTokenizerPatternName(PreTokenizerPattern pattern) {
  switch (pattern) {
    case PreTokenizerPattern::kGpt2: return "gpt2";
    case PreTokenizerPattern::kLlama3: return "llama3";
    case PreTokenizerPattern::kQwen2: return "qwen2";
  }
  return "unknown";
}

std::optional<PreTokenizerPattern> RecognizePreTokenizerRegex(std::string_view regex) {
  if (regex == kGpt2Regex) return PreTokenizerPattern::kGpt2;
  if (regex == kLlama3Regex) return PreTokenizerPattern::kLlama3;
  if (regex == kQwen2Regex) return PreTokenizerPattern::kQwen2;
  return std::nullopt;
}

std::vector<std::string_view> PreTokenize(std::string_view text, PreTokenizerPattern pattern) {
  std::vector<std::string_view> pieces;
  if (text.empty()) return pieces;
  const Decoded d = Decode(text);
  std::size_t i = 0;
  while (i < d.cps.size()) {
    std::size_t j = 0;
    switch (pattern) {
      case PreTokenizerPattern::kGpt2: j = NextGpt2(d, i); break;
      case PreTokenizerPattern::kLlama3: j = NextLlama3(d, i, 3); break;
      case PreTokenizerPattern::kQwen2: j = NextLlama3(d, i, 1); break;
    }
    j = std::max(j, i + 1);  // every rule consumes at least one code point
    pieces.push_back(text.substr(d.offsets[i], d.offsets[j] - d.offsets[i]));
    i = j;
  }
  return pieces;
}

CharClass ClassifyCodePoint(char32_t c) {
  if (c < 0x80) return ClassifyAscii(c);
#ifdef KVTIER_HAVE_ICU
  const UChar32 u = static_cast<UChar32>(c);
  if (u_hasBinaryProperty(u, UCHAR_WHITE_SPACE)) return CharClass::kSpace;
  switch (u_charType(u)) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return CharClass::kLetter;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return CharClass::kNumber;
    default:
      return CharClass::kOther;
  }
#else
  return ClassifyBuiltin(c);
#endif
}

std::string_view UnicodeTablesName() {
#ifdef KVTIER_HAVE_ICU
  return "icu";
#else
  return "built-in";
#endif
}

bool BuiltinUnicodeTableIsSorted() {
  for (std::size_t k = 0; k < std::size(kTable); ++k) {
    if (kTable[k].first > kTable[k].last) return false;
    if (k > 0 && kTable[k].first <= kTable[k - 1].last) return false;
  }
  return ClassifyBuiltin(0x4E2D) == CharClass::kLetter;  // 中
}

}  // namespace kvtier::replay
