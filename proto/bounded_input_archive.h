// BoundedInputArchive: cereal's binary input format (what BinaryOutputArchive
// writes), read from a byte span that a peer sent, so every length is checked
// before anything is allocated.
//
// cereal's own BinaryInputArchive trusts the stream: a string or vector length
// of 2^62 in a garbled message makes it resize first and fail to read after
// (std::bad_alloc, or gigabytes committed for a 100-byte message). Here a
// length prefix larger than the bytes left is refused at once (every element
// of every container we decode takes at least one byte), and a bool byte other
// than 0 or 1 is refused instead of being loaded as a bool (undefined
// behaviour). Failures throw cereal::Exception, which DecodeMeta turns into a
// Status: the exception never leaves proto/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>

#include <cereal/cereal.hpp>

namespace perserve::proto {

class BoundedInputArchive : public cereal::InputArchive<BoundedInputArchive, cereal::AllowEmptyClassElision> {
 public:
  explicit BoundedInputArchive(std::span<const std::byte> bytes)
      : cereal::InputArchive<BoundedInputArchive, cereal::AllowEmptyClassElision>(this), rest_(bytes) {}

  void LoadBinary(void* data, size_t size) {
    if (size > rest_.size()) {
      throw cereal::Exception("needs " + std::to_string(size) + " more bytes, " + std::to_string(rest_.size()) +
                              " left");
    }
    if (size > 0) std::memcpy(data, rest_.data(), size);
    rest_ = rest_.subspan(size);
  }

  // A container length: at most the bytes left (each element takes >= 1).
  void CheckLength(uint64_t length) const {
    if (length > rest_.size()) {
      throw cereal::Exception("a length of " + std::to_string(length) + " with only " +
                              std::to_string(rest_.size()) + " bytes left");
    }
  }

  size_t bytes_left() const { return rest_.size(); }

 private:
  std::span<const std::byte> rest_;
};

template <class T>
inline std::enable_if_t<std::is_arithmetic_v<T> && !std::is_same_v<T, bool>> CEREAL_LOAD_FUNCTION_NAME(
    BoundedInputArchive& ar, T& value) {
  ar.LoadBinary(&value, sizeof(value));
}

inline void CEREAL_LOAD_FUNCTION_NAME(BoundedInputArchive& ar, bool& value) {
  uint8_t byte = 0;
  ar.LoadBinary(&byte, 1);
  if (byte > 1) throw cereal::Exception("a boolean byte is " + std::to_string(byte) + ", not 0 or 1");
  value = byte == 1;
}

template <class T>
inline void CEREAL_SERIALIZE_FUNCTION_NAME(BoundedInputArchive& ar, cereal::NameValuePair<T>& pair) {
  ar(pair.value);
}

template <class T>
inline void CEREAL_SERIALIZE_FUNCTION_NAME(BoundedInputArchive& ar, cereal::SizeTag<T>& tag) {
  uint64_t length = 0;  // cereal's binary format writes sizes as uint64
  ar.LoadBinary(&length, sizeof(length));
  ar.CheckLength(length);
  tag.size = static_cast<std::remove_reference_t<T>>(length);
}

template <class T>
inline void CEREAL_LOAD_FUNCTION_NAME(BoundedInputArchive& ar, cereal::BinaryData<T>& data) {
  ar.LoadBinary(data.data, static_cast<size_t>(data.size));
}

}  // namespace perserve::proto

CEREAL_REGISTER_ARCHIVE(perserve::proto::BoundedInputArchive)
