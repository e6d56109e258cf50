// Fragment-packed copies of the decode GEMV's weight matrices. The persistent GEMV's warps read a row tile in
// 16-row x 32-column fragments (row g and g + 8 of lane (g, t), its 8 columns from 8 t): packed, a matrix
// [N, K] bf16 is [ceil(N / 64) * 4 row groups][ceil(K / 32) column chunks][2][32 lanes] 16-byte pieces, zeros
// past N and K, so that one warp's pipeline stage is one contiguous run per row group, copied by the copy
// engine (cp.async.bulk) instead of 16 bytes a lane. Measured with the stream probe on the H200: reading
// such runs streams at ~4.69 TB/s against ~4.3 for the row-strided 16-byte copies.
//
// The registry maps a row-major weight's device address to its packed copy, so that launch_gemv finds it
// without any caller knowing; the copy's owner registers and unregisters it. CUDA-header free.
#pragma once
#include <cstddef>
#include <cstdint>

namespace dsinfer::cuda {

// Bytes of the packed copy of a [N, K] bf16 matrix.
int64_t gemv_packed_bytes(int64_t N, int64_t K);

// Whether the decode GEMV's weight `name` [N, K] (a checkpoint name) gets a packed copy of
// gemv_packed_bytes(N, K): only on the Hopper path (the bulk copies need sm_90); only names ending in one of
// kGemvPackedNames (DSINFER_GEMV_PACKED_NAMES, a comma list, replaces them), never an expert's: the dense
// MLP's gate and up projections and the LM head, the launches where the H200 measured a gain; only shapes
// gemv_packable takes; and by DSINFER_GEMV_PACKED (read once): 0 never, 1 always, auto (default) while the
// GPU keeps at least kGemvPackedFreeFraction of its memory free after the copy.
inline constexpr double kGemvPackedFreeFraction = 0.3;
inline constexpr const char* kGemvPackedNames = "mlp.gate_proj.weight,mlp.up_proj.weight,lm_head.weight";
bool gemv_wants_packed_copy(const char* name, int64_t N, int64_t K);

// Whether `bytes` more of device memory leave kGemvPackedFreeFraction of the GPU's memory free (the "auto"
// rule of the packed copies, the experts' too: CudaBackendOptions::moe_units_packed).
bool gemv_packed_copy_fits(int64_t bytes);

// Whether a [N, K] matrix is worth packing (the decode GEMV's shapes: K % 32 == 0, N >= 64, K >= 256).
bool gemv_packable(int64_t N, int64_t K);

// Writes the packed copy of w [N, K] (device, row-major bf16) into packed (device, gemv_packed_bytes) on
// stream() and waits for it.
void pack_gemv_weight(const uint16_t* w, int64_t N, int64_t K, uint16_t* packed);

// Registers / forgets packed as the copy of w [N, K].
void gemv_register_packed(const uint16_t* w, const uint16_t* packed, int64_t N, int64_t K);
void gemv_unregister_packed(const uint16_t* w);

// The packed copy of w [N, K], or null.
const uint16_t* gemv_packed_for(const uint16_t* w, int64_t N, int64_t K);

}  // namespace dsinfer::cuda
