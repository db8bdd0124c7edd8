#include "runtime/grammar.h"

#include <algorithm>

#include "core/check.h"

namespace mt {

int32_t GrammarBuilder::declare() {
  rules_.emplace_back();
  defined_.push_back(false);
  return static_cast<int32_t>(rules_.size() - 1);
}

void GrammarBuilder::define(int32_t rule, std::vector<Seq> alts) {
  MT_CHECK(rule >= 0 && static_cast<size_t>(rule) < rules_.size() && !defined_[static_cast<size_t>(rule)]);
  rules_[static_cast<size_t>(rule)] = std::move(alts);
  defined_[static_cast<size_t>(rule)] = true;
}

GrammarSym GrammarBuilder::set(const ByteSet& s) {
  auto it = std::find(sets_.begin(), sets_.end(), s);
  if (it == sets_.end()) it = sets_.insert(sets_.end(), s);
  return ~static_cast<int32_t>(it - sets_.begin());
}

GrammarSym GrammarBuilder::byte(uint8_t b) {
  ByteSet s;
  s.add(b);
  return set(s);
}

GrammarBuilder::Seq GrammarBuilder::literal(std::string_view text) {
  Seq seq;
  for (char c : text) seq.push_back(byte(static_cast<uint8_t>(c)));
  return seq;
}

StatusOr<std::shared_ptr<const Grammar>> GrammarBuilder::build(int32_t root) {
  if (root < 0 || static_cast<size_t>(root) >= rules_.size()) return invalid_argument("grammar: unknown root rule");
  auto g = std::make_shared<Grammar>();
  g->sets_ = sets_;
  g->root_ = root;
  g->alts_.resize(rules_.size());
  for (size_t r = 0; r < rules_.size(); ++r) {
    if (!defined_[r] || rules_[r].empty()) {
      return invalid_argument("grammar: rule " + std::to_string(r) + " has no alternative");
    }
    for (const Seq& alt : rules_[r]) {
      g->alts_[r].push_back(static_cast<uint32_t>(g->elems_.size()));
      for (GrammarSym s : alt) {
        MT_CHECK(s >= 0 ? static_cast<size_t>(s) < rules_.size() : static_cast<size_t>(~s) < sets_.size());
        g->elems_.push_back(s);
      }
      g->elems_.push_back(Grammar::kEnd);
    }
  }
  return std::shared_ptr<const Grammar>(std::move(g));
}

size_t GrammarDfa::VecHash::operator()(const std::vector<int32_t>& v) const {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ v.size();
  for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 0x100000001B3ull + (h >> 29);
  return static_cast<size_t>(h);
}

GrammarDfa::GrammarDfa(std::shared_ptr<const Grammar> grammar) : g_(std::move(grammar)) {
  nodes_.push_back({-1, 0, 0});  // node 0: the empty stack (the sentence is complete)
  seen_.push_back(0);
  std::vector<int32_t> leaves;
  ++stamp_;
  for (uint32_t a : g_->alts_[static_cast<size_t>(g_->root_)]) expand(node(static_cast<int32_t>(a), 0), &leaves);
  const int32_t s = intern(std::move(leaves));
  MT_CHECK(s == 0);
}

int32_t GrammarDfa::node(int32_t pos, int32_t parent) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
  auto [it, fresh] = node_ids_.try_emplace(key, static_cast<int32_t>(nodes_.size()));
  if (fresh) {
    nodes_.push_back({pos, parent, nodes_[static_cast<size_t>(parent)].depth + 1});
    seen_.push_back(0);
  }
  return it->second;
}

// Adds to *leaves every stack `start` expands to whose top is a byte set (or the empty
// stack). seen_ (stamped per computation) keeps each node once.
void GrammarDfa::expand(int32_t start, std::vector<int32_t>* leaves) {
  work_.clear();
  work_.push_back(start);
  while (!work_.empty()) {
    const int32_t n = work_.back();
    work_.pop_back();
    if (seen_[static_cast<size_t>(n)] == stamp_) continue;
    seen_[static_cast<size_t>(n)] = stamp_;
    if (n == 0) {
      leaves->push_back(0);
      continue;
    }
    const Node nd = nodes_[static_cast<size_t>(n)];
    const int32_t e = g_->elems_[static_cast<size_t>(nd.pos)];
    if (e == Grammar::kEnd) {
      work_.push_back(nd.parent);
    } else if (e < 0) {
      leaves->push_back(n);
    } else if (nd.depth >= kMaxDepth) {
      overflowed_ = true;  // too deep a nesting: this path is cut
    } else {
      const bool tail = g_->elems_[static_cast<size_t>(nd.pos) + 1] == Grammar::kEnd;
      const int32_t cont = tail ? nd.parent : node(nd.pos + 1, nd.parent);
      for (uint32_t a : g_->alts_[static_cast<size_t>(e)]) work_.push_back(node(static_cast<int32_t>(a), cont));
    }
  }
}

int32_t GrammarDfa::intern(std::vector<int32_t> leaves) {
  std::sort(leaves.begin(), leaves.end());
  leaves.erase(std::unique(leaves.begin(), leaves.end()), leaves.end());
  if (leaves.empty()) return kDead;
  if (leaves.size() > kMaxStacks) {
    overflowed_ = true;
    leaves.resize(kMaxStacks);
  }
  if (auto it = state_ids_.find(leaves); it != state_ids_.end()) return it->second;
  if (states_.size() >= kMaxStates) {
    overflowed_ = true;
    return kDead;
  }
  State s;
  for (int32_t n : leaves) {
    if (n == 0) {
      s.accepting = true;
      continue;
    }
    s.can_continue = true;
    s.firsts.merge(g_->sets_[static_cast<size_t>(~g_->elems_[static_cast<size_t>(nodes_[static_cast<size_t>(n)].pos)])]);
  }
  s.leaves = leaves;
  const auto id = static_cast<int32_t>(states_.size());
  states_.push_back(std::move(s));
  state_ids_.emplace(std::move(leaves), id);
  trans_.resize(states_.size() * 256, kUnknown);
  return id;
}

int32_t GrammarDfa::compute(int32_t state, uint8_t byte) {
  int32_t result = kDead;
  if (states_[static_cast<size_t>(state)].firsts.has(byte)) {
    std::vector<int32_t> leaves;
    ++stamp_;
    const std::vector<int32_t> from = states_[static_cast<size_t>(state)].leaves;  // intern may grow states_
    for (int32_t n : from) {
      if (n == 0) continue;
      const Node nd = nodes_[static_cast<size_t>(n)];
      if (g_->sets_[static_cast<size_t>(~g_->elems_[static_cast<size_t>(nd.pos)])].has(byte)) {
        expand(node(nd.pos + 1, nd.parent), &leaves);
      }
    }
    result = intern(std::move(leaves));
  }
  trans_[static_cast<size_t>(state) * 256 + byte] = result;
  return result;
}

int32_t GrammarDfa::walk(int32_t state, std::string_view bytes) {
  for (char c : bytes) {
    if (state == kDead) break;
    state = next(state, static_cast<uint8_t>(c));
  }
  return state;
}

}  // namespace mt
