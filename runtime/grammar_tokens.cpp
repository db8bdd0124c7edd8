#include "runtime/grammar_tokens.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "core/check.h"

namespace mt {

TokenVocab::TokenVocab(std::vector<std::string> pieces, std::vector<int32_t> eog)
    : pieces_(std::move(pieces)), eog_(std::move(eog)), is_eog_(pieces_.size(), 0) {
  for (int32_t id : eog_) {
    MT_CHECK(id >= 0 && static_cast<size_t>(id) < pieces_.size());
    is_eog_[static_cast<size_t>(id)] = 1;
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i < pieces_.size(); ++i) {
    // Longer pieces are left out: no grammar step needs them, and depth_ is 16 bits.
    if (!pieces_[i].empty() && !is_eog_[i] && pieces_[i].size() < 1024) ids.push_back(static_cast<int32_t>(i));
  }
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    const std::string& pa = pieces_[static_cast<size_t>(a)];
    const std::string& pb = pieces_[static_cast<size_t>(b)];
    return pa != pb ? pa < pb : a < b;
  });
  // Preorder: the sorted pieces visit the trie depth first; `open` holds the path's nodes.
  std::vector<uint32_t> open;
  std::string_view prev;
  std::vector<std::vector<int32_t>> toks;
  for (int32_t id : ids) {
    const std::string& p = pieces_[static_cast<size_t>(id)];
    size_t common = 0;
    while (common < prev.size() && common < p.size() && prev[common] == p[common]) ++common;
    while (open.size() > common) {
      end_[open.back()] = static_cast<uint32_t>(byte_.size());
      open.pop_back();
    }
    for (size_t d = common; d < p.size(); ++d) {
      open.push_back(static_cast<uint32_t>(byte_.size()));
      byte_.push_back(static_cast<uint8_t>(p[d]));
      depth_.push_back(static_cast<uint16_t>(d + 1));
      end_.push_back(0);
      toks.emplace_back();
    }
    toks[open.back()].push_back(id);
    max_depth_ = std::max<uint16_t>(max_depth_, static_cast<uint16_t>(p.size()));
    prev = p;
  }
  for (uint32_t n : open) end_[n] = static_cast<uint32_t>(byte_.size());
  tok_begin_.push_back(0);
  for (const auto& t : toks) {
    tok_ids_.insert(tok_ids_.end(), t.begin(), t.end());
    tok_begin_.push_back(static_cast<uint32_t>(tok_ids_.size()));
  }
}

std::shared_ptr<const TokenVocab> TokenVocab::from_tokenizer(const Tokenizer& tokenizer) {
  std::vector<std::string> pieces(tokenizer.n_vocab());
  std::vector<int32_t> eog;
  for (uint32_t i = 0; i < tokenizer.n_vocab(); ++i) {
    const auto id = static_cast<int32_t>(i);
    if (tokenizer.is_eog(id)) eog.push_back(id);
    const TokenType type = tokenizer.token_type(id);
    if (type == TokenType::kControl || type == TokenType::kUnknown || type == TokenType::kUnused) continue;
    pieces[i] = tokenizer.token_to_piece(id, false);
  }
  return std::make_shared<const TokenVocab>(std::move(pieces), std::move(eog));
}

TokenGrammar::TokenGrammar(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocab> vocab)
    : vocab_(std::move(vocab)), dfa_(std::move(grammar)), path_(vocab_->max_depth_ + 1u) {}

const std::vector<uint64_t>& TokenGrammar::mask(int32_t state) {
  MT_CHECK(state >= 0);
  if (auto it = masks_.find(state); it != masks_.end()) return it->second;
  const size_t words = (vocab_->n_vocab() + 63) / 64;
  if ((masks_.size() + 1) * words * sizeof(uint64_t) > kMaskCacheBytes) masks_.clear();
  std::vector<uint64_t>& bits = masks_[state];
  bits.assign(words, 0);
  compute_mask(state, &bits);
  return bits;
}

void TokenGrammar::compute_mask(int32_t state, std::vector<uint64_t>* bits) {
  const TokenVocab& v = *vocab_;
  auto set = [&](int32_t id) { (*bits)[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63); };
  if (dfa_.accepting(state)) {
    for (int32_t id : v.eog_) set(id);
  }
  path_[0] = state;
  const auto n = static_cast<uint32_t>(v.byte_.size());
  for (uint32_t i = 0; i < n;) {
    const uint16_t d = v.depth_[i];
    const int32_t s = dfa_.next(path_[d - 1u], v.byte_[i]);
    if (s == GrammarDfa::kDead) {
      i = v.end_[i];
      continue;
    }
    path_[d] = s;
    for (uint32_t k = v.tok_begin_[i]; k < v.tok_begin_[i + 1]; ++k) set(v.tok_ids_[k]);
    ++i;
  }
}

int32_t TokenGrammar::advance(int32_t state, int32_t token) {
  if (state < 0 || token < 0 || static_cast<uint32_t>(token) >= vocab_->n_vocab()) return GrammarDfa::kDead;
  if (vocab_->is_eog(token)) return dfa_.accepting(state) ? state : GrammarDfa::kDead;
  const std::string& p = vocab_->piece(token);
  if (p.empty()) return GrammarDfa::kDead;
  return dfa_.walk(state, p);
}

uint32_t apply_token_mask(std::span<const uint64_t> mask, std::span<float> logits) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  uint32_t allowed = 0;
  for (size_t w = 0; w < mask.size(); ++w) {
    const uint64_t bits = mask[w];
    const size_t base = w * 64;
    const size_t n = std::min<size_t>(64, logits.size() - base);
    if (bits == ~uint64_t{0} && n == 64) {
      allowed += 64;
      continue;
    }
    for (size_t i = 0; i < n; ++i) {
      if ((bits >> i) & 1) {
        ++allowed;
      } else {
        logits[base + i] = kNegInf;
      }
    }
  }
  return allowed;
}

}  // namespace mt
