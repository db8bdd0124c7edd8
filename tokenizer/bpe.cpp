#include "tokenizer/bpe.h"

#include <algorithm>

#include "tokenizer/byte_level.h"

namespace mt::tok {
namespace {

using Pair = BpeScratch::Pair;

// std heap order: the top is the lowest rank, then the leftmost pair.
bool after(const Pair& a, const Pair& b) { return a.rank > b.rank || (a.rank == b.rank && a.left > b.left); }

void queue_pair(const Vocab& v, BpeScratch& s, int32_t left, int32_t right) {
  if (left < 0 || right < 0) return;
  const int32_t l = s.symbols[left].id;
  const int32_t r = s.symbols[right].id;
  if (l < 0 || r < 0) return;
  const MergeInfo* m = v.find_merge(l, r);
  if (m == nullptr) return;
  s.heap.push_back({m->rank, left, right, l, r, m->result});
  std::push_heap(s.heap.begin(), s.heap.end(), after);
}

}  // namespace

void bpe_encode_word(const Vocab& v, std::string_view word, BpeScratch& s, std::vector<int32_t>& out) {
  if (word.empty()) return;
  if (v.ignore_merges) {
    const int32_t whole = v.find(byte_level_encode(word));
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  s.symbols.clear();
  s.heap.clear();
  for (size_t i = 0; i < word.size(); ++i) {
    const auto idx = static_cast<int32_t>(i);
    s.symbols.push_back({v.byte_token[static_cast<uint8_t>(word[i])], idx - 1,
                         i + 1 < word.size() ? idx + 1 : -1, true});
  }
  for (size_t i = 1; i < word.size(); ++i) queue_pair(v, s, static_cast<int32_t>(i - 1), static_cast<int32_t>(i));

  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), after);
    const Pair p = s.heap.back();
    s.heap.pop_back();
    BpeScratch::Symbol& l = s.symbols[p.left];
    BpeScratch::Symbol& r = s.symbols[p.right];
    if (!l.alive || !r.alive || l.id != p.left_id || r.id != p.right_id || l.next != p.right) continue;
    l.id = p.result;
    r.alive = false;
    l.next = r.next;
    if (r.next >= 0) s.symbols[r.next].prev = p.left;
    queue_pair(v, s, l.prev, p.left);
    queue_pair(v, s, p.left, l.next);
  }

  for (int32_t i = 0; i >= 0; i = s.symbols[i].next) {
    if (s.symbols[i].id >= 0) out.push_back(s.symbols[i].id);
  }
}

}  // namespace mt::tok
