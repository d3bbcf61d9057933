// The segment header's checks as a worker makes them (shm/segment.cc, Segment::Validate, the
// configuration's fingerprint among them; then its one read of the model,
// worker::ReadRunModel, and data::CheckRunOptions): what a worker trusts before it reads
// anything else of the segment. The input:
//   byte 0      flags: 1 = the rest overlays the header's RunConfig and ComputeLayout fills
//               identity and offsets (a header as the master writes it, for any config);
//               else the rest overlays the header from its first byte. 2 = the mapped size
//               is the header's total_size. 4 = param_count is the model's count (its layers'
//               parameter blocks, as the master computes it). 8 = the fingerprint is then
//               sealed again over the config as it is (a hostile header whose hash matches:
//               the fingerprint is no signature, so the checks behind it must hold alone).
//   bytes 1-8   the mapped size, little-endian (unless flag 2).
//   bytes 9-    the overlay (the rest of the header stays zero).
//
// A header that Validate accepts has the fingerprint of its config. One that the worker's
// checks accept must be safe to use through Segment's accessors: every region they reach
// (blocks, X, Y, W, the optimizer states, the slots, the snapshots, HS and GS), sized from the
// config without any wrap-around, lies inside the mapped size; the snapshot ring that
// snapshot() takes a modulo of is not empty; the model reads and resolves, with the counts
// the loops size their regions by; the model reads no more of a row of X than it holds.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "data/pipeline.h"
#include "fuzz/fuzz_util.h"
#include "nn/layer.h"
#include "shm/layout.h"
#include "shm/segment.h"
#include "worker/run_model.h"

using namespace shmtrain;
using shm::Header;
using shm::RunConfig;

namespace {

using u128 = unsigned __int128;

// The config's model, read as a worker reads it: whether it reads (its text ends in its field,
// parses, and resolves on an input shape in range).
bool ModelOf(const RunConfig& c, ModelSpec* spec) {
  if (std::memchr(c.model, '\0', sizeof c.model) == nullptr) return false;
  for (int64_t d : c.input_shape) {
    if (d < 1 || d > kMaxWidth) return false;
  }
  spec->input = {c.input_shape[0], c.input_shape[1], c.input_shape[2]};
  if (!nn::ParseModelText(c.model, &spec->layers).ok()) return false;
  std::vector<Shape> shapes;
  return nn::ResolveShapes(spec->input, spec->layers, &shapes).ok();
}

// What the accessors of a segment with this header may touch, in bytes, computed without
// wrap-around; or -1 (as u128 max) when the config is not one a worker can use at all.
u128 BytesNeeded(const Header& h, std::string* why) {
  const RunConfig& c = h.config;
  const u128 bad = ~u128{0};
  // The model: its text must end in its field and read as layers that resolve on the input
  // shape; its parameter count is what the layers' blocks add up to (nn/layer.h).
  ModelSpec spec;
  if (!ModelOf(c, &spec)) {
    *why = "the model does not read";
    return bad;
  }
  const __int128 n = static_cast<__int128>(spec.ParamCount());
  if (n != static_cast<__int128>(c.param_count)) {
    *why = "param_count " + std::to_string(c.param_count) + " is not the layers' count";
    return bad;
  }
  if (c.rows < 0 || c.features < 0) {
    *why = "negative rows or features";
    return bad;
  }
  // The first layer reads the model's inputs from each row of X, whose rows have `features`.
  if (spec.inputs() > c.features) {
    *why = "a model input of " + std::to_string(spec.inputs()) + " values on rows of " +
           std::to_string(c.features) + " features";
    return bad;
  }
  if (c.eval_every > 0 && c.snapshots < 1) {
    *why = "validation snapshots every " + std::to_string(c.eval_every) + " steps in a ring of " +
           std::to_string(c.snapshots);
    return bad;
  }
  const u128 vec = static_cast<u128>(n) * sizeof(float);
  u128 need = sizeof(Header) + static_cast<u128>(c.workers) * sizeof(shm::WorkerBlock);
  need += static_cast<u128>(c.rows) * static_cast<u128>(c.features) * sizeof(float);
  need += static_cast<u128>(c.rows) * sizeof(float);
  need += 2 * vec + 2 * static_cast<u128>(c.optim.num_states) * vec;
  need += static_cast<u128>(c.workers) * (sizeof(shm::SlotHeader) + vec);
  if (c.eval_every > 0) need += static_cast<u128>(c.snapshots) * vec;
  // Several hosts: GS, and HS unless it is slot 0's gradient (one worker per host).
  if (c.hosts > 1) need += (c.workers > 1 ? 2 : 1) * vec;
  return need;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 9) return 0;
  const uint8_t flags = data[0];
  uint64_t mapped = 0;
  std::memcpy(&mapped, data + 1, 8);
  // The header is 66 KiB, most of it the loss ring, which Validate does not read.
  auto h = std::make_unique<Header>();
  std::memset(h.get(), 0, sizeof(Header));
  char* base = reinterpret_cast<char*>(h.get());
  const size_t at = (flags & 1) ? offsetof(Header, config) : 0;
  const size_t room = offsetof(Header, abort_epoch) - at;
  std::memcpy(base + at, data + 9, std::min(size - 9, room));
  if (flags & 4) {
    ModelSpec spec;
    if (ModelOf(h->config, &spec)) h->config.param_count = spec.ParamCount();
  }
  if (flags & 1) shm::ComputeLayout(h.get());
  if (flags & 2) mapped = h->total_size;
  if (flags & 8) h->config_fingerprint = shm::ConfigFingerprint(h->config);

  if (const shm::SegmentCheck check = shm::Segment::Validate(*h, mapped); !check.ok()) {
    SHMTRAIN_FUZZ_CHECK(!check.status.message().empty() && check.worker_exit != kWorkerOk,
                        "a refusal without a reason or an exit code");
    return 0;
  }
  SHMTRAIN_FUZZ_CHECK(h->config_fingerprint == shm::ConfigFingerprint(h->config),
                      "Validate accepted a config whose fingerprint is not its own");
  // A worker reads the model once attached, then checks what the run asks of its CPU.
  worker::RunModel model;
  if (const Status read = worker::ReadRunModel(h->config, &model); !read.ok()) {
    SHMTRAIN_FUZZ_CHECK(!read.message().empty(), "a refusal without a reason");
    return 0;
  }
  SHMTRAIN_FUZZ_CHECK(model.shapes.size() == model.spec.layers.size() && !model.shapes.empty(),
                      "a model read without a shape for each layer");
  if (const shm::ConfigCheck options = data::CheckRunOptions(h->config); !options.ok()) {
    SHMTRAIN_FUZZ_CHECK(!options.status.message().empty(), "a refusal without a reason");
    return 0;
  }
  std::string unusable;
  const u128 need = BytesNeeded(*h, &unusable);
  SHMTRAIN_FUZZ_CHECK(unusable.empty(), "Validate accepted a header a worker cannot use: %s",
                      unusable.c_str());
  SHMTRAIN_FUZZ_CHECK(need <= mapped,
                      "Validate accepted a header whose regions need more than the %llu bytes "
                      "mapped (rows %lld, features %lld, params %llu, workers %u)",
                      static_cast<unsigned long long>(mapped),
                      static_cast<long long>(h->config.rows),
                      static_cast<long long>(h->config.features),
                      static_cast<unsigned long long>(h->config.param_count), h->config.workers);
  return 0;
}
