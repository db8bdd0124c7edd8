// libFuzzer target for the GGUF reader: any input either fails as a data-loss Status that
// names an offset, or parses into a file whose promises all hold (reader.h's invariant):
// every tensor's bytes inside the input, aligned, not overlapping; unique keys and names.
// On success everything reachable is exercised: every getter on every key, every array
// element, Value::summary, every tensor's span (first and last byte touched) and the
// expert geometry. ASan/UBSan (tools/fuzz.sh) turn any stray read or UB into a finding.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "core/checked_math.h"
#include "experts/geometry.h"
#include "gguf/reader.h"

namespace {

using mt::gguf::Array;
using mt::gguf::GgufFile;
using mt::gguf::TensorInfo;
using mt::gguf::Value;
using mt::gguf::ValueType;

volatile uint64_t g_sink = 0;  // keeps the reads below from being optimised away

void require(bool ok, const char* what, const std::string& detail = "") {
  if (ok) return;
  std::fprintf(stderr, "gguf_fuzz: broken promise: %s %s\n", what, detail.c_str());
  std::abort();
}

void touch_array(const Array& a) {
  uint64_t sum = a.count;
  if (a.elem_type == ValueType::kString) {
    require(a.strings.size() == a.count, "string array size");
    for (std::string_view s : a.strings) sum += s.empty() ? 0 : static_cast<uint8_t>(s.front() ^ s.back());
  } else if (a.elem_type == ValueType::kArray) {
    require(a.arrays.size() == a.count, "nested array size");
    for (const Value& child : a.arrays) {
      require(child.type == ValueType::kArray && child.array() != nullptr, "nested element is not an array");
      touch_array(*child.array());
    }
  } else {
    require(a.raw.size() == a.count * mt::gguf::scalar_size(a.elem_type), "scalar array bytes");
    for (uint64_t i = 0; i < a.count; ++i) {
      if (a.elem_type == ValueType::kBool) {
        require(a.raw[i] <= 1, "bool array element");
        sum += a.raw[i];
      } else if (a.elem_type == ValueType::kF32 || a.elem_type == ValueType::kF64) {
        sum += a.float_at(i) > 0;
      } else {
        sum += static_cast<uint64_t>(a.int_at(i)) + a.uint_at(i);
      }
    }
  }
  g_sink = g_sink + sum;
}

void exercise_metadata(const GgufFile& f) {
  for (const mt::gguf::KeyValue& kv : f.metadata()) {
    require(!kv.key.empty(), "empty key");
    require(f.find(kv.key) == &kv.value, "find() does not return the pair", std::string(kv.key));
    uint64_t sum = 0;
    for (size_t max_chars : {size_t{0}, size_t{1}, size_t{16}, size_t{80}}) sum += kv.value.summary(max_chars).size();
    sum += f.get_uint(kv.key).ok() + f.get_u32(kv.key).ok() + f.get_int(kv.key).ok();
    sum += f.get_f32(kv.key).ok() + f.get_bool(kv.key).ok() + f.get_string(kv.key).ok();
    sum += f.get_u32_or(kv.key, 7).ok() + f.get_f32_or(kv.key, 7.0f).ok() + f.get_bool_or(kv.key, true).ok();
    auto arr = f.get_array(kv.key);
    if (arr.ok()) touch_array(**arr);
    g_sink = g_sink + sum;
  }
  require(!f.get_u32("\x01missing").ok(), "a missing key was found");
}

void check_tensors(const GgufFile& f, std::span<const uint8_t> input) {
  require(mt::is_power_of_two(f.alignment()), "alignment");
  require(f.data_offset() <= input.size(), "data offset past the end");
  if (!f.tensors().empty()) require(f.data_offset() % f.alignment() == 0, "data offset not aligned");
  std::vector<const TensorInfo*> by_offset;
  for (const TensorInfo& t : f.tensors()) {
    const std::string name(t.name);
    require(!t.name.empty() && t.name.size() <= mt::gguf::kMaxTensorName, "tensor name length", name);
    require(f.find_tensor(t.name) == &t, "find_tensor() does not return the tensor", name);
    require(t.n_dims >= 1 && t.n_dims <= mt::gguf::kMaxDims, "n_dims", name);
    for (uint32_t d = t.n_dims; d < mt::gguf::kMaxDims; ++d) require(t.ne[d] == 1, "missing dims are not 1", name);
    require(t.offset % f.alignment() == 0, "tensor offset not aligned", name);
    // nbytes is the exact size of the shape (all of it fits the file, so nothing overflows).
    const uint64_t rows = t.ne[1] * t.ne[2] * t.ne[3];
    if (rows != 0) require(t.nbytes == t.row_bytes() * rows, "nbytes does not match the shape", name);
    if (rows != 0) require(t.nbytes == t.matrix_bytes() * t.ne[2] * t.ne[3], "matrix_bytes", name);
    std::span<const uint8_t> data = f.tensor_data(t);
    require(data.size() == t.nbytes, "tensor_data size", name);
    if (!data.empty()) {
      require(data.data() >= input.data() + f.data_offset(), "tensor data before the data section", name);
      require(data.data() + data.size() <= input.data() + input.size(), "tensor data past the end", name);
      g_sink = g_sink + data.front() + data.back();
      by_offset.push_back(&t);
    }
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->offset < b->offset;
  });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    require(by_offset[k - 1]->offset + by_offset[k - 1]->nbytes <= by_offset[k]->offset, "tensors overlap",
            std::string(by_offset[k]->name));
  }
}

void exercise_geometry(const GgufFile& f) {
  auto g = mt::read_expert_geometry(f);
  if (!g.ok()) {
    require(!g.status().message().empty(), "empty geometry error");
    return;
  }
  uint64_t sum = g->compact_bytes + g->padded_bytes + g->n_expert + g->groups.size();
  for (const mt::LayerExpertGeometry& l : g->layers) sum += l.bank_bytes() + l.layer;
  for (const mt::GeometryGroup& gr : g->groups) sum += gr.bytes_per_expert() + gr.types.size() + gr.layers.size();
  g_sink = g_sink + sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  auto parsed = GgufFile::parse(input, "fuzz");
  if (!parsed.ok()) {
    const mt::Status& s = parsed.status();
    require(s.code() == mt::StatusCode::kDataLoss, "failure is not data loss", s.to_string());
    require(s.message().find("at offset 0x") != std::string::npos, "failure names no offset", s.message());
    return 0;
  }
  // Moving the file must keep every view valid (keys and names point into the input).
  const GgufFile f = std::move(*parsed);
  require(f.file_size() == size, "file size");
  exercise_metadata(f);
  check_tensors(f, input);
  exercise_geometry(f);
  return 0;
}
