// StepPlan: uploads a BatchPlan's arrays (and the per-token sequence index) into one device buffer with one
// asynchronous transfer from pinned memory per step (a kernel reading the pinned bytes when they are small,
// host_reads.h; else the copy engine). The buffer only grows; a growth changes the addresses,
// which generation() reports so that captured CUDA graphs can be dropped. Uploading a plan whose contents
// equal the last upload copies nothing (that is how a graph capture sees the plan its replay will use).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/batch_plan.h"
#include "backend/cuda/device_plan.h"
#include "backend/cuda/host_reads.h"

namespace dsinfer::cuda {

// The packed bytes of a plan and where each array starts in them. Every offset depends only on the token,
// sequence and logits-row counts (the block table, whose length grows with the contexts, comes last), so a
// CUDA graph captured for one step reads the right addresses in every later step of its batch bucket. Only
// a step with a sequence of mla_prefill_min_query() or more query tokens (never a decode-only step, so
// never a captured one) appends the MLA step split (mla_split_step) after the block table.
struct PackedPlan {
  std::vector<char> bytes;
  size_t token_ids = 0, positions = 0, token_seq = 0, slot_mapping = 0, cu_seqlens = 0, context_lens = 0,
         block_table_indptr = 0, logits_rows = 0, prev_sample_rows = 0, block_table = 0, mla_rows = 0,
         mla_blocks = 0;
  int32_t num_mla_rows = 0, num_mla_blocks = 0;
};
PackedPlan pack_plan(const BatchPlan& plan);

class StepPlan {
 public:
  StepPlan() = default;
  StepPlan(const StepPlan&) = delete;
  StepPlan& operator=(const StepPlan&) = delete;
  ~StepPlan();

  // Makes `plan` current (uploading it unless it equals the current contents); max_context is raised to
  // at least context_bound. With `feed` (its results, rows and vocab; the offsets and token count are
  // filled in here) the upload's kernel also feeds the previous sampling call's tokens when the upload goes
  // through a kernel reading host memory; fed() says whether it did.
  const DevicePlan& upload(const BatchPlan& plan, int32_t context_bound = 0,
                           const HostReadFeed* feed = nullptr);
  bool fed() const { return fed_; }
  // The plan last uploaded and its host source (null when none is current).
  const DevicePlan& device() const { return device_; }
  const BatchPlan* host() const { return host_; }
  void clear_host() { host_ = nullptr; }
  // Device pointer of a host array that is a member of the current plan (null otherwise).
  const int32_t* find(const std::vector<int32_t>& v) const;
  const int64_t* find(const std::vector<int64_t>& v) const;
  // The current plan's device token ids, writable: async scheduling patches tokens fed from the previous
  // sampling call into them (stream-ordered after the upload).
  int32_t* token_ids_for_feed() { return reinterpret_cast<int32_t*>(dev_ + token_ids_offset_); }
  uint64_t generation() const { return generation_; }

 private:
  void reserve(size_t bytes);

  std::vector<char> packed_;  // what the device buffer holds
  char* pinned_ = nullptr;    // staging for the copy
  char* dev_ = nullptr;
  size_t token_ids_offset_ = 0;  // of the current plan in dev_
  size_t capacity_ = 0;
  void* copy_done_ = nullptr;  // event after the last copy (the staging buffer is free once it passed)
  DevicePlan device_;
  const BatchPlan* host_ = nullptr;
  uint64_t generation_ = 0;
  bool fed_ = false;  // the last upload's kernel fed the sampled tokens
};

}  // namespace dsinfer::cuda
