// The pre-tokenizer passes, one matcher per regex. Each matcher is anchored: it returns the
// end of the match starting at code point i (i itself when there is none), never looking at
// or past `end`. search<> turns an anchored matcher into a leftmost search.
//
// The regexes, as llama.cpp applies them (the contractions are case-insensitive in the
// llama3 family, written out as '[sS]|'[tT]|...):
//   gpt-2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   llama3:  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//            ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   qwen2:   as llama3 with \p{N} (one digit)
//   qwen35:  as qwen2 with [\p{L}\p{M}]+ for words and \p{M} added to the negated class
//   deepseek-llm:   [\r\n] ; \s?[explicit letter ranges]+ ; \s?[!-/:-~！-／：-～‘-‟　-。]+ ;
//                   \s+$ ; [一-龥ࠀ-一가-퟿]+ ; \p{N}+
//   deepseek-coder: [\r\n] ; \s?\p{L}+ ; \s?\p{P}+ ; [一-龥ࠀ-一가-퟿]+ ; \p{N}
//   default: [\p{P}\$\+<=>\^~\|]+ ; the gpt-2 regex ; \p{N}+ ; [0-9][0-9][0-9]
// llama.cpp matches the ranged classes of the deepseek passes after replacing every
// non-ASCII White_Space character by U+000B, so whitespace never matches those classes
// (U+3000 only counts as \s); the matchers below do the same.
#include <algorithm>
#include <iterator>

#include "tokenizer/pretokenize_internal.h"

namespace mt::tok {
namespace {

using Anchored = uint32_t (*)(const DecodedText& t, uint32_t i, uint32_t end);

template <Anchored kMatch>
bool search(const DecodedText& t, uint32_t from, uint32_t end, Match* m) {
  for (uint32_t i = from; i < end; ++i) {
    const uint32_t e = kMatch(t, i, end);
    if (e > i) {
      *m = {i, e};
      return true;
    }
  }
  return false;
}

template <typename Pred>
uint32_t run_of(uint32_t i, uint32_t end, Pred pred) {
  while (i < end && pred(i)) ++i;
  return i;
}

bool is_cr_lf(const DecodedText& t, uint32_t i) { return t.cp[i] == '\r' || t.cp[i] == '\n'; }

bool in_ranges(uint32_t cp, std::span<const CodepointRange> ranges) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                             [](uint32_t v, const CodepointRange& r) { return v < r.first; });
  return it != ranges.begin() && cp <= std::prev(it)->last;
}

