// Special-token partition: before any model sees the text, occurrences of special token
// texts are cut out and become those tokens; the text around them stays raw.
//
// Which tokens: user-defined ones always; control and unknown ones only when
// parse_special is set (otherwise "<|im_end|>" in a prompt is plain text). The tokens are
// applied one after another, longest text first, each splitting every raw fragment at
// all its non-overlapping occurrences (left to right), as llama.cpp does. A token marked
// rstrip (Phi-3's special tokens) also takes the ASCII whitespace that follows it.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace mt::tok {

struct Fragment {
  int32_t token = -1;     // >= 0: a special token; -1: raw text
  std::string_view text;  // raw text (a view into the input), empty for a token
};

// The fragments of `text` in order; none for an empty text.
std::vector<Fragment> split_special(const Vocab& v, std::string_view text, bool parse_special);

}  // namespace mt::tok
