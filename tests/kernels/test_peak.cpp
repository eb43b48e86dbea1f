// The dot-peak loop bench's compute floor times: the instruction it names per arithmetic and ISA,
// and the multiply-adds it reports.
#include <gtest/gtest.h>

#include <string>

#include "kernels/peak.h"

using namespace nemo::kernels;

TEST(DotPeak, NamesTheInstructionOfEachPathAndCountsItsWork) {
  for (Isa isa : available_isas())
    for (Arith a : {Arith::F32, Arith::Bf16}) {
      const DotPeak p = dot_peak_instruction(a, isa);
      std::string want = "scalar fma";
      if (isa == Isa::Avx2 || (isa == Isa::Avx512 && a == Arith::Bf16 && !bf16_kernel_verified()))
        want = "VFMADD231PS ymm";
      else if (isa == Isa::Avx512)
        want = a == Arith::Bf16 ? "VDPBF16PS zmm" : "VFMADD231PS zmm";
      EXPECT_EQ(p.instruction, want) << isa_name(isa) << " " << arith_name(a);
      const int64_t lanes = want == "VDPBF16PS zmm"     ? 32
                            : want == "VFMADD231PS zmm" ? 16
                            : want == "VFMADD231PS ymm" ? 8
                                                        : 1;
      EXPECT_EQ(p.macs_per_instruction, lanes);
      EXPECT_EQ(run_dot_peak(a, isa, 1000), 12 * 1000 * lanes) << isa_name(isa);
    }
}
