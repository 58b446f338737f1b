// kPlain of quant_shapes.h: the shapes at the default shared-memory split.
#include "quant_shapes.cuh"

namespace w8a8::qsweep {
#define W8A8_QSWEEP_ENTRY(t, v) Shape{t, v, &run<t, v, false>},
const Shape kPlain[] = {W8A8_QSWEEP_SHAPES(W8A8_QSWEEP_ENTRY)};
#undef W8A8_QSWEEP_ENTRY
const int kNumShapes = sizeof(kPlain) / sizeof(kPlain[0]);
}  // namespace w8a8::qsweep
