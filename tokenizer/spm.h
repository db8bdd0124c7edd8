// SentencePiece (BPE flavour, `tokenizer.ggml.model = llama`) encoding of one raw fragment.
//
// The fragment (spaces already escaped to U+2581) starts as one symbol per UTF-8
// character. Repeatedly, the adjacent pair whose concatenation is a token with the
// highest score is merged (ties: the leftmost pair). A final symbol that is a token is
// emitted; any other is emitted byte by byte as its <0xXX> byte-fallback tokens (the
// unknown token where the vocab has no such byte token). An invalid UTF-8 byte is a symbol
// of its own, so it cannot swallow the character after it (llama.cpp sizes a symbol by its
// lead byte alone; on valid UTF-8 the two agree).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace mt::tok {

void spm_encode(const Vocab& v, std::string_view text, std::vector<int32_t>& out);

}  // namespace mt::tok
