// The multiply-add peak of the instruction a kernel family's multi-row passes are built on,
// measured on the machine at hand: the compute floor of a forward (every multiply-add of its
// matrices at that peak) beside its byte floor (nemotron bench --verify-curve). Where the compute
// floor is above the byte floor, no kernel reaches the byte floor with that arithmetic.
#pragma once
#include <cstdint>

#include "base/memory.h"
#include "base/threads.h"
#include "kernels/linear.h"

namespace nemo::kernels {

struct DotPeak {
  const char* instruction;       // e.g. "VDPBF16PS zmm"
  int64_t macs_per_instruction;  // multiply-adds one instruction does
};
// The instruction Arith a's NVFP4 / FP8 passes of several rows run at `isa`: VDPBF16PS where the
// bf16 kernels run (bf16_kernel_name), else the widest f32 FMA, else a scalar fma.
DotPeak dot_peak_instruction(Arith a, Isa isa);
// `rounds` rounds of 12 independent chains of that instruction (enough to hide its latency);
// returns the multiply-adds done (12 * rounds * macs_per_instruction).
int64_t run_dot_peak(Arith a, Isa isa, int64_t rounds);

// The read bandwidth the decode kernels are held against (bench --membw, the roofline): `dot`
// over a 1 GiB buffer (larger than any cache) in 16 KB blocks on tc's threads; best of 3, GB/s.
// A ReadProbe keeps its buffer, so that it can be measured again and again beside the timed work
// (on a VM the first touch of 1 GiB costs seconds) rather than once at another time.
class ReadProbe {
 public:
  ReadProbe();
  double measure(const ThreadConfig& tc);

 private:
  Buffer<float> buf_;
};
double measure_read_bandwidth(const ThreadConfig& tc);  // a ReadProbe measured once

}  // namespace nemo::kernels