// 's 't 're 've 'm 'll 'd (ASCII apostrophe); `fold`: letters in either case.
uint32_t match_contraction(const DecodedText& t, uint32_t i, uint32_t end, bool fold) {
  if (t.cp[i] != '\'' || i + 1 >= end) return i;
  auto lower = [&](uint32_t k) { return fold && t.cp[k] >= 'A' && t.cp[k] <= 'Z' ? t.cp[k] + 32 : t.cp[k]; };
  const uint32_t a = lower(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
  if (i + 2 < end) {
    const uint32_t b = lower(i + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  }
  return i;
}

// \s+(?!\S)|\s+ at the whitespace character i: a run followed by a non-space gives up its
// last character (which then leads the next word), unless that would leave nothing.
uint32_t match_space_run(const DecodedText& t, uint32_t i, uint32_t end) {
  const uint32_t k = run_of(i, end, [&](uint32_t j) { return t.space(j); });
  return (k == end || k - i == 1) ? k : k - 1;
}

// The gpt-2 regex.
uint32_t match_gpt2(const DecodedText& t, uint32_t i, uint32_t end) {
  if (const uint32_t k = match_contraction(t, i, end, false); k != i) return k;
  // ` ?X+` for X in \p{L}, \p{N}, [^\s\p{L}\p{N}]: an optional space, then a run of the
  // class of the first non-space character.
  uint32_t s = i;
  if (t.cp[i] == ' ' && i + 1 < end && !t.space(i + 1)) s = i + 1;
  if (!t.space(s)) {
    const bool letter = t.letter(s);
    const bool number = t.number(s);
    return run_of(s, end, [&](uint32_t j) {
      return !t.space(j) && t.letter(j) == letter && t.number(j) == number;
    });
  }
  return match_space_run(t, i, end);
}

// The llama3 family: kMaxDigits digits per number, kMarks: \p{M} counts as part of words.
template <uint32_t kMaxDigits, bool kMarks>
uint32_t match_llama3_like(const DecodedText& t, uint32_t i, uint32_t end) {
  if (const uint32_t k = match_contraction(t, i, end, true); k != i) return k;
  auto in_word = [&](uint32_t j) { return t.letter(j) || (kMarks && t.cat(j) == UCat::kMark); };
  // [^\r\n\p{L}\p{N}]?WORD+
  if (!is_cr_lf(t, i) && !t.letter(i) && !t.number(i) && i + 1 < end && in_word(i + 1)) {
    return run_of(i + 1, end, in_word);
  }
  if (in_word(i)) return run_of(i, end, in_word);
  // \p{N}{1,kMaxDigits}
  if (t.number(i)) return run_of(i, std::min(end, i + kMaxDigits), [&](uint32_t j) { return t.number(j); });
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*` (qwen35 also excludes \p{M})
  auto in_other = [&](uint32_t j) { return !t.space(j) && !t.letter(j) && !t.number(j) && !in_word(j); };
  const uint32_t s = (t.cp[i] == ' ' && i + 1 < end && in_other(i + 1)) ? i + 1 : i;
  if (in_other(s)) {
    const uint32_t k = run_of(s, end, in_other);
    return run_of(k, end, [&](uint32_t j) { return is_cr_lf(t, j); });
  }
  // \s*[\r\n]+: the whitespace run up to and including its last CR/LF.
  const uint32_t k = run_of(i, end, [&](uint32_t j) { return t.space(j); });
  for (uint32_t p = k; p > i; --p) {
    if (is_cr_lf(t, p - 1)) return p;
  }
  return match_space_run(t, i, end);
}

// `\s?X+` for a class X.
template <typename Pred>
uint32_t optional_space_then_run(const DecodedText& t, uint32_t i, uint32_t end, Pred in_class) {
  if (t.space(i) && i + 1 < end && in_class(i + 1)) return run_of(i + 1, end, in_class);
  return in_class(i) ? run_of(i, end, in_class) : i;
}

uint32_t match_cr_lf(const DecodedText& t, uint32_t i, uint32_t) { return is_cr_lf(t, i) ? i + 1 : i; }

// DeepSeek-LLM's explicit letter ranges (its tokenizer.json lists them rather than \p{L}).
// Some end points are characters that Unicode normalisation changes (U+1F7D, U+1FBE,
// U+1FD3, U+1FDB, U+2126, U+212A); these are the original code points, not their NFC forms.
constexpr CodepointRange kDeepseekLetters[] = {
    {0x41, 0x5A},       {0x61, 0x7A},       {0xB5, 0xB5},       {0xC0, 0xD6},       {0xD8, 0xF6},
    {0xF8, 0x1BA},      {0x1BC, 0x1BF},     {0x1C4, 0x293},     {0x295, 0x2AF},     {0x370, 0x373},
    {0x376, 0x377},     {0x37B, 0x37D},     {0x37F, 0x37F},     {0x386, 0x386},     {0x388, 0x38A},
    {0x38C, 0x38C},     {0x38E, 0x3A1},     {0x3A3, 0x3F5},     {0x3F7, 0x481},     {0x48A, 0x52F},
    {0x531, 0x556},     {0x10A0, 0x10C5},   {0x13A0, 0x13F5},   {0x13F8, 0x13FD},   {0x1C90, 0x1CBA},
    {0x1CBD, 0x1CBF},   {0x1D00, 0x1D2B},   {0x1D6B, 0x1D77},   {0x1D79, 0x1D9A},   {0x1E00, 0x1F15},
    {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},   {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},
    {0x1F5B, 0x1F5B},   {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},   {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},   {0x1FD6, 0x1FDB},
    {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},   {0x2102, 0x2102},   {0x2107, 0x2107},
    {0x210A, 0x2113},   {0x2115, 0x2115},   {0x2119, 0x211D},   {0x2124, 0x2124},   {0x2126, 0x2126},
    {0x2128, 0x2128},   {0x212A, 0x212D},   {0x212F, 0x2134},   {0x2139, 0x2139},   {0x213C, 0x213F},
    {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2184},   {0x2C00, 0x2C7B},   {0x2C7E, 0x2CE4},
    {0x2CEB, 0x2CEE},   {0x2CF2, 0x2CF3},   {0xA640, 0xA66D},   {0xA680, 0xA69B},   {0xA722, 0xA76F},
    {0xA771, 0xA787},   {0xA78B, 0xA78E},   {0xAB70, 0xABBF},   {0xFB00, 0xFB06},   {0xFB13, 0xFB17},
    {0xFF21, 0xFF3A},   {0xFF41, 0xFF5A},   {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};
// !-/ :-~ ‘-‟ 　-。 ！-／ ：-～
constexpr CodepointRange kDeepseekPunct[] = {
    {0x21, 0x2F}, {0x3A, 0x7E}, {0x2018, 0x201F}, {0x3000, 0x3002}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E},
};
// ࠀ-一 一-龥 가-퟿
constexpr CodepointRange kDeepseekCjk[] = {{0x800, 0x9FA5}, {0xAC00, 0xD7FF}};

uint32_t match_deepseek_letters(const DecodedText& t, uint32_t i, uint32_t end) {
  return optional_space_then_run(t, i, end, [&](uint32_t j) { return in_ranges(t.cp[j], kDeepseekLetters); });
}

uint32_t match_deepseek_punct(const DecodedText& t, uint32_t i, uint32_t end) {
  return optional_space_then_run(t, i, end,
                                 [&](uint32_t j) { return !t.space(j) && in_ranges(t.cp[j], kDeepseekPunct); });
}

uint32_t match_cjk(const DecodedText& t, uint32_t i, uint32_t end) {
  return run_of(i, end, [&](uint32_t j) { return !t.space(j) && in_ranges(t.cp[j], kDeepseekCjk); });
}

uint32_t match_letters(const DecodedText& t, uint32_t i, uint32_t end) {
  return optional_space_then_run(t, i, end, [&](uint32_t j) { return t.letter(j); });
}

uint32_t match_puncts(const DecodedText& t, uint32_t i, uint32_t end) {
  return optional_space_then_run(t, i, end, [&](uint32_t j) { return t.cat(j) == UCat::kPunct; });
}

uint32_t match_numbers(const DecodedText& t, uint32_t i, uint32_t end) {
  return run_of(i, end, [&](uint32_t j) { return t.number(j); });
}

uint32_t match_one_number(const DecodedText& t, uint32_t i, uint32_t) { return t.number(i) ? i + 1 : i; }

// [\p{P}\$\+<=>\^~\|]+
uint32_t match_punct_or_symbol(const DecodedText& t, uint32_t i, uint32_t end) {
  return run_of(i, end, [&](uint32_t j) {
    const uint32_t c = t.cp[j];
    return t.cat(j) == UCat::kPunct || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' ||
           c == '~' || c == '|';
  });
}

// [0-9][0-9][0-9]
uint32_t match_three_digits(const DecodedText& t, uint32_t i, uint32_t end) {
  if (i + 3 > end) return i;
  for (uint32_t j = i; j < i + 3; ++j) {
    if (t.cp[j] < '0' || t.cp[j] > '9') return i;
  }
  return i + 3;
}

// \s+$: the whitespace run that ends the piece (searched from the end).
bool search_trailing_space(const DecodedText& t, uint32_t from, uint32_t end, Match* m) {
  uint32_t b = end;
  while (b > from && t.space(b - 1)) --b;
  if (b == end) return false;
  *m = {b, end};
  return true;
}

constexpr PassFn kGpt2Passes[] = {search<match_gpt2>};
constexpr PassFn kLlama3Passes[] = {search<match_llama3_like<3, false>>};
constexpr PassFn kQwen2Passes[] = {search<match_llama3_like<1, false>>};
constexpr PassFn kQwen35Passes[] = {search<match_llama3_like<1, true>>};
constexpr PassFn kDeepseekLlmPasses[] = {
    search<match_cr_lf>,  search<match_deepseek_letters>, search<match_deepseek_punct>, search_trailing_space,
    search<match_cjk>,    search<match_numbers>,
};
constexpr PassFn kDeepseekCoderPasses[] = {
    search<match_cr_lf>, search<match_letters>, search<match_puncts>, search<match_cjk>, search<match_one_number>,
};
constexpr PassFn kDefaultPasses[] = {
    search<match_punct_or_symbol>, search<match_gpt2>, search<match_numbers>, search<match_three_digits>,
};

}  // namespace

std::span<const PassFn> passes_for(PreType type) {
  switch (type) {
    case PreType::kDefault: return kDefaultPasses;
    case PreType::kGpt2: return kGpt2Passes;
    case PreType::kLlama3: return kLlama3Passes;
    case PreType::kQwen2: return kQwen2Passes;
    case PreType::kQwen35: return kQwen35Passes;
    case PreType::kDeepseekLlm: return kDeepseekLlmPasses;
    case PreType::kDeepseekCoder: return kDeepseekCoderPasses;
  }
  return {};
}

}  // namespace mt::tok
