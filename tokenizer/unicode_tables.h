// The generated Unicode tables (tokenizer/unicode_tables.cpp, written by
// tools/gen_unicode_tables.py): sorted, non-overlapping, inclusive code point ranges.
//
// kCategoryRanges holds the general-category group of every assigned code point; a code
// point in no range is unassigned. kWhiteSpaceRanges is the White_Space property, which is
// what a regex's \s means.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mt::tok {

// General-category groups: the first letter of the two-letter Unicode category.
enum class UCat : uint8_t {
  kUnassigned = 0,  // Cn
  kLetter,          // Lu Ll Lt Lm Lo
  kMark,            // Mn Mc Me
  kNumber,          // Nd Nl No
  kPunct,           // Pc Pd Ps Pe Pi Pf Po
  kSymbol,          // Sm Sc Sk So
  kSeparator,       // Zs Zl Zp
  kOther,           // Cc Cf Cs Co
};

struct CategoryRange {
  uint32_t first;
  uint32_t last;
  UCat cat;
};

struct CodepointRange {
  uint32_t first;
  uint32_t last;
};

extern const char kUnicodeVersion[];
extern const CategoryRange kCategoryRanges[];
extern const size_t kCategoryRangeCount;
extern const CodepointRange kWhiteSpaceRanges[];
extern const size_t kWhiteSpaceRangeCount;

}  // namespace mt::tok
