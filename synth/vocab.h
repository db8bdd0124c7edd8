// The tokenizer of a synthetic model: copied from a vocab GGUF, or a small built-in
// byte-level BPE vocabulary (the 256 GPT-2 byte tokens, a few merges, <|endoftext|>)
// so `synth` needs no file. A vocabulary smaller than the preset's n_vocab is padded
// with unused tokens so the embedding and output matrices keep the checkpoint's size.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "gguf/writer.h"
#include "synth/config.h"

namespace mt::synth {

// Writes every tokenizer.* key and returns the vocabulary size.
StatusOr<uint32_t> write_vocab(const SynthConfig& config, gguf::GgufWriter& writer);

}  // namespace mt::synth
