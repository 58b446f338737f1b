// kFullSmem of quant_shapes.h: the shapes at the largest shared-memory split.
#include "quant_shapes.cuh"

namespace w8a8::qsweep {
#define W8A8_QSWEEP_ENTRY(t, v) Shape{t, v, &run<t, v, true>},
const Shape kFullSmem[] = {W8A8_QSWEEP_SHAPES(W8A8_QSWEEP_ENTRY)};
#undef W8A8_QSWEEP_ENTRY
}  // namespace w8a8::qsweep
