// The op namespace the bindings register into: w8a8 for the package's extensions;
// benchmarks/sweep builds the same bindings into w8a8_sweep beside them (-DW8A8_OPS=w8a8_sweep).
#pragma once

#ifndef W8A8_OPS
#define W8A8_OPS w8a8
#endif
