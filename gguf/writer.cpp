#include "gguf/writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "core/check.h"
#include "core/checked_math.h"
#include "core/log.h"
#include "gguf/reader.h"

namespace mt::gguf {
namespace {

void put_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
  if (n == 0) return;
  const size_t at = out.size();
  out.resize(at + n);
  std::memcpy(out.data() + at, p, n);
}

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  put_bytes(out, &v, sizeof(T));
}

void put_string(std::vector<uint8_t>& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  put_bytes(out, s.data(), s.size());
}

void encode_payload(std::vector<uint8_t>& out, const Value& v);

void encode_array(std::vector<uint8_t>& out, const Array& a) {
  put<uint32_t>(out, static_cast<uint32_t>(a.elem_type));
  put<uint64_t>(out, a.count);
  if (a.elem_type == ValueType::kString) {
    for (std::string_view s : a.strings) put_string(out, s);
  } else if (a.elem_type == ValueType::kArray) {
    for (const Value& child : a.arrays) encode_payload(out, child);
  } else {
    put_bytes(out, a.raw.data(), a.raw.size());
  }
}

void encode_payload(std::vector<uint8_t>& out, const Value& v) {
  switch (v.type) {
    case ValueType::kU8: put<uint8_t>(out, static_cast<uint8_t>(std::get<uint64_t>(v.data))); break;
    case ValueType::kI8: put<int8_t>(out, static_cast<int8_t>(std::get<int64_t>(v.data))); break;
    case ValueType::kU16: put<uint16_t>(out, static_cast<uint16_t>(std::get<uint64_t>(v.data))); break;
    case ValueType::kI16: put<int16_t>(out, static_cast<int16_t>(std::get<int64_t>(v.data))); break;
    case ValueType::kU32: put<uint32_t>(out, static_cast<uint32_t>(std::get<uint64_t>(v.data))); break;
    case ValueType::kI32: put<int32_t>(out, static_cast<int32_t>(std::get<int64_t>(v.data))); break;
    case ValueType::kU64: put<uint64_t>(out, std::get<uint64_t>(v.data)); break;
    case ValueType::kI64: put<int64_t>(out, std::get<int64_t>(v.data)); break;
    case ValueType::kF32: put<float>(out, static_cast<float>(std::get<double>(v.data))); break;
    case ValueType::kF64: put<double>(out, std::get<double>(v.data)); break;
    case ValueType::kBool: put<uint8_t>(out, std::get<bool>(v.data) ? 1 : 0); break;
    case ValueType::kString: put_string(out, std::get<std::string_view>(v.data)); break;
    case ValueType::kArray: encode_array(out, std::get<Array>(v.data)); break;
  }
}

template <typename T>
std::vector<uint8_t> encode_scalar_array(ValueType elem, const std::vector<T>& v) {
  std::vector<uint8_t> out;
  put<uint32_t>(out, static_cast<uint32_t>(ValueType::kArray));
  put<uint32_t>(out, static_cast<uint32_t>(elem));
  put<uint64_t>(out, v.size());
  for (T x : v) put<T>(out, x);
  return out;
}

}  // namespace

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
  MT_CHECK_MSG(is_power_of_two(alignment), "GGUF alignment must be a power of two");
  if (alignment != kDefaultAlignment) set_u32("general.alignment", alignment);
}

void GgufWriter::set(const std::string& key, const Value& value) {
  std::vector<uint8_t> enc;
  put<uint32_t>(enc, static_cast<uint32_t>(value.type));
  encode_payload(enc, value);
  set_encoded(key, std::move(enc));
}

void GgufWriter::set_encoded(const std::string& key, std::vector<uint8_t> enc) {
  for (Entry& e : entries_) {
    if (e.key == key) {
      e.encoded = std::move(enc);
      return;
    }
  }
  entries_.push_back({key, std::move(enc)});
}

void GgufWriter::set_string_array(const std::string& key, const std::vector<std::string>& v) {
  Array a;
  a.elem_type = ValueType::kString;
  a.count = v.size();
  a.strings.assign(v.begin(), v.end());
  set(key, Value{ValueType::kArray, std::move(a)});
}

#define MT_SCALAR_ARRAY_SETTER(fn, T, elem)                                  \
  void GgufWriter::fn(const std::string& key, const std::vector<T>& v) {     \
    set_encoded(key, encode_scalar_array<T>(elem, v));                       \
  }
MT_SCALAR_ARRAY_SETTER(set_f32_array, float, ValueType::kF32)
MT_SCALAR_ARRAY_SETTER(set_i32_array, int32_t, ValueType::kI32)
MT_SCALAR_ARRAY_SETTER(set_u32_array, uint32_t, ValueType::kU32)
#undef MT_SCALAR_ARRAY_SETTER

void GgufWriter::remove(const std::string& key) {
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.key == key; }),
                 entries_.end());
}

void GgufWriter::add_tensor(const std::string& name, QuantType type, const std::vector<uint64_t>& ne, FillRows fill) {
  tensors_.push_back({name, type, ne, std::move(fill)});
}

