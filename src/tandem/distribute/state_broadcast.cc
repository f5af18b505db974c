#include "tandem/distribute/state_broadcast.h"

#include <cstring>

#include <nlohmann/json.hpp>

#include "tandem/base/error.h"

namespace tandem::distribute {
namespace {

// The header's size is bounded before anything is allocated for it; the
// tensors' bytes are checked against the header's shapes.
constexpr int64_t kMaxHeaderBytes = int64_t{1} << 30;
constexpr int64_t kWordBytes = sizeof(int32_t);  // the buffer travels as i32

std::string header_of(const EngineState& state, int64_t& payload_bytes) {
  nlohmann::json tensors = nlohmann::json::array();
  payload_bytes = 0;
  for (const auto& [name, t] : state.tensors) {
    tensors.push_back({name, dtype_name(t.dtype()), t.shape().to_vector()});
    payload_bytes += static_cast<int64_t>(t.nbytes());
  }
  return nlohmann::json{{"metadata", state.metadata}, {"tensors", tensors}}.dump();
}

EngineState parse_state(const char* bytes, int64_t header_bytes, int64_t payload_bytes) {
  EngineState state;
  int64_t offset = header_bytes;
  try {
    const nlohmann::json header = nlohmann::json::parse(bytes, bytes + header_bytes);
    state.metadata = header.at("metadata").get<std::map<std::string, std::string>>();
    for (const nlohmann::json& entry : header.at("tensors")) {
      const Shape shape(entry.at(2).get<std::vector<int64_t>>());
      const DType dtype = parse_dtype(entry.at(1).get<std::string>());
      const int64_t size = static_cast<int64_t>(Tensor::checked_nbytes(shape, dtype));
      if (size > header_bytes + payload_bytes - offset) {
        TANDEM_THROW(IoError, "the shared training state's tensor '",
                     entry.at(0).get<std::string>(), "' runs past its ", payload_bytes, " bytes");
      }
      Tensor t = Tensor::empty(shape, dtype, cpu_device());
      std::memcpy(t.raw_data(), bytes + offset, static_cast<size_t>(size));
      offset += size;
      state.tensors.emplace_back(entry.at(0).get<std::string>(), std::move(t));
    }
  } catch (const nlohmann::json::exception& e) {
    TANDEM_THROW(IoError, "the shared training state's header does not parse: ", e.what());
  }
  if (offset != header_bytes + payload_bytes) {
    TANDEM_THROW(IoError, "the shared training state has ", header_bytes + payload_bytes - offset,
                 " bytes its header does not describe");
  }
  return state;
}

}  // namespace

EngineState copy_state(const EngineState& state) {
  EngineState copy{.metadata = state.metadata, .tensors = {}};
  for (const auto& [name, t] : state.tensors) copy.tensors.emplace_back(name, t.clone());
  return copy;
}

EngineState broadcast_state(comm::Communicator& comm, const EngineState* state) {
  const bool root = comm.rank() == 0;
  std::string header;
  int64_t payload_bytes = 0;
  if (root && state != nullptr) header = header_of(*state, payload_bytes);
  // Whether rank 0 has a state, and the header's and payload's sizes (the
  // payload's in two 31-bit halves: i32 is the collectives' integer).
  Tensor sizes = Tensor::zeros(Shape{4}, DType::i32, cpu_device());
  if (root) {
    int32_t* s = sizes.data<int32_t>();
    s[0] = state != nullptr ? 1 : 0;
    s[1] = static_cast<int32_t>(std::min<int64_t>(static_cast<int64_t>(header.size()), INT32_MAX));
    s[2] = static_cast<int32_t>(payload_bytes & 0x7fffffff);
    s[3] = static_cast<int32_t>(payload_bytes >> 31);
  }
  comm.broadcast(sizes, 0);
  const int32_t* s = sizes.data<int32_t>();
  if (s[0] == 0) {
    TANDEM_THROW(CommError,
                 "rank 0 of the new group has no training state to share (every "
                 "member that held one was lost)");
  }
  const int64_t header_bytes = s[1];
  const int64_t payload = (int64_t{s[3]} << 31) | int64_t{s[2]};
  if (header_bytes <= 0 || header_bytes > kMaxHeaderBytes || payload < 0) {
    TANDEM_THROW(IoError, "the shared training state announces a ", header_bytes,
                 "-byte header and ", payload, " bytes of tensors");
  }
  const int64_t words = (header_bytes + payload + kWordBytes - 1) / kWordBytes;
  Tensor buffer = Tensor::zeros(Shape{words}, DType::i32, cpu_device());
  char* bytes = static_cast<char*>(buffer.raw_data());
  if (root) {
    std::memcpy(bytes, header.data(), header.size());
    int64_t offset = header_bytes;
    for (const auto& [name, t] : state->tensors) {
      const Tensor host = t.to(cpu_device());
      std::memcpy(bytes + offset, host.raw_data(), host.nbytes());
      offset += static_cast<int64_t>(host.nbytes());
    }
  }
  comm.broadcast(buffer, 0);
  return parse_state(bytes, header_bytes, payload);
}

}  // namespace tandem::distribute
