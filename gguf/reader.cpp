#include "gguf/reader.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "core/checked_math.h"

namespace mt::gguf {
namespace {

std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%" PRIx64, v);
  return buf;
}

// Smallest encoded size of one KV pair (key length, 1-byte key, type, 1-byte value) and of
// one tensor info (name length, 1-byte name, n_dims, one dim, type, offset): bounds on the
// counts a file of a given size can really hold.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;

}  // namespace

// Reads the header sections with a cursor that never moves past the end.
class Parser {
 public:
  Parser(GgufFile& f) : f_(f), bytes_(f.bytes_) {}

  Status run() {
    MT_RETURN_IF_ERROR(read_header());
    MT_RETURN_IF_ERROR(read_metadata());
    MT_RETURN_IF_ERROR(read_alignment());
    MT_RETURN_IF_ERROR(read_tensor_infos());
    return place_tensors();
  }

 private:
  Status fail(uint64_t at, const std::string& what) const {
    return data_loss("gguf '" + f_.name_ + "' at offset " + hex(at) + ": " + what);
  }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  template <typename T>
  Status read_scalar(T* out, const char* field) {
    if (remaining() < sizeof(T)) {
      return fail(pos_, std::string(field) + ": file ends (need " + std::to_string(sizeof(T)) +
                            " bytes, " + std::to_string(remaining()) + " left)");
    }
    std::memcpy(out, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return {};
  }

  Status read_string(std::string_view* out, const std::string& field) {
    uint64_t at = pos_;
    uint64_t len = 0;
    MT_RETURN_IF_ERROR(read_scalar(&len, field.c_str()));
    if (len > remaining()) {
      return fail(at, field + ": string length " + std::to_string(len) + " exceeds the " +
                          std::to_string(remaining()) + " bytes left in the file");
    }
    *out = std::string_view(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len;
    return {};
  }

  Status read_header() {
    uint32_t magic = 0;
    MT_RETURN_IF_ERROR(read_scalar(&magic, "magic"));
    if (magic != kMagic) {
      return fail(0, "magic: not a GGUF file (first bytes " + hex(magic) + ", expected 'GGUF')");
    }
    MT_RETURN_IF_ERROR(read_scalar(&f_.version_, "version"));
    if ((f_.version_ & 0xFFFFu) == 0 && f_.version_ != 0) {
      return fail(4, "version: " + hex(f_.version_) + " looks byte-swapped (big-endian GGUF is not supported)");
    }
    if (f_.version_ != 2 && f_.version_ != 3) {
      return fail(4, "version: " + std::to_string(f_.version_) + " is not supported (only GGUF v2 and v3)");
    }
    MT_RETURN_IF_ERROR(read_scalar(&n_tensors_, "tensor_count"));
    MT_RETURN_IF_ERROR(read_scalar(&n_kv_, "metadata_kv_count"));
    if (n_tensors_ > remaining() / kMinTensorInfoBytes) {
      return fail(8, "tensor_count: " + std::to_string(n_tensors_) + " tensors cannot fit in a " +
                         std::to_string(bytes_.size()) + "-byte file");
    }
    if (n_kv_ > remaining() / kMinKvBytes) {
      return fail(16, "metadata_kv_count: " + std::to_string(n_kv_) + " pairs cannot fit in a " +
                          std::to_string(bytes_.size()) + "-byte file");
    }
    return {};
  }

  Status read_value(ValueType type, Value* out, const std::string& field, uint32_t depth) {
    out->type = type;
    uint64_t at = pos_;
    switch (type) {
      case ValueType::kU8: { uint8_t v{}; MT_RETURN_IF_ERROR(read_scalar(&v, field.c_str())); out->data = uint64_t{v}; break; }
      case ValueType::kI8: { int8_t v{}; MT_RETURN_IF_ERROR(read_scalar(&v, field.c_str())); out->data = int64_t{v}; break; }
      case ValueType::kU16: { uint16_t v{}; MT_RETURN_IF_ERROR(read_scalar(&v, field.c_str())); out->data = uint64_t{v}; break; }
      case ValueType::kI16: { int16_t v{}; MT_RETURN_IF_ERROR(read_scalar(&v, field.c_str())); out->data = int64_t{v}; break; }
      case ValueType::kU32: { uint32_t v{}; MT_RETURN_IF_ERROR(read_scalar(&v, field.c_str())); out->data = uint64_t{v}; break; }
      case ValueType::kI32: { int32_t v{}; MT_RETURN_IF_ERROR(read_scalar(&v, field.c_str())); out->data = int64_t{v}; break; }
      case ValueType::kU64: { uint64_t v{}; MT_RETURN_IF_ERROR(read_scalar(&v, field.c_str())); out->data = v; break; }
      case ValueType::kI64: { int64_t v{}; MT_RETURN_IF_ERROR(read_scalar(&v, field.c_str())); out->data = v; break; }
      case ValueType::kF32: { float v{}; MT_RETURN_IF_ERROR(read_scalar(&v, field.c_str())); out->data = double{v}; break; }
      case ValueType::kF64: { double v{}; MT_RETURN_IF_ERROR(read_scalar(&v, field.c_str())); out->data = v; break; }
      case ValueType::kBool: {
        uint8_t v{};
        MT_RETURN_IF_ERROR(read_scalar(&v, field.c_str()));
        if (v > 1) return fail(at, field + ": bool value " + std::to_string(v) + " is neither 0 nor 1");
        out->data = v == 1;
        break;
      }
      case ValueType::kString: {
        std::string_view s;
        MT_RETURN_IF_ERROR(read_string(&s, field));
        out->data = s;
        break;
      }
      case ValueType::kArray: {
        Array arr;
        MT_RETURN_IF_ERROR(read_array(&arr, field, depth));
        out->data = std::move(arr);
        break;
      }
    }
    return {};
  }

  Status read_value_type(ValueType* out, const std::string& field) {
    uint64_t at = pos_;
    uint32_t raw = 0;
    MT_RETURN_IF_ERROR(read_scalar(&raw, field.c_str()));
    if (raw >= kValueTypeCount) {
      return fail(at, field + ": unknown value type " + std::to_string(raw));
    }
    *out = static_cast<ValueType>(raw);
    return {};
  }

  Status read_array(Array* arr, const std::string& field, uint32_t depth) {
    if (depth >= kMaxArrayDepth) {
      return fail(pos_, field + ": arrays nested deeper than " + std::to_string(kMaxArrayDepth));
    }
    MT_RETURN_IF_ERROR(read_value_type(&arr->elem_type, field + " element type"));
    uint64_t at = pos_;
    MT_RETURN_IF_ERROR(read_scalar(&arr->count, (field + " count").c_str()));
    // Every element takes at least one byte (strings and arrays at least 8).
    uint32_t elem_min = scalar_size(arr->elem_type);
    if (elem_min == 0) elem_min = arr->elem_type == ValueType::kString ? 8 : 12;
    if (arr->count > remaining() / elem_min) {
      return fail(at, field + ": array of " + std::to_string(arr->count) + " " +
                          value_type_name(arr->elem_type) + " cannot fit in the " +
                          std::to_string(remaining()) + " bytes left");
    }
    if (arr->elem_type == ValueType::kString) {
      arr->strings.resize(arr->count);
      for (uint64_t i = 0; i < arr->count; ++i) {
        MT_RETURN_IF_ERROR(read_string(&arr->strings[i], field + "[" + std::to_string(i) + "]"));
      }
    } else if (arr->elem_type == ValueType::kArray) {
      // Grown element by element: a claimed count is not allocated up front at every
      // nesting level (that would multiply memory by the depth before any data is read).
      for (uint64_t i = 0; i < arr->count; ++i) {
        Value& child = arr->arrays.emplace_back();
        MT_RETURN_IF_ERROR(read_value(ValueType::kArray, &child, field + "[" + std::to_string(i) + "]", depth + 1));
      }
    } else {
      uint64_t nbytes = arr->count * elem_min;  // bounded above, cannot overflow
      if (arr->elem_type == ValueType::kBool) {
        for (uint64_t i = 0; i < arr->count; ++i) {
          if (bytes_[pos_ + i] > 1) {
            return fail(pos_ + i, field + "[" + std::to_string(i) + "]: bool value is neither 0 nor 1");
          }
        }
      }
      arr->raw = bytes_.subspan(pos_, nbytes);
      pos_ += nbytes;
    }
    return {};
  }

  Status read_metadata() {
    for (uint64_t i = 0; i < n_kv_; ++i) {
      uint64_t at = pos_;
      KeyValue kv;
      std::string field = "metadata pair " + std::to_string(i);
      MT_RETURN_IF_ERROR(read_string(&kv.key, field + " key"));
      if (kv.key.empty()) return fail(at, field + ": empty key");
      field = "key '" + std::string(kv.key) + "'";
      ValueType type = ValueType::kU8;
      MT_RETURN_IF_ERROR(read_value_type(&type, field + " value type"));
      MT_RETURN_IF_ERROR(read_value(type, &kv.value, field, 0));
      if (!f_.kv_index_.emplace(kv.key, f_.kvs_.size()).second) {
        return fail(at, field + ": duplicate key");
      }
      if (kv.key == "general.alignment") alignment_at_ = at;
      f_.kvs_.push_back(std::move(kv));
    }
    return {};
  }

  Status read_alignment() {
    const Value* v = f_.find("general.alignment");
    if (v == nullptr) return {};
    if (v->type != ValueType::kU32) {
      return fail(alignment_at_, std::string("general.alignment has type ") + value_type_name(v->type) +
                                     ", expected u32");
    }
    uint64_t a = std::get<uint64_t>(v->data);
    if (!is_power_of_two(a)) {
      return fail(alignment_at_, "general.alignment " + std::to_string(a) + " is not a non-zero power of two");
    }
    f_.alignment_ = static_cast<uint32_t>(a);
    return {};
  }

  Status read_tensor_infos() {
    f_.tensors_.reserve(n_tensors_);
    for (uint64_t i = 0; i < n_tensors_; ++i) {
      uint64_t at = pos_;
      TensorInfo t;
      std::string field = "tensor info " + std::to_string(i);
      MT_RETURN_IF_ERROR(read_string(&t.name, field + " name"));
      if (t.name.empty()) return fail(at, field + ": empty tensor name");
      if (t.name.size() > kMaxTensorName) {
        return fail(at, field + ": name is " + std::to_string(t.name.size()) + " bytes (at most " +
                            std::to_string(kMaxTensorName) + ")");
      }
      field = "tensor '" + std::string(t.name) + "'";
      uint64_t dims_at = pos_;
      MT_RETURN_IF_ERROR(read_scalar(&t.n_dims, (field + " n_dims").c_str()));
      if (t.n_dims < 1 || t.n_dims > kMaxDims) {
        return fail(dims_at, field + ": n_dims " + std::to_string(t.n_dims) + " (must be 1.." +
                                 std::to_string(kMaxDims) + ")");
      }
      uint64_t n_elements = 1;
      for (uint32_t d = 0; d < t.n_dims; ++d) {
        uint64_t dim_at = pos_;
        MT_RETURN_IF_ERROR(read_scalar(&t.ne[d], (field + " ne[" + std::to_string(d) + "]").c_str()));
        if (t.ne[d] > static_cast<uint64_t>(INT64_MAX)) {
          return fail(dim_at, field + ": ne[" + std::to_string(d) + "] = " + std::to_string(t.ne[d]) + " is too large");
        }
        auto prod = checked_mul(n_elements, t.ne[d]);
        if (!prod || *prod > static_cast<uint64_t>(INT64_MAX)) {
          return fail(dim_at, field + ": element count overflows (dims too large)");
        }
        n_elements = *prod;
      }
      uint64_t type_at = pos_;
      uint32_t raw_type = 0;
      MT_RETURN_IF_ERROR(read_scalar(&raw_type, (field + " type").c_str()));
      const TypeTraits* traits = find_type_traits(raw_type);
      if (traits == nullptr) {
        return fail(type_at, field + ": unknown tensor type id " + std::to_string(raw_type));
      }
      t.type = traits->type;
      if (t.ne[0] % traits->block_elems != 0) {
        return fail(dims_at, field + ": ne[0] = " + std::to_string(t.ne[0]) + " is not a multiple of " +
                                 traits->name + "'s block size " + std::to_string(traits->block_elems));
      }
      auto nbytes = checked_mul(n_elements / traits->block_elems, traits->block_bytes);
      if (!nbytes) return fail(dims_at, field + ": byte size overflows");
      t.nbytes = *nbytes;
      uint64_t off_at = pos_;
      MT_RETURN_IF_ERROR(read_scalar(&t.offset, (field + " offset").c_str()));
      if (t.offset % f_.alignment_ != 0) {
        return fail(off_at, field + ": data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                                std::to_string(f_.alignment_));
      }
      if (!f_.tensor_index_.emplace(t.name, f_.tensors_.size()).second) {
        return fail(at, field + ": duplicate tensor name");
      }
      tensor_at_.push_back(off_at);
      f_.tensors_.push_back(t);
    }
    return {};
  }

  // The data section starts at the aligned end of the tensor infos; every tensor must lie
  // inside it and no two tensors may overlap.
  Status place_tensors() {
    if (n_tensors_ == 0) {
      f_.data_offset_ = pos_;
      return {};
    }
    auto start = checked_align_up(pos_, f_.alignment_);
    if (!start || *start > bytes_.size()) {
      return fail(pos_, "data section: starts past the end of the file (file is " +
                            std::to_string(bytes_.size()) + " bytes)");
    }
    f_.data_offset_ = *start;
    uint64_t data_size = bytes_.size() - *start;
    std::vector<size_t> order(f_.tensors_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    for (size_t i : order) {
      const TensorInfo& t = f_.tensors_[i];
      auto end = checked_add(t.offset, t.nbytes);
      if (!end || *end > data_size) {
        return fail(tensor_at_[i], "tensor '" + std::string(t.name) + "': bytes [" + std::to_string(t.offset) + ", +" +
                                       std::to_string(t.nbytes) + ") lie outside the " + std::to_string(data_size) +
                                       "-byte data section");
      }
    }
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return f_.tensors_[a].offset < f_.tensors_[b].offset; });
    // Compare each non-empty tensor with the previous non-empty one: an empty tensor
    // between them must not hide their overlap.
    const TensorInfo* prev = nullptr;
    for (size_t i : order) {
      const TensorInfo& cur = f_.tensors_[i];
      if (cur.nbytes == 0) continue;
      if (prev != nullptr && prev->offset + prev->nbytes > cur.offset) {
        return fail(tensor_at_[i], "tensor '" + std::string(cur.name) + "': data overlaps tensor '" +
                                       std::string(prev->name) + "'");
      }
      prev = &cur;
    }
    return {};
  }

  GgufFile& f_;
  std::span<const uint8_t> bytes_;
  uint64_t pos_ = 0;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
  std::vector<uint64_t> tensor_at_;  // file offset of each tensor's offset field
  uint64_t alignment_at_ = 0;        // file offset of the general.alignment pair
};

uint64_t TensorInfo::row_bytes() const {
  const TypeTraits& t = type_traits(type);
  return ne[0] / t.block_elems * t.block_bytes;
}

StatusOr<GgufFile> GgufFile::open(const std::string& path) {
  MT_ASSIGN_OR_RETURN(MappedFile map, MappedFile::open(path));
  GgufFile f;
  f.file_ = std::move(map);
  f.bytes_ = f.file_.bytes();
  f.name_ = path;
  MT_RETURN_IF_ERROR(Parser(f).run());
  return f;
}

StatusOr<GgufFile> GgufFile::parse(std::span<const uint8_t> bytes, std::string name) {
  GgufFile f;
  f.bytes_ = bytes;
  f.name_ = std::move(name);
  MT_RETURN_IF_ERROR(Parser(f).run());
  return f;
}

const TensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const uint8_t> GgufFile::tensor_data(const TensorInfo& t) const {
  return bytes_.subspan(data_offset_ + t.offset, t.nbytes);
}

}  // namespace mt::gguf
