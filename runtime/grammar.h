// Grammar: a context-free grammar over bytes (rules of alternatives of symbols, a symbol
// being a rule or a set of bytes), and GrammarDfa, the deterministic automaton that
// matches it, built lazily one transition at a time.
//
// A DFA state is the set of parse stacks that the bytes so far leave open; a stack is an
// interned linked list of "continue at this symbol" nodes, so stacks share their tails and
// compare by id. Moving by one byte advances every stack whose top byte set holds it and
// expands rule references until each stack's top is a byte set again (a reference in tail
// position replaces its caller's frame: right recursion never deepens a stack). The
// resulting set is interned, so each (state, byte) pair is computed once and afterwards is
// one table lookup: walking a token's bytes costs a few loads.
// Invariants: state 0 is the start; kDead means the bytes cannot be continued into a
// sentence; the limits (states, stack depth, stacks per state) cut paths off rather than
// grow without bound, and overflowed() then says so.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace mt {

struct ByteSet {
  uint64_t w[4] = {0, 0, 0, 0};
  void add(uint8_t b) { w[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (unsigned b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  bool has(uint8_t b) const { return (w[b >> 6] >> (b & 63)) & 1; }
  void merge(const ByteSet& o) {
    for (int i = 0; i < 4; ++i) w[i] |= o.w[i];
  }
  bool operator==(const ByteSet& o) const = default;
};

// A symbol of an alternative: a rule id (>= 0) or ~index of a byte set (< 0).
using GrammarSym = int32_t;

class Grammar {
 public:
  int32_t root() const { return root_; }
  size_t n_rules() const { return alts_.size(); }

 private:
  friend class GrammarBuilder;
  friend class GrammarDfa;
  static constexpr int32_t kEnd = INT32_MIN;  // ends an alternative in elems_
  std::vector<ByteSet> sets_;
  std::vector<int32_t> elems_;               // symbols, each alternative ended by kEnd
  std::vector<std::vector<uint32_t>> alts_;  // per rule: where its alternatives start in elems_
  int32_t root_ = 0;
};

class GrammarBuilder {
 public:
  using Seq = std::vector<GrammarSym>;
  int32_t declare();  // a rule defined later (for recursion)
  void define(int32_t rule, std::vector<Seq> alts);
  int32_t rule(std::vector<Seq> alts) {
    const int32_t r = declare();
    define(r, std::move(alts));
    return r;
  }
  GrammarSym set(const ByteSet& s);  // equal sets share one index
  GrammarSym byte(uint8_t b);
  Seq literal(std::string_view text);
  size_t n_rules() const { return rules_.size(); }
  // InvalidArgument when a declared rule has no alternative or the root is unknown.
  StatusOr<std::shared_ptr<const Grammar>> build(int32_t root);

 private:
  std::vector<ByteSet> sets_;
  std::vector<std::vector<Seq>> rules_;
  std::vector<bool> defined_;
};

class GrammarDfa {
 public:
  static constexpr int32_t kDead = -1;
  static constexpr uint32_t kMaxStates = 1u << 15;
  static constexpr uint32_t kMaxDepth = 256;   // nodes per stack
  static constexpr uint32_t kMaxStacks = 2048; // open stacks per state

  explicit GrammarDfa(std::shared_ptr<const Grammar> grammar);

  static constexpr int32_t start() { return 0; }
  int32_t next(int32_t state, uint8_t byte) {
    const int32_t t = trans_[static_cast<size_t>(state) * 256 + byte];
    return t != kUnknown ? t : compute(state, byte);
  }
  // kDead as soon as a byte cannot follow.
  int32_t walk(int32_t state, std::string_view bytes);
  bool accepting(int32_t state) const { return states_[static_cast<size_t>(state)].accepting; }
  bool can_continue(int32_t state) const { return states_[static_cast<size_t>(state)].can_continue; }
  size_t n_states() const { return states_.size(); }
  bool overflowed() const { return overflowed_; }

 private:
  static constexpr int32_t kUnknown = -2;
  struct Node {
    int32_t pos;     // the symbol to continue at (an index of elems_)
    int32_t parent;  // the node to return to when the alternative ends; 0: the empty stack
    uint32_t depth;
  };
  struct State {
    std::vector<int32_t> leaves;  // sorted node ids, each topped by a byte set (0: accepted)
    ByteSet firsts;               // the bytes some leaf takes
    bool accepting = false, can_continue = false;
  };
  struct VecHash {
    size_t operator()(const std::vector<int32_t>& v) const;
  };

  int32_t compute(int32_t state, uint8_t byte);
  int32_t node(int32_t pos, int32_t parent);
  void expand(int32_t start, std::vector<int32_t>* leaves);
  int32_t intern(std::vector<int32_t> leaves);

  std::shared_ptr<const Grammar> g_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> node_ids_;
  std::vector<uint32_t> seen_;  // per node: the expansion that last reached it
  uint32_t stamp_ = 0;
  std::vector<int32_t> work_;
  std::vector<State> states_;
  std::unordered_map<std::vector<int32_t>, int32_t, VecHash> state_ids_;
  std::vector<int32_t> trans_;  // (n_states, 256): kUnknown until computed
  bool overflowed_ = false;
};

}  // namespace mt
