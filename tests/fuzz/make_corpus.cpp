// gguf_make_corpus OUT_DIR [GGUF...]: writes the fuzzer's seed corpus.
//
// Into OUT_DIR: every generated corrupt case (tests/data/gguf_corrupt/gguf_cases.h) as
// corrupt_<name>.gguf, the valid hand-built seeds, a small writer-made MoE file with
// expert tensors (so the geometry code sees valid input), and for each GGUF given a shrunk
// copy: the same keys, types and tensors, every array cut to its first few elements.
// Real vocab files are megabytes of token strings; shrunk, they keep their structure at a
// few KB, which is what lets a 60-second fuzz run mutate them thousands of times a second.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "gguf/reader.h"
#include "gguf/writer.h"
#include "tests/data/gguf_corrupt/gguf_cases.h"

namespace mt::gguf {
namespace {

constexpr uint64_t kKeepElements = 6;

bool write_bytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return out.good();
}

// The value with every array (nested ones too) cut to its first kKeepElements elements.
// The result views the source file, like the source value.
Value shrink(const Value& v) {
  const Array* a = v.array();
  if (a == nullptr) return v;
  Array cut;
  cut.elem_type = a->elem_type;
  cut.count = std::min(a->count, kKeepElements);
  if (a->elem_type == ValueType::kString) {
    cut.strings.assign(a->strings.begin(), a->strings.begin() + static_cast<long>(cut.count));
  } else if (a->elem_type == ValueType::kArray) {
    for (uint64_t i = 0; i < cut.count; ++i) cut.arrays.push_back(shrink(a->arrays[i]));
  } else {
    cut.raw = a->raw.subspan(0, cut.count * scalar_size(a->elem_type));
  }
  return Value{ValueType::kArray, std::move(cut)};
}

Status write_shrunk(const std::string& src, const std::filesystem::path& dst) {
  MT_ASSIGN_OR_RETURN(GgufFile f, GgufFile::open(src));
  GgufWriter w(f.alignment());
  for (const KeyValue& kv : f.metadata()) w.set(std::string(kv.key), shrink(kv.value));
  for (const TensorInfo& t : f.tensors()) {
    const std::vector<uint64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
    const std::span<const uint8_t> data = f.tensor_data(t);
    const uint64_t row = t.row_bytes();
    w.add_tensor(std::string(t.name), t.type, ne, [data, row](uint64_t first, uint64_t n, uint8_t* out) {
      std::memcpy(out, data.data() + first * row, n * row);
    });
  }
  return w.write(dst.string());
}

// Two MoE layers: separate gate/up/down f16 experts, then a merged gate_up q8_0 layer.
Status write_moe_seed(const std::filesystem::path& dst) {
  GgufWriter w;
  w.set_string("general.architecture", "qwen3moe");
  w.set_u32("qwen3moe.expert_count", 4);
  w.set_u32("qwen3moe.block_count", 2);
  const FillRows fill = [](uint64_t first, uint64_t n, uint8_t* out) {
    for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(first + i);
  };
  w.add_tensor("blk.0.ffn_gate_exps.weight", QuantType::F16, {32, 16, 4}, fill);
  w.add_tensor("blk.0.ffn_up_exps.weight", QuantType::F16, {32, 16, 4}, fill);
  w.add_tensor("blk.0.ffn_down_exps.weight", QuantType::F16, {16, 32, 4}, fill);
  w.add_tensor("blk.0.ffn_gate_inp.weight", QuantType::F32, {32, 4}, fill);
  w.add_tensor("blk.1.ffn_gate_up_exps.weight", QuantType::Q8_0, {32, 64, 4}, fill);
  w.add_tensor("blk.1.ffn_down_exps.weight", QuantType::Q8_0, {32, 32, 4}, fill);
  return w.write(dst.string());
}

int run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR [GGUF...]\n", argv[0]);
    return 2;
  }
  const std::filesystem::path out = argv[1];
  std::filesystem::create_directories(out);
  int written = 0;
  bool ok = true;
  for (const testcases::CorruptCase& c : testcases::corrupt_cases()) {
    ok = write_bytes(out / ("corrupt_" + c.name + ".gguf"), c.bytes) && ok;
    ++written;
  }
  ok = write_bytes(out / "valid_small.gguf", testcases::valid_small().bytes()) && ok;
  ok = write_bytes(out / "valid_all_types.gguf", testcases::valid_all_types().bytes()) && ok;
  ok = write_bytes(out / "valid_header_only.gguf", testcases::valid_header_only().bytes()) && ok;
  ok = write_bytes(out / "valid_nested_8.gguf", testcases::nested_arrays(8).bytes()) && ok;
  written += 4;
  if (Status s = write_moe_seed(out / "valid_moe.gguf"); !s.ok()) {
    std::fprintf(stderr, "valid_moe.gguf: %s\n", s.to_string().c_str());
    ok = false;
  }
  ++written;
  for (int i = 2; i < argc; ++i) {
    const std::filesystem::path src = argv[i];
    const Status s = write_shrunk(src.string(), out / ("shrunk_" + src.filename().string()));
    if (!s.ok()) {
      std::fprintf(stderr, "%s: %s\n", argv[i], s.to_string().c_str());
      ok = false;
      continue;
    }
    ++written;
  }
  std::printf("wrote %d seeds to %s\n", written, out.string().c_str());
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace mt::gguf

int main(int argc, char** argv) { return mt::gguf::run(argc, argv); }
