"""Compiler flags shared by every pstrain target."""

# C11 with GNU extensions off, warnings on for our own code. -march=x86-64-v3 lets the
# compiler vectorise the ps's summing and optimizer loops with AVX2/FMA.
PSTRAIN_COPTS = [
    "-std=c11",
    "-D_GNU_SOURCE",
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-O2",
    "-march=x86-64-v3",
    "-fno-strict-aliasing",
]
