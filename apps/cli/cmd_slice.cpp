// moetier slice: a GGUF with only the first N blocks of another (embeddings, output norm
// and head, tokenizer and every other key kept; `{arch}.block_count` set to N, per-block
// metadata arrays cut to N entries, MTP/NextN blocks dropped). Made for drafts: the first
// layers of a model, exiting early into its own head, share its vocabulary token for token
// and guess its next tokens cheaply (`run --draft-model`).
#include <CLI/CLI.hpp>

#include <charconv>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "apps/cli/commands.h"
#include "core/status.h"
#include "gguf/reader.h"
#include "gguf/writer.h"

namespace mt::cli {
namespace {

struct SliceFlags {
  std::string model, out;
  uint32_t layers = 0;
};

// The block index of "blk.<i>.<rest>", or -1.
int64_t block_of(std::string_view name) {
  if (!name.starts_with("blk.")) return -1;
  name.remove_prefix(4);
  int64_t i = -1;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), i);
  return ec == std::errc() && end != name.data() + name.size() && *end == '.' ? i : -1;
}

int run(const SliceFlags& f) {
  auto file = gguf::GgufFile::open(f.model);
  if (!file.ok()) return fail("slice", file.status());
  auto arch = file->get_string("general.architecture");
  if (!arch.ok()) return fail("slice", arch.status());
  const std::string prefix = std::string(*arch) + ".";
  auto blocks = file->get_u32(prefix + "block_count");
  if (!blocks.ok()) return fail("slice", blocks.status());
  auto nextn = file->get_u32_or(prefix + "nextn_predict_layers", 0);
  if (!nextn.ok()) return fail("slice", nextn.status());
  const uint32_t trunk = *blocks - std::min(*nextn, *blocks);
  if (f.layers == 0 || f.layers >= trunk) {
    return fail("slice", invalid_argument("--layers must be in [1, " + std::to_string(trunk) + "): '" + f.model + "' has " +
                                          std::to_string(trunk) + " blocks"));
  }
  gguf::GgufWriter writer(file->alignment());
  for (const gguf::KeyValue& kv : file->metadata()) {
    const std::string key(kv.key);
    const gguf::Array* array = kv.value.array();
    if (key == prefix + "block_count") {
      writer.set_u32(key, f.layers);
    } else if (key == prefix + "nextn_predict_layers") {
      writer.set_u32(key, 0);
    } else if (array != nullptr && key.starts_with(prefix) && array->count == *blocks &&
               array->elem_type != gguf::ValueType::kArray) {  // one entry per block
      gguf::Value cut = kv.value;
      gguf::Array& a = std::get<gguf::Array>(cut.data);
      a.count = f.layers;
      if (a.elem_type == gguf::ValueType::kString) a.strings.resize(f.layers);
      else a.raw = a.raw.first(static_cast<size_t>(f.layers) * gguf::scalar_size(a.elem_type));
      writer.set(key, cut);
    } else {
      writer.set(key, kv.value);
    }
  }
  uint32_t kept = 0;
  for (const gguf::TensorInfo& t : file->tensors()) {
    const int64_t b = block_of(t.name);
    if (b >= static_cast<int64_t>(f.layers)) continue;
    const std::span<const uint8_t> data = file->tensor_data(t);
    const uint64_t row_bytes = t.row_bytes();
    std::vector<uint64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
    writer.add_tensor(std::string(t.name), t.type, ne, [data, row_bytes](uint64_t first, uint64_t n, uint8_t* dst) {
      std::memcpy(dst, data.data() + first * row_bytes, n * row_bytes);
    });
    ++kept;
  }
  if (Status s = writer.write(f.out); !s.ok()) return fail("slice", s);
  std::fprintf(stderr, "moetier slice: %s: blocks 0-%u of %u (%u tensors) -> %s\n", f.model.c_str(), f.layers - 1, trunk,
               kept, f.out.c_str());
  return 0;
}

}  // namespace

Runner add_slice(CLI::App& app) {
  auto f = std::make_shared<SliceFlags>();
  app.add_option("-m,--model", f->model, "the GGUF to cut")->required();
  app.add_option("--layers", f->layers, "blocks to keep, from the first (1 to the model's blocks - 1)")->required();
  app.add_option("-o,--output", f->out, "the GGUF to write")->required();
  return [f] { return run(*f); };
}

}  // namespace mt::cli
