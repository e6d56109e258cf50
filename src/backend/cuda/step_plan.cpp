// StepPlan: packing and uploading one step's BatchPlan arrays.
#include "backend/cuda/step_plan.h"

#include <algorithm>
#include <cstring>

#include "backend/cuda/host_reads.h"
#include "backend/cuda/mla_kernels.h"
#include "backend/cuda/runtime.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr size_t kAlign = 256;

size_t aligned(size_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

// Appends v at an aligned offset of `out`; returns the offset.
template <typename T>
size_t append(std::vector<char>& out, const std::vector<T>& v) {
  const size_t offset = aligned(out.size());
  out.resize(offset + v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data() + offset, v.data(), v.size() * sizeof(T));
  return offset;
}

}  // namespace

StepPlan::~StepPlan() {
  // Process-lifetime objects in practice; the device buffer goes back to the CUDA driver at exit.
  if (pinned_) host_free_pinned(pinned_);
}

void StepPlan::reserve(size_t bytes) {
  if (bytes <= capacity_) return;
  DSI_CHECK(!capturing(), "the step plan outgrew its buffer during a CUDA graph capture");
  const size_t cap = std::max(bytes * 2, size_t{1} << 20);
  if (copy_done_) event_wait_host(copy_done_);
  if (pinned_) host_free_pinned(pinned_);
  if (dev_) device_free(dev_);
  pinned_ = static_cast<char*>(host_alloc_pinned(cap));
  dev_ = static_cast<char*>(device_alloc(cap));
  DSI_CHECK(dev_ != nullptr, "out of GPU memory for the step plan (", cap, " bytes)");
  capacity_ = cap;
  packed_.clear();
  ++generation_;
}

PackedPlan pack_plan(const BatchPlan& plan) {
  const int32_t S = plan.num_seqs(), T = plan.num_tokens();
  std::vector<int32_t> token_seq(static_cast<size_t>(T));
  for (int32_t s = 0; s < S; ++s)
    for (int32_t t = plan.cu_seqlens[s]; t < plan.cu_seqlens[s + 1]; ++t) token_seq[t] = s;
  PackedPlan p;
  p.token_ids = append(p.bytes, plan.token_ids);
  p.positions = append(p.bytes, plan.positions);
  p.token_seq = append(p.bytes, token_seq);
  p.slot_mapping = append(p.bytes, plan.slot_mapping);
  p.cu_seqlens = append(p.bytes, plan.cu_seqlens);
  p.context_lens = append(p.bytes, plan.context_lens);
  p.block_table_indptr = append(p.bytes, plan.block_table_indptr);
  p.logits_rows = append(p.bytes, plan.logits_rows);
  // Always T entries (-1: a known token), so that offsets depend on the counts only.
  std::vector<int32_t> prev(static_cast<size_t>(T), -1);
  std::copy(plan.prev_sample_rows.begin(),
            plan.prev_sample_rows.begin() + std::min<size_t>(prev.size(), plan.prev_sample_rows.size()),
            prev.begin());
  p.prev_sample_rows = append(p.bytes, prev);
  p.block_table = append(p.bytes, plan.block_table);  // its length changes from step to step
  // Multi-query steps only (eager, never captured): nothing is appended to a decode-only step.
  const MlaStepSplit mla = mla_split_step(plan.cu_seqlens, plan.positions, mla_prefill_min_query());
  if (!mla.blocks.empty()) {
    p.mla_rows = append(p.bytes, mla.rows);
    p.mla_blocks = append(p.bytes, mla.blocks);
    p.num_mla_rows = static_cast<int32_t>(mla.rows.size());
    p.num_mla_blocks = static_cast<int32_t>(mla.blocks.size());
  }
  return p;
}

