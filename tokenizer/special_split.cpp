#include "tokenizer/special_split.h"

#include <cctype>

namespace mt::tok {

std::vector<Fragment> split_special(const Vocab& v, std::string_view text, bool parse_special) {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({-1, text});
  std::vector<Fragment> next;
  size_t raw_left = 1;  // raw fragments; once none is left no token can match
  for (int32_t id : v.special_by_length) {
    if (raw_left == 0) break;
    const TokenType type = v.type[id];
    if (!parse_special && (type == TokenType::kControl || type == TokenType::kUnknown)) continue;
    const std::string_view token = v.text[id];
    bool matched = false;
    next.clear();
    raw_left = 0;
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      std::string_view rest = f.text;
      for (size_t pos = rest.find(token); pos != std::string_view::npos; pos = rest.find(token)) {
        matched = true;
        if (pos > 0) {
          next.push_back({-1, rest.substr(0, pos)});
          ++raw_left;
        }
        next.push_back({id, {}});
        rest.remove_prefix(pos + token.size());
        if (v.rstrip[id]) {
          while (!rest.empty() && std::isspace(static_cast<unsigned char>(rest.front()))) rest.remove_prefix(1);
        }
      }
      if (!rest.empty()) {
        next.push_back({-1, rest});
        ++raw_left;
      }
    }
    if (matched) frags.swap(next);
  }
  return frags;
}

}  // namespace mt::tok