StatusOr<GgufWriter::Layout> GgufWriter::layout() const {
  Layout out;
  std::vector<uint8_t>& h = out.header;
  put<uint32_t>(h, kMagic);
  put<uint32_t>(h, 3);
  put<uint64_t>(h, tensors_.size());
  put<uint64_t>(h, entries_.size());
  for (const Entry& e : entries_) {
    put_string(h, e.key);
    put_bytes(h, e.encoded.data(), e.encoded.size());
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  out.tensors = tensors_;
  for (Tensor& t : out.tensors) {
    if (!names.insert(t.name).second) return invalid_argument("tensor '" + t.name + "' added twice");
    if (t.name.empty() || t.name.size() > kMaxTensorName) {
      return invalid_argument("tensor name '" + t.name + "' must be 1.." + std::to_string(kMaxTensorName) + " bytes");
    }
    if (t.ne.empty() || t.ne.size() > kMaxDims) {
      return invalid_argument("tensor '" + t.name + "' must have 1.." + std::to_string(kMaxDims) + " dims");
    }
    auto rb = row_bytes(t.type, t.ne[0]);
    if (!rb) {
      return invalid_argument("tensor '" + t.name + "': ne[0] = " + std::to_string(t.ne[0]) +
                              " is not a multiple of the " + type_name(t.type) + " block size");
    }
    t.row_bytes = *rb;
    uint64_t rows = 1;
    for (size_t d = 1; d < t.ne.size(); ++d) {
      auto r = checked_mul(rows, t.ne[d]);
      if (!r) return invalid_argument("tensor '" + t.name + "': size overflows");
      rows = *r;
    }
    t.n_rows = rows;
    auto nbytes = checked_mul(rows, t.row_bytes);
    if (!nbytes) return invalid_argument("tensor '" + t.name + "': size overflows");
    t.nbytes = *nbytes;
    t.offset = offset;
    auto next = checked_align_up(offset + t.nbytes, alignment_);
    if (!next) return invalid_argument("tensor data size overflows");
    offset = *next;

    put_string(h, t.name);
    put<uint32_t>(h, static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) put<uint64_t>(h, d);
    put<uint32_t>(h, static_cast<uint32_t>(t.type));
    put<uint64_t>(h, t.offset);
  }
  if (!tensors_.empty()) h.resize(*checked_align_up(h.size(), alignment_), 0);
  out.total = h.size() + offset;
  return out;
}

StatusOr<uint64_t> GgufWriter::file_size() const {
  MT_ASSIGN_OR_RETURN(Layout l, layout());
  return l.total;
}

namespace {

Status write_all(int fd, const uint8_t* p, uint64_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return io_error("writing '" + path + "': " + std::strerror(errno));
    }
    p += w;
    n -= static_cast<uint64_t>(w);
  }
  return {};
}

}  // namespace

Status GgufWriter::write(const std::string& path, const WriteOptions& options) const {
  MT_ASSIGN_OR_RETURN(Layout l, layout());
  for (const Tensor& t : l.tensors) {
    if (!options.sparse && !t.fill) {
      return invalid_argument("tensor '" + t.name + "' has no data source (only a sparse write allows that)");
    }
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot create '" + path + "': " + std::strerror(errno));
  auto finish = [&](Status s) {
    if (::close(fd) != 0 && s.ok()) s = io_error("closing '" + path + "': " + std::strerror(errno));
    return s;
  };
  Status s = write_all(fd, l.header.data(), l.header.size(), path);
  if (!s.ok()) return finish(s);
  if (options.sparse) {
    if (ftruncate(fd, static_cast<off_t>(l.total)) != 0) {
      return finish(io_error("extending '" + path + "' to " + std::to_string(l.total) + " bytes: " + std::strerror(errno)));
    }
    return finish({});
  }
  constexpr uint64_t kChunk = 64ull << 20;
  std::vector<uint8_t> buf;
  uint64_t written = l.header.size();
  Progress progress("writing " + path, l.total, options.progress);
  for (const Tensor& t : l.tensors) {
    uint64_t rows_per_chunk = std::max<uint64_t>(1, kChunk / std::max<uint64_t>(1, t.row_bytes));
    for (uint64_t r = 0; r < t.n_rows; r += rows_per_chunk) {
      uint64_t n = std::min(rows_per_chunk, t.n_rows - r);
      buf.assign(n * t.row_bytes, 0);
      t.fill(r, n, buf.data());
      s = write_all(fd, buf.data(), buf.size(), path);
      if (!s.ok()) return finish(s);
      written += buf.size();
      progress.update(written);
    }
    uint64_t padded = *checked_align_up(t.nbytes, alignment_);
    if (padded > t.nbytes) {
      std::vector<uint8_t> zeros(padded - t.nbytes, 0);
      s = write_all(fd, zeros.data(), zeros.size(), path);
      if (!s.ok()) return finish(s);
      written += zeros.size();
    }
  }
  progress.finish();
  return finish({});
}

}  // namespace mt::gguf
