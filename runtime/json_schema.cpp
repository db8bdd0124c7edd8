#include "runtime/json_schema.h"

#include <nlohmann/json.hpp>

#include <map>
#include <set>

#include "core/check.h"

namespace mt {
namespace {

using Js = nlohmann::ordered_json;  // properties keep the schema's order
using Seq = GrammarBuilder::Seq;

constexpr int64_t kMaxLength = 4096;  // minLength / maxLength
constexpr int64_t kMaxItems = 256;    // minItems / maxItems
constexpr size_t kMaxProperties = 256;
constexpr int kMaxNesting = 64;       // schema nesting (not output nesting)
constexpr size_t kMaxRules = 200000;  // a schema that expands beyond this is refused

const std::set<std::string, std::less<>> kAnnotations = {"title",   "description", "default", "examples",
                                                          "$schema", "$id",         "$comment"};
const std::set<std::string, std::less<>> kKeywords = {
    "type",     "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "enum",
    "const",    "anyOf",      "oneOf",    "allOf",                "$ref",  "$defs",    "definitions",
    "minLength", "maxLength"};

Seq cat(std::initializer_list<Seq> parts) {
  Seq out;
  for (const Seq& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

class Compiler {
 public:
  explicit Compiler(const Js* root) : root_(root) {}

  StatusOr<std::shared_ptr<const Grammar>> run() {
    const int32_t top = b_.declare();
    refs_["#"] = top;
    auto body = compile(*root_, "", 0);
    if (!body.ok()) return body.status();
    b_.define(top, {{*body}});
    MT_RETURN_IF_ERROR(define_refs());
    return b_.build(top);
  }

  // Any JSON object: the grammar's root.
  std::shared_ptr<const Grammar> any_object() {
    auto g = b_.build(generic_object());
    MT_CHECK(g.ok());
    return *g;
  }

 private:
  Status bad(const std::string& path, const std::string& what) {
    return invalid_argument("json schema" + std::string(path.empty() ? "" : " at " + path) + ": " + what);
  }

  GrammarSym lit(std::string_view s) { return b_.rule({b_.literal(s)}); }

  // ws: "" | " " | "\n" followed by up to 20 spaces.
  GrammarSym ws() {
    if (ws_ >= 0) return ws_;
    int32_t indent = b_.rule({{}});
    for (int i = 0; i < 20; ++i) indent = b_.rule({{}, {b_.byte(' '), indent}});
    ws_ = b_.rule({{}, {b_.byte(' ')}, {b_.byte('\n'), indent}});
    return ws_;
  }

  // One JSON string character: unescaped UTF-8 (well formed) or an escape.
  GrammarSym character() {
    if (char_ >= 0) return char_;
    ByteSet ascii, cont, hex, esc;
    ascii.add_range(0x20, 0x7F);
    ascii.w['"' >> 6] &= ~(uint64_t{1} << ('"' & 63));
    ascii.w['\\' >> 6] &= ~(uint64_t{1} << ('\\' & 63));
    cont.add_range(0x80, 0xBF);
    hex.add_range('0', '9');
    hex.add_range('a', 'f');
    hex.add_range('A', 'F');
    for (char c : std::string_view("\"\\/bfnrt")) esc.add(static_cast<uint8_t>(c));
    auto range = [&](uint8_t lo, uint8_t hi) {
      ByteSet s;
      s.add_range(lo, hi);
      return b_.set(s);
    };
    const GrammarSym c = b_.set(cont), h = b_.set(hex);
    const GrammarSym escape = b_.rule({{b_.set(esc)}, {b_.byte('u'), h, h, h, h}});
    char_ = b_.rule({{b_.set(ascii)},
                     {b_.byte('\\'), escape},
                     {range(0xC2, 0xDF), c},
                     {b_.byte(0xE0), range(0xA0, 0xBF), c},
                     {range(0xE1, 0xEC), c, c},
                     {b_.byte(0xED), range(0x80, 0x9F), c},
                     {range(0xEE, 0xEF), c, c},
                     {b_.byte(0xF0), range(0x90, 0xBF), c, c},
                     {range(0xF1, 0xF3), c, c, c},
                     {b_.byte(0xF4), range(0x80, 0x8F), c, c}});
    return char_;
  }

  // A string of min..max characters (max < 0: no bound).
  GrammarSym string(int64_t min, int64_t max) {
    const GrammarSym q = b_.byte('"'), ch = character();
    // tail(k): the rest once k characters are written.
    int32_t tail;
    if (max < 0) {
      tail = b_.declare();
      b_.define(tail, {{q}, {ch, tail}});
    } else {
      tail = b_.rule({{q}});
    }
    for (int64_t k = (max < 0 ? min : max) - 1; k >= 0; --k) {
      tail = k >= min ? b_.rule({{q}, {ch, tail}}) : b_.rule({{ch, tail}});
    }
    return b_.rule({{q, tail}});
  }

  // up to n more digits
  GrammarSym digits(int n) {
    ByteSet d;
    d.add_range('0', '9');
    const GrammarSym ds = b_.set(d);
    int32_t r = b_.rule({{}});
    for (int i = 0; i < n; ++i) r = b_.rule({{}, {ds, r}});
    return r;
  }

  GrammarSym integer() {
    if (integer_ >= 0) return integer_;
    ByteSet nz, d;
    nz.add_range('1', '9');
    d.add_range('0', '9');
    const GrammarSym unsigned_int = b_.rule({{b_.byte('0')}, {b_.set(nz), digits(15)}});
    integer_ = b_.rule({{unsigned_int}, {b_.byte('-'), unsigned_int}});
    return integer_;
  }

  GrammarSym number() {
    if (number_ >= 0) return number_;
    ByteSet d, e, sign;
    d.add_range('0', '9');
    e.add('e');
    e.add('E');
    sign.add('+');
    sign.add('-');
    const GrammarSym frac = b_.rule({{}, {b_.byte('.'), b_.set(d), digits(15)}});
    const GrammarSym exp = b_.rule({{}, {b_.set(e), b_.set(d), digits(2)}, {b_.set(e), b_.set(sign), b_.set(d), digits(2)}});
    number_ = b_.rule({{integer(), frac, exp}});
    return number_;
  }

  // "{" members "}" where every member's value is `value` (any JSON value when < 0).
  GrammarSym object_of(GrammarSym value) {
    const GrammarSym w = ws();
    const GrammarSym member = b_.rule({{string(0, -1), w, b_.byte(':'), w, value}});
    const int32_t more = b_.declare();
    b_.define(more, {{w, b_.byte('}')}, {w, b_.byte(','), w, member, more}});
    return b_.rule({{b_.byte('{'), w, b_.byte('}')}, {b_.byte('{'), w, member, more}});
  }

  GrammarSym array_of(GrammarSym item, int64_t min, int64_t max) {
    const GrammarSym w = ws();
    const Seq next = {w, b_.byte(','), w, item};
    // tail(c): the rest after c items (c >= 1)
    int32_t tail;
    const int64_t top = max < 0 ? std::max<int64_t>(min, 1) : max;
    if (max < 0) {
      tail = b_.declare();
      b_.define(tail, {{}, cat({next, {tail}})});
    } else {
      tail = b_.rule({{}});
    }
    for (int64_t c = top - 1; c >= 1; --c) {
      tail = c >= min ? b_.rule({{}, cat({next, {tail}})}) : b_.rule({cat({next, {tail}})});
    }
    std::vector<Seq> body;
    if (max != 0) body.push_back({item, tail});
    if (min == 0) body.push_back({});
    return b_.rule({{b_.byte('['), w, b_.rule(std::move(body)), w, b_.byte(']')}});
  }

  GrammarSym generic_value() {
    if (value_ >= 0) return value_;
    value_ = b_.declare();
    const GrammarSym obj = object_of(value_);
    const GrammarSym arr = array_of(value_, 0, -1);
    b_.define(value_, {{obj}, {arr}, {string(0, -1)}, {number()}, b_.literal("true"), b_.literal("false"),
                       b_.literal("null")});
    return value_;
  }

  GrammarSym generic_object() {
    generic_value();
    return object_of(value_);
  }

  StatusOr<GrammarSym> compile(const Js& s, const std::string& path, int depth);
  StatusOr<GrammarSym> compile_type(const Js& s, const std::string& type, const std::string& path, int depth);
  StatusOr<GrammarSym> compile_object(const Js& s, const std::string& path, int depth);
  StatusOr<GrammarSym> compile_array(const Js& s, const std::string& path, int depth);
  StatusOr<GrammarSym> compile_ref(const std::string& ref, const std::string& path);
  StatusOr<int64_t> bound(const Js& s, const char* key, int64_t limit, int64_t fallback, const std::string& path);
  Status define_refs();

  const Js* root_;
  GrammarBuilder b_;
  int32_t ws_ = -1, char_ = -1, integer_ = -1, number_ = -1, value_ = -1;
  std::map<std::string, int32_t> refs_;   // declared rules per $ref
  std::vector<std::string> pending_;      // refs declared, not yet compiled
};

StatusOr<int64_t> Compiler::bound(const Js& s, const char* key, int64_t limit, int64_t fallback,
                                  const std::string& path) {
  auto it = s.find(key);
  if (it == s.end()) return fallback;
  if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > limit) {
    return bad(path, std::string("'") + key + "' must be an integer between 0 and " + std::to_string(limit));
  }
  return it->get<int64_t>();
}

StatusOr<GrammarSym> Compiler::compile(const Js& s, const std::string& path, int depth) {
  if (depth > kMaxNesting) return bad(path, "nested deeper than " + std::to_string(kMaxNesting) + " levels");
  if (b_.n_rules() > kMaxRules) return bad(path, "the schema is too large (over " + std::to_string(kMaxRules) + " grammar rules)");
  if (s.is_boolean()) {
    if (!s.get<bool>()) return bad(path, "the schema false admits no value");
    return generic_value();
  }
  if (!s.is_object()) return bad(path, "a schema must be an object");
  for (const auto& [key, value] : s.items()) {
    if (!kKeywords.contains(key) && !kAnnotations.contains(key)) return bad(path, "'" + key + "' is not supported");
  }
  if (auto it = s.find("$ref"); it != s.end()) {
    if (!it->is_string()) return bad(path, "'$ref' must be a string");
    return compile_ref(it->get<std::string>(), path);
  }
  for (const char* key : {"anyOf", "oneOf", "allOf"}) {
    auto it = s.find(key);
    if (it == s.end()) continue;
    if (!it->is_array() || it->empty()) return bad(path, std::string("'") + key + "' must be a non-empty list");
    if (std::string(key) == "allOf" && it->size() != 1) return bad(path, "'allOf' of more than one schema is not supported");
    std::vector<Seq> alts;
    for (size_t i = 0; i < it->size(); ++i) {
      auto sub = compile((*it)[i], path + "/" + key + "/" + std::to_string(i), depth + 1);
      if (!sub.ok()) return sub.status();
      alts.push_back({*sub});
    }
    return b_.rule(std::move(alts));
  }
  if (auto it = s.find("const"); it != s.end()) return lit(it->dump());
  if (auto it = s.find("enum"); it != s.end()) {
    if (!it->is_array() || it->empty()) return bad(path, "'enum' must be a non-empty list");
    std::vector<Seq> alts;
    for (const Js& v : *it) alts.push_back(b_.literal(v.dump()));
    return b_.rule(std::move(alts));
  }
  auto type = s.find("type");
  if (type == s.end()) {
    if (s.contains("properties") || s.contains("additionalProperties")) return compile_object(s, path, depth);
    if (s.contains("items")) return compile_array(s, path, depth);
    return generic_value();
  }
  if (type->is_string()) return compile_type(s, type->get<std::string>(), path, depth);
  if (!type->is_array() || type->empty()) return bad(path, "'type' must be a string or a non-empty list of strings");
  std::vector<Seq> alts;
  for (const Js& t : *type) {
    if (!t.is_string()) return bad(path, "'type' must be a string or a non-empty list of strings");
    auto sub = compile_type(s, t.get<std::string>(), path, depth);
    if (!sub.ok()) return sub.status();
    alts.push_back({*sub});
  }
  return b_.rule(std::move(alts));
}

StatusOr<GrammarSym> Compiler::compile_type(const Js& s, const std::string& type, const std::string& path,
                                            int depth) {
  if (type == "object") return compile_object(s, path, depth);
  if (type == "array") return compile_array(s, path, depth);
  if (type == "integer") return integer();
  if (type == "number") return number();
  if (type == "boolean") return b_.rule({b_.literal("true"), b_.literal("false")});
  if (type == "null") return lit("null");
  if (type == "string") {
    auto min = bound(s, "minLength", kMaxLength, 0, path);
    if (!min.ok()) return min.status();
    auto max = bound(s, "maxLength", kMaxLength, -1, path);
    if (!max.ok()) return max.status();
    if (*max >= 0 && *max < *min) return bad(path, "'maxLength' is below 'minLength'");
    return string(*min, *max);
  }
  return bad(path, "unknown type '" + type + "'");
}

StatusOr<GrammarSym> Compiler::compile_object(const Js& s, const std::string& path, int depth) {
  auto props = s.find("properties");
  auto extra = s.find("additionalProperties");
  const bool closed = extra == s.end() || (extra->is_boolean() && !extra->get<bool>());
  if (props == s.end() || (props->is_object() && props->empty())) {
    // No properties: {"type": "object"} or additionalProperties true is any object.
    if (extra == s.end() || (extra->is_boolean() && extra->get<bool>())) return generic_object();
    if (closed) {
      const GrammarSym w = ws();
      return b_.rule({{b_.byte('{'), w, b_.byte('}')}});
    }
    auto value = compile(*extra, path + "/additionalProperties", depth + 1);
    if (!value.ok()) return value.status();
    return object_of(*value);
  }
  if (!props->is_object()) return bad(path, "'properties' must be an object");
  if (!closed) return bad(path, "'additionalProperties' other than false next to 'properties' is not supported");
  if (props->size() > kMaxProperties) return bad(path, "more than " + std::to_string(kMaxProperties) + " properties");
  std::set<std::string> required;
  if (auto req = s.find("required"); req != s.end()) {
    if (!req->is_array()) return bad(path, "'required' must be a list of property names");
    for (const Js& r : *req) {
      if (!r.is_string() || !props->contains(r.get<std::string>())) {
        return bad(path, "'required' names " + r.dump() + ", which is not in 'properties'");
      }
      required.insert(r.get<std::string>());
    }
  }
  const GrammarSym w = ws();
  std::vector<Seq> kv;
  std::vector<bool> optional;
  for (const auto& [name, sub] : props->items()) {
    auto value = compile(sub, path + "/properties/" + name, depth + 1);
    if (!value.ok()) return value.status();
    kv.push_back(cat({b_.literal(Js(name).dump()), {w, b_.byte(':'), w, *value}}));
    optional.push_back(!required.contains(name));
  }
  // first[i] / later[i]: the members from property i on, before any member / after one.
  const size_t k = kv.size();
  std::vector<int32_t> first(k + 1), later(k + 1);
  first[k] = later[k] = b_.rule({{}});
  for (size_t i = k; i-- > 0;) {
    std::vector<Seq> a, b;
    size_t j = i;
    for (; j < k; ++j) {
      a.push_back(cat({kv[j], {later[j + 1]}}));
      b.push_back(cat({{w, b_.byte(','), w}, kv[j], {later[j + 1]}}));
      if (!optional[j]) break;
    }
    if (j == k) {  // every property from i on is optional
      a.push_back({});
      b.push_back({});
    }
    first[i] = b_.rule(std::move(a));
    later[i] = b_.rule(std::move(b));
  }
  return b_.rule({{b_.byte('{'), w, first[0], w, b_.byte('}')}});
}

StatusOr<GrammarSym> Compiler::compile_array(const Js& s, const std::string& path, int depth) {
  auto min = bound(s, "minItems", kMaxItems, 0, path);
  if (!min.ok()) return min.status();
  auto max = bound(s, "maxItems", kMaxItems, -1, path);
  if (!max.ok()) return max.status();
  if (*max >= 0 && *max < *min) return bad(path, "'maxItems' is below 'minItems'");
  GrammarSym item = -1;
  if (auto it = s.find("items"); it != s.end()) {
    auto sub = compile(*it, path + "/items", depth + 1);
    if (!sub.ok()) return sub.status();
    item = *sub;
  } else {
    item = generic_value();
  }
  return array_of(item, *min, *max);
}

StatusOr<GrammarSym> Compiler::compile_ref(const std::string& ref, const std::string& path) {
  if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
  const bool defs = ref.starts_with("#/$defs/"), definitions = ref.starts_with("#/definitions/");
  if (!defs && !definitions) return bad(path, "'$ref' " + ref + " is not supported (only #, #/$defs/NAME, #/definitions/NAME)");
  const std::string name = ref.substr(defs ? 8 : 14);
  const Js* table = nullptr;
  if (root_->is_object()) {
    if (auto it = root_->find(defs ? "$defs" : "definitions"); it != root_->end()) table = &*it;
  }
  if (table == nullptr || !table->is_object() || !table->contains(name)) {
    return bad(path, "'$ref' " + ref + " names no definition");
  }
  const int32_t r = b_.declare();
  refs_[ref] = r;
  pending_.push_back(ref);
  return r;
}

Status Compiler::define_refs() {
  while (!pending_.empty()) {
    const std::string ref = pending_.back();
    pending_.pop_back();
    const bool defs = ref.starts_with("#/$defs/");
    const std::string name = ref.substr(defs ? 8 : 14);
    const Js& def = root_->at(defs ? "$defs" : "definitions").at(name);
    auto body = compile(def, "/" + ref.substr(2), 1);
    if (!body.ok()) return body.status();
    b_.define(refs_[ref], {{*body}});
  }
  return Status::ok_status();
}

}  // namespace

StatusOr<std::shared_ptr<const Grammar>> json_schema_grammar(std::string_view schema_json) {
  Js schema = Js::parse(schema_json, nullptr, false);
  if (schema.is_discarded()) return invalid_argument("json schema: not valid JSON");
  if (schema.is_object()) {  // the definitions tables are not schemas of the value
    for (const char* table : {"$defs", "definitions"}) {
      if (auto it = schema.find(table); it != schema.end() && !it->is_object()) {
        return invalid_argument(std::string("json schema: '") + table + "' must be an object");
      }
    }
  }
  Compiler c(&schema);
  return c.run();
}

std::shared_ptr<const Grammar> json_object_grammar() {
  static const std::shared_ptr<const Grammar> g = [] {
    const Js none;
    Compiler c(&none);
    return c.any_object();
  }();
  return g;
}

}  // namespace mt
