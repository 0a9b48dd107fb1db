// Builds GGUF images in memory, valid or deliberately broken, for the parser tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace optimate::testing {

class GgufBuilder {
 public:
  explicit GgufBuilder(uint32_t version = 3) : version_(version) {}

  void add_string(const std::string& key, const std::string& v) {
    kv_key(key, 8);
    put_string(kv_, v);
    ++kv_count_;
  }
  void add_u32(const std::string& key, uint32_t v) {
    kv_key(key, 4);
    put(kv_, v);
    ++kv_count_;
  }
  void add_f32(const std::string& key, float v) {
    kv_key(key, 6);
    put(kv_, v);
    ++kv_count_;
  }
  void add_strings(const std::string& key, const std::vector<std::string>& v) {
    kv_key(key, 9);
    put(kv_, uint32_t{8});
    put(kv_, uint64_t{v.size()});
    for (const auto& s : v) put_string(kv_, s);
    ++kv_count_;
  }
  void add_i32s(const std::string& key, const std::vector<int32_t>& v) {
    kv_key(key, 9);
    put(kv_, uint32_t{5});
    put(kv_, uint64_t{v.size()});
    for (int32_t x : v) put(kv_, x);
    ++kv_count_;
  }

  // dims innermost first, as GGUF stores them. Without `offset` the tensor is placed after the
  // previous one, aligned.
  void add_tensor(const std::string& name, uint32_t ggml_type, std::vector<uint64_t> dims,
                  std::vector<uint8_t> data, std::optional<uint64_t> offset = std::nullopt) {
    uint64_t off = offset.value_or((data_.size() + alignment_ - 1) / alignment_ * alignment_);
    put_string(infos_, name);
    put(infos_, static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) put(infos_, d);
    put(infos_, ggml_type);
    put(infos_, off);
    if (!offset) {
      data_.resize(off, 0);
      append(data_, data.data(), data.size());
    }
    ++tensor_count_;
  }

  std::vector<uint8_t> build() const {
    std::vector<uint8_t> out;
    append(out, "GGUF", 4);
    put(out, version_);
    put(out, tensor_count_);
    put(out, kv_count_);
    append(out, kv_.data(), kv_.size());
    append(out, infos_.data(), infos_.size());
    out.resize((out.size() + alignment_ - 1) / alignment_ * alignment_, 0);
    append(out, data_.data(), data_.size());
    return out;
  }

 private:
  template <typename T>
  static void put(std::vector<uint8_t>& out, T v) {
    append(out, &v, sizeof(T));
  }
  static void put_string(std::vector<uint8_t>& out, const std::string& s) {
    put(out, uint64_t{s.size()});
    append(out, s.data(), s.size());
  }
  // resize + memcpy rather than insert: GCC 12 misreports inserts of short ranges.
  static void append(std::vector<uint8_t>& out, const void* p, size_t n) {
    const size_t at = out.size();
    out.resize(at + n);
    if (n != 0) std::memcpy(out.data() + at, p, n);
  }
  void kv_key(const std::string& key, uint32_t type) {
    put_string(kv_, key);
    put(kv_, type);
  }

  uint32_t version_;
  uint64_t alignment_ = 32;
  uint64_t kv_count_ = 0, tensor_count_ = 0;
  std::vector<uint8_t> kv_, infos_, data_;
};

// The keys every decoder's GGUF has: a 4096-token context, hidden 256, feed-forward 512, 8 heads
// over 2 KV heads, `layers` blocks.
inline void add_decoder_keys(GgufBuilder& b, const std::string& arch, uint32_t layers, bool with_eps = true) {
  b.add_string("general.architecture", arch);
  b.add_u32(arch + ".block_count", layers);
  b.add_u32(arch + ".context_length", 4096);
  b.add_u32(arch + ".embedding_length", 256);
  b.add_u32(arch + ".feed_forward_length", 512);
  b.add_u32(arch + ".attention.head_count", 8);
  b.add_u32(arch + ".attention.head_count_kv", 2);
  if (with_eps) b.add_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-6f);
}

inline std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

}  // namespace optimate::testing
