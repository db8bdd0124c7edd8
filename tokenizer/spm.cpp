#include "tokenizer/spm.h"

#include <queue>

#include "tokenizer/unicode.h"

namespace mt::tok {
namespace {

struct Symbol {
  uint32_t start = 0;  // byte offset in the text
  uint32_t n = 0;      // bytes; 0 once merged into its left neighbour
  int32_t prev = -1;
  int32_t next = -1;
};

struct Bigram {
  float score = 0;
  int32_t left = 0;
  int32_t right = 0;
  uint32_t n = 0;  // bytes of the pair when it was queued (stale once either side changed)
};

// Highest score first; among equal scores the leftmost pair.
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

void spm_encode(const Vocab& v, std::string_view text, std::vector<int32_t>& out) {
  std::vector<Symbol> sym;
  sym.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const uint32_t n = decode_utf8(text, pos).len;  // an invalid byte is a symbol of its own
    const auto i = static_cast<int32_t>(sym.size());
    sym.push_back({static_cast<uint32_t>(pos), n, i - 1, -1});
    if (i > 0) sym[i - 1].next = i;
    pos += n;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  auto try_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t n = sym[left].n + sym[right].n;
    const int32_t id = v.find(text.substr(sym[left].start, n));
    if (id >= 0) queue.push({v.score[id], left, right, n});
  };
  for (size_t i = 1; i < sym.size(); ++i) try_pair(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.n) continue;  // a side changed since queued
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_pair(l.prev, b.left);
    try_pair(b.left, l.next);
  }

  for (int32_t i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) {
    const std::string_view piece = text.substr(sym[i].start, sym[i].n);
    const int32_t id = v.find(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (char c : piece) {
      const int32_t byte_id = v.byte_token[static_cast<uint8_t>(c)];
      if (byte_id >= 0) {
        out.push_back(byte_id);
      } else if (v.unk >= 0) {
        out.push_back(v.unk);
      }
    }
  }
}

}  // namespace mt::tok
