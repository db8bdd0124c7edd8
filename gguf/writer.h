// GgufWriter: builds a GGUF v3 file the way ggml lays it out.
//
// Layout written: header, metadata in insertion order, tensor infos in insertion order,
// zero padding to the alignment, then each tensor's data at the next aligned offset
// (tensor i's offset = sum of the aligned sizes of tensors 0..i-1, as ggml's reader
// demands). Tensor data is produced row by row through a callback, in bounded chunks,
// so multi-GB files never sit in memory. A sparse write stops after the header and
// extends the file to its full size, leaving the data section as a hole.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "gguf/value.h"
#include "quant/types.h"

namespace mt::gguf {

// Fills rows [first_row, first_row + n_rows) of a tensor (a row = ne[0] elements,
// row_bytes bytes) into dst.
using FillRows = std::function<void(uint64_t first_row, uint64_t n_rows, uint8_t* dst)>;

struct WriteOptions {
  bool sparse = false;       // header only; the data section is a hole
  bool progress = false;     // draw a progress line on a terminal
};

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t alignment = 32);

  // Metadata. Setting an existing key replaces its value in place.
  void set(const std::string& key, const Value& value);  // deep-copies strings and arrays
  void set_u32(const std::string& key, uint32_t v) { set(key, Value::u32(v)); }
  void set_i32(const std::string& key, int32_t v) { set(key, Value::i32(v)); }
  void set_f32(const std::string& key, float v) { set(key, Value::f32(v)); }
  void set_bool(const std::string& key, bool v) { set(key, Value::boolean(v)); }
  void set_string(const std::string& key, const std::string& v) { set(key, Value::string(v)); }
  void set_string_array(const std::string& key, const std::vector<std::string>& v);
  void set_f32_array(const std::string& key, const std::vector<float>& v);
  void set_i32_array(const std::string& key, const std::vector<int32_t>& v);
  void set_u32_array(const std::string& key, const std::vector<uint32_t>& v);
  void remove(const std::string& key);

  // Tensors; dims in ggml order (ne[0] contiguous). Shape errors are reported by write().
  void add_tensor(const std::string& name, QuantType type, const std::vector<uint64_t>& ne, FillRows fill);

  // Total file size and data-section offset this writer would produce.
  StatusOr<uint64_t> file_size() const;

  Status write(const std::string& path, const WriteOptions& options = {}) const;

 private:
  struct Entry {
    std::string key;
    std::vector<uint8_t> encoded;  // value type + payload, little-endian
  };
  struct Tensor {
    std::string name;
    QuantType type;
    std::vector<uint64_t> ne;
    FillRows fill;
    uint64_t row_bytes = 0;
    uint64_t n_rows = 0;
    uint64_t nbytes = 0;
    uint64_t offset = 0;
  };
  struct Layout {
    std::vector<uint8_t> header;  // everything before the data section, padding included
    std::vector<Tensor> tensors;  // with sizes and offsets
    uint64_t total = 0;
  };
  StatusOr<Layout> layout() const;
  // Replaces the value of an existing key in place, or appends a new key.
  void set_encoded(const std::string& key, std::vector<uint8_t> encoded);

  uint32_t alignment_;
  std::vector<Entry> entries_;
  std::vector<Tensor> tensors_;
};

}  // namespace mt::gguf