const DevicePlan& StepPlan::upload(const BatchPlan& plan, int32_t context_bound, const HostReadFeed* feed) {
  const int32_t S = plan.num_seqs(), T = plan.num_tokens();
  PackedPlan pp = pack_plan(plan);
  std::vector<char>& packed = pp.bytes;
  reserve(packed.size());
  fed_ = false;
  if (packed != packed_) {
    DSI_CHECK(!capturing(), "a CUDA graph capture needs its plan uploaded before the capture");
    if (copy_done_) event_wait_host(copy_done_);  // the previous copy has left the staging buffer
    std::memcpy(pinned_, packed.data(), packed.size());
    if (host_reads_enabled() && packed.size() <= kHostReadMaxBytes) {  // no copy engine between kernels
      HostReadFeed f;
      if (feed) {
        f = *feed;
        f.token_ids_at = pp.token_ids;
        f.prev_rows_at = pp.prev_sample_rows;
        f.tokens = T;
      }
      copy_from_host_by_kernel(dev_, pinned_, packed.size(), feed ? &f : nullptr);
      fed_ = feed != nullptr;
    } else {
      copy_to_device_async(dev_, pinned_, packed.size());
    }
    if (!copy_done_) copy_done_ = event_create();
    event_record(copy_done_);
    packed_ = std::move(packed);
  }
  auto at = [&](size_t offset) { return dev_ + offset; };
  token_ids_offset_ = pp.token_ids;
  device_.token_ids = reinterpret_cast<const int32_t*>(at(pp.token_ids));
  device_.positions = reinterpret_cast<const int32_t*>(at(pp.positions));
  device_.token_seq = reinterpret_cast<const int32_t*>(at(pp.token_seq));
  device_.cu_seqlens = reinterpret_cast<const int32_t*>(at(pp.cu_seqlens));
  device_.context_lens = reinterpret_cast<const int32_t*>(at(pp.context_lens));
  device_.block_table_indptr = reinterpret_cast<const int32_t*>(at(pp.block_table_indptr));
  device_.block_table = reinterpret_cast<const int32_t*>(at(pp.block_table));
  device_.slot_mapping = reinterpret_cast<const int64_t*>(at(pp.slot_mapping));
  device_.logits_rows = reinterpret_cast<const int32_t*>(at(pp.logits_rows));
  device_.prev_sample_rows = reinterpret_cast<const int32_t*>(at(pp.prev_sample_rows));
  device_.mla_rows = pp.num_mla_blocks > 0 ? reinterpret_cast<const int32_t*>(at(pp.mla_rows)) : nullptr;
  device_.mla_blocks = pp.num_mla_blocks > 0 ? reinterpret_cast<const int32_t*>(at(pp.mla_blocks)) : nullptr;
  device_.num_mla_rows = pp.num_mla_rows;
  device_.num_mla_blocks = pp.num_mla_blocks;
  device_.num_tokens = T;
  device_.num_seqs = S;
  device_.num_logits_rows = static_cast<int32_t>(plan.logits_rows.size());
  device_.block_size = plan.block_size;
  int32_t max_ctx = context_bound;
  for (int32_t c : plan.context_lens) max_ctx = std::max(max_ctx, c);
  device_.max_context = max_ctx;
  host_ = &plan;
  return device_;
}

const int32_t* StepPlan::find(const std::vector<int32_t>& v) const {
  if (!host_) return nullptr;
  if (&v == &host_->token_ids) return device_.token_ids;
  if (&v == &host_->positions) return device_.positions;
  if (&v == &host_->cu_seqlens) return device_.cu_seqlens;
  if (&v == &host_->context_lens) return device_.context_lens;
  if (&v == &host_->block_table_indptr) return device_.block_table_indptr;
  if (&v == &host_->block_table) return device_.block_table;
  if (&v == &host_->logits_rows) return device_.logits_rows;
  return nullptr;
}

const int64_t* StepPlan::find(const std::vector<int64_t>& v) const {
  return host_ && &v == &host_->slot_mapping ? device_.slot_mapping : nullptr;
}

}  // namespace dsinfer::cuda
