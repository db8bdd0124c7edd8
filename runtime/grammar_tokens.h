// Grammar-constrained sampling at the token level. TokenVocab holds, once per tokenizer,
// every token's bytes in a trie laid out in preorder (each node: its byte, its depth, where
// its subtree ends, the tokens ending there). TokenGrammar answers, for a GrammarDfa state,
// which tokens the grammar lets come next: one walk of the trie that follows the DFA byte
// by byte and skips a whole subtree at the first byte the grammar refuses, so a token
// costs at most one table lookup per byte it does not share with its trie neighbours. The
// answer is a bitset over the vocabulary, cached per state (generation revisits states:
// inside a string, between fields).
// Rules: a token with no bytes (a control token) is never allowed; an end-of-generation
// token is allowed exactly when the bytes so far form a complete sentence.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/grammar.h"
#include "tokenizer/tokenizer.h"

namespace mt {

class TokenVocab {
 public:
  // pieces[id]: the token's bytes ("" never matches); eog: end-of-generation ids.
  TokenVocab(std::vector<std::string> pieces, std::vector<int32_t> eog);
  static std::shared_ptr<const TokenVocab> from_tokenizer(const Tokenizer& tokenizer);

  uint32_t n_vocab() const { return static_cast<uint32_t>(pieces_.size()); }
  const std::string& piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }
  std::span<const int32_t> eog() const { return eog_; }
  bool is_eog(int32_t id) const { return is_eog_[static_cast<size_t>(id)] != 0; }

 private:
  friend class TokenGrammar;
  std::vector<std::string> pieces_;
  std::vector<int32_t> eog_;
  std::vector<uint8_t> is_eog_;
  // The trie in preorder; the root is implicit (depth 0).
  std::vector<uint8_t> byte_;
  std::vector<uint16_t> depth_;     // >= 1
  std::vector<uint32_t> end_;       // one past the node's subtree
  std::vector<uint32_t> tok_begin_; // (n_nodes + 1) offsets into tok_ids_
  std::vector<int32_t> tok_ids_;
  uint16_t max_depth_ = 0;
};

class TokenGrammar {
 public:
  TokenGrammar(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocab> vocab);

  static constexpr int32_t start() { return GrammarDfa::start(); }
  // The tokens `state` allows: n_vocab bits (bit i of word i / 64). Valid until the next call.
  const std::vector<uint64_t>& mask(int32_t state);
  // The state after token; GrammarDfa::kDead when the grammar does not allow it. An
  // end-of-generation token keeps an accepting state.
  int32_t advance(int32_t state, int32_t token);
  bool accepting(int32_t state) const { return dfa_.accepting(state); }
  // Complete and nothing may follow: generation is over.
  bool done(int32_t state) const { return dfa_.accepting(state) && !dfa_.can_continue(state); }
  bool overflowed() const { return dfa_.overflowed(); }
  const TokenVocab& vocab() const { return *vocab_; }

 private:
  void compute_mask(int32_t state, std::vector<uint64_t>* bits);

  std::shared_ptr<const TokenVocab> vocab_;
  GrammarDfa dfa_;
  std::unordered_map<int32_t, std::vector<uint64_t>> masks_;
  std::vector<int32_t> path_;  // the DFA state at each trie depth during a walk
  static constexpr size_t kMaskCacheBytes = size_t{64} << 20;
};

// Sets every logit `mask` does not allow to -inf; returns how many stay allowed.
uint32_t apply_token_mask(std::span<const uint64_t> mask, std::span<float> logits);

}  // namespace mt
