#!/bin/sh
# Runs a test binary with kernels compiled through LLVM (KILN_CPU_COMPILER=llvm).
KILN_CPU_COMPILER=llvm exec "$@"
