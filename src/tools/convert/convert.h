// Converts a dense Hugging Face checkpoint (F32 / BF16 / F16, as a training pipeline writes it)
// into the formats NVIDIA and MLX publish, through synth's writer: the layout, quantization,
// sharding and configs are synth's, only the values come from the source. A target (config.json
// of nemotron_h) becomes dense, ModelOpt or MLX; a DFlash / DSpark drafter becomes the W4A16
// NVFP4 release layout (or dense), its own config.json kept but for "dtype".
#pragma once
#include <string>

#include "tools/synth/synth.h"

namespace nemo::convert {

struct ConvertResult {
  std::string kind;        // "target", "dflash" or "dspark"
  size_t tensors = 0;      // source tensors read
  bool tokenizer = false;  // the source's tokenizer files were copied
};

// Reads SRC/config.json and every tensor of SRC (checked against the layout first: a missing,
// extra, misshapen, non-float or quantized tensor fails naming its file and the tensor, before
// anything is written), then writes DST with synth's writer. From `opt` it takes the output's
// format (drafters: ModelOpt = W4A16 NVFP4, or Dense), dtype, mlx_group, mtp (false drops the
// source's mtp.* tensors), shard_bytes, threads and progress; the values, the tokenizer (SRC's,
// copied when present) and dense_drafter are the conversion's. DST's config.json comes last.
ConvertResult convert_checkpoint(const std::string& src, const std::string& dst,
                                 synth::SynthOptions opt);

}  // namespace nemo::convert
