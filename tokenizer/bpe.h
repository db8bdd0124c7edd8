// Byte-level BPE encoding of one pre-tokenized word.
//
// The word's bytes start as one symbol each (the token of the byte's GPT-2 character).
// Repeatedly, the adjacent pair with the lowest merge rank is merged into the token the
// merge names (ties: the leftmost pair), until no adjacent pair has a merge. With
// ignore_merges (llama3), a word that is itself a token is emitted whole. A byte without a
// token in the vocab is dropped, as llama.cpp drops it.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace mt::tok {

// Working memory reused across the words of one encode call.
struct BpeScratch {
  struct Symbol {
    int32_t id = -1;  // token, -1 for a byte the vocab lacks
    int32_t prev = -1;
    int32_t next = -1;
    bool alive = true;
  };
  struct Pair {
    int32_t rank = 0;
    int32_t left = 0;
    int32_t right = 0;
    int32_t left_id = 0;   // the sides' tokens when queued: the pair is stale once
    int32_t right_id = 0;  // either side has merged
    int32_t result = 0;
  };
  std::vector<Symbol> symbols;
  std::vector<Pair> heap;
};

void bpe_encode_word(const Vocab& v, std::string_view word, BpeScratch& scratch, std::vector<int32_t>& out);

}  // namespace mt::tok
