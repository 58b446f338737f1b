"""Build script for w8a8.

Where torch is a CUDA build and nvcc is found, the CUDA extensions ``w8a8._C``
(sm90) and ``w8a8._C_sm80`` (Ampere / Ada) are built from the explicit source
lists below; elsewhere the pure-Python
package (reference and Triton backends) is installed and one line says so.
Install with ``pip install --no-build-isolation -e .`` so the build sees the
torch you run with.

Build-time only (never runtime dependencies): the CUTLASS headers (the ``nvidia-cutlass``
wheel, or ``CUTLASS_DIR``) and ``ninja``, both needed only where the CUDA extensions are
built. Triton is not listed: a CUDA torch wheel already depends on the triton it was built
with, and a CPU torch needs it only to run the tests (the ``test`` extra).
"""
import os
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).parent

# The archs each extension is compiled for, stated once: the gencode flags and the
# sm90_archs() / sm80_archs() ops (W8A8_SM*_ARCHS defines) are derived from them.
SM90_ARCHS = ["90"]  # sm_90a: wgmma and setmaxnreg need the "a" target
SM80_ARCHS = ["80", "86", "89", "90"]  # mma.sync; sm_90 so that an H100 can run this path when named
# W8A8_SWEEP_CONFIGS=1 also builds the sm90 table entries no heuristic picks (for config sweeps).
SWEEP_CONFIGS = os.environ.get("W8A8_SWEEP_CONFIGS") == "1"

# w8a8._C: the sm90 GEMM table (CUTLASS configs + decode kernels), the CUDA quantizers, linear_sm90.
SM90_SOURCES = [
    "csrc/torch/scaled_mm_sm90.cpp", "csrc/torch/quantize.cpp", "csrc/torch/linear.cpp",
    "csrc/sm90/scaled_mm_sm90.cu",
    "csrc/sm90/instances/swap_coop_streamk_128x16x128_1x1.cu",
    "csrc/sm90/instances/swap_coop_streamk_128x64x128_1x1.cu",
    "csrc/sm90/instances/pingpong_64x128x128_2x1.cu",
    "csrc/sm90/instances/pingpong_128x128x128_2x1.cu",
    "csrc/sm90/instances/coop_128x256x128_2x1.cu",
    "csrc/sm90/instances/coop_streamk_128x128x128_1x1.cu",
    "csrc/sm90/instances/swap_ws_64x32x256_1x1.cu", "csrc/sm90/instances/swap_ws_64x64x256_1x1.cu",
    "csrc/sm90/instances/ws_64x64x256_1x1.cu", "csrc/sm90/instances/swap_ws_64x96x256_1x1.cu",
    "csrc/sm90/instances/swap_coop_128x96x128_1x2.cu", "csrc/sm90/instances/swap_coop_128x192x128_1x1.cu",
    "csrc/sm90/instances/swap_coop_128x64x128_1x2.cu",
    "csrc/sm90/instances/swap_ws_64x16x256_1x2.cu", "csrc/sm90/instances/swap_ws_64x32x256_1x2.cu",
    "csrc/sm90/instances/swap_ws_64x48x256_1x2.cu", "csrc/sm90/instances/swap_ws_64x64x256_1x2.cu",
    "csrc/sm90/instances/swap_ws_64x96x128_1x2.cu", "csrc/sm90/instances/swap_ws_64x128x128_1x2.cu",
    "csrc/sm90/instances/coop_128x96x128_2x1.cu", "csrc/sm90/instances/coop_128x192x128_2x1.cu",
    "csrc/sm90/instances/swap_coop_128x80x128_1x2.cu", "csrc/sm90/instances/swap_coop_128x160x128_1x1.cu",
    "csrc/sm90/instances/coop_128x240x128_1x1.cu",
    "csrc/decode/scaled_mm_gemv.cu", "csrc/decode/scaled_mm_skinny.cu",
    "csrc/quantize/quantize.cu",
]
SM90_SWEEP_SOURCES = ["csrc/sm90/instances/coop_256x128x128_1x2.cu", "csrc/sm90/instances/swap_ws_64x16x256_1x1.cu",
                      "csrc/sm90/instances/swap_coop_128x96x128_1x1.cu",
                      "csrc/sm90/instances/coop_streamk_128x256x128_2x1.cu",
                      "csrc/sm90/instances/pingpong_64x256x128_2x1.cu", "csrc/sm90/instances/pingpong_64x128x128_2x2.cu",
                      "csrc/sm90/instances/swap_coop_128x128x128_2x1.cu", "csrc/sm90/instances/swap_ws_64x192x128_1x2.cu",
                      "csrc/sm90/instances/swap_ws_64x256x128_1x2.cu", "csrc/sm90/instances/swap_ws_64x128x256_1x2.cu",
                      "csrc/sm90/instances/swap_ws_64x16x128_1x2.cu", "csrc/sm90/instances/swap_ws_64x32x128_1x2.cu",
                      "csrc/sm90/instances/swap_ws_64x48x128_1x2.cu", "csrc/sm90/instances/swap_ws_64x64x128_1x2.cu",
                      "csrc/sm90/instances/swap_ws_64x96x256_1x2.cu", "csrc/sm90/instances/swap_ws_64x128x128_1x1.cu",
                      "csrc/sm90/instances/swap_ws_64x192x128_1x1.cu", "csrc/sm90/instances/swap_ws_64x256x128_1x1.cu",
                      "csrc/sm90/instances/coop_128x144x128_1x1.cu",
                      "csrc/sm90/instances/swap_ws_64x16x256_1x2_2cta.cu",
                      "csrc/sm90/instances/swap_ws_64x32x256_1x2_2cta.cu",
                      "csrc/sm90/instances/swap_ws_64x48x256_1x2_2cta.cu",
                      "csrc/sm90/instances/swap_ws_64x64x256_1x2_2cta.cu",
                      "csrc/sm90/instances/swap_ws_64x96x128_1x2_2cta.cu",
                      "csrc/sm90/instances/swap_ws_64x128x128_1x2_2cta.cu",
                      "csrc/sm90/instances/swap_ws_64x160x128_1x2_2cta.cu",
                      "csrc/sm90/instances/swap_ws_64x192x128_1x2_2cta.cu",
                      "csrc/sm90/instances/swap_ws_64x32x256_1x1_2cta.cu",
                      "csrc/sm90/instances/swap_ws_64x64x256_1x1_2cta.cu"]
# w8a8._C_sm80: the sm80 GEMM table.
SM80_SOURCES = [
    "csrc/torch/scaled_mm_sm80.cpp",
    "csrc/sm80/scaled_mm_sm80.cu",
    "csrc/sm80/instances/tile_16x64x128_w16x64x64_s5.cu",
    "csrc/sm80/instances/tile_32x64x128_w32x64x64_s5.cu",
    "csrc/sm80/instances/tile_64x128x128_w64x64x64_s4.cu",
    "csrc/sm80/instances/tile_128x128x64_w64x64x64_s5.cu",
    "csrc/sm80/instances/tile_128x256x64_w64x64x64_s4.cu",
    "csrc/sm80/instances/tile_96x128x64_w48x64x64_s5.cu",
    "csrc/sm80/instances/tile_80x128x128_w80x32x128_s3.cu",
    "csrc/sm80/instances/tile_96x128x64_w48x64x64_s5_splitk.cu",
]


def _cutlass_include_dirs():
    """CUTLASS headers: $CUTLASS_DIR if set, else the nvidia-cutlass wheel."""
    root = os.environ.get("CUTLASS_DIR")
    if root:
        return [os.path.join(root, "include"), os.path.join(root, "tools", "util", "include")]
    import importlib.util

    spec = importlib.util.find_spec("cutlass_library")  # found, not imported: headers only
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("w8a8: building the CUDA extensions needs the CUTLASS headers (build time only): "
                           "pip install --no-deps nvidia-cutlass==4.2.0.0, or set CUTLASS_DIR=/path/to/cutlass")
    src = Path(spec.submodule_search_locations[0]) / "source"
    return [str(src / "include"), str(src / "tools" / "util" / "include")]


def _cuda_extension():
    """(extensions, BuildExtension, None), or (None, None, why) where they cannot be built here."""
    try:
        import torch
        from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CUDAExtension
    except ImportError as exc:
        return None, None, f"torch is not importable at build time ({exc})"
    if torch.version.cuda is None:
        return None, None, f"torch {torch.__version__} is a CPU build"
    if CUDA_HOME is None:
        return None, None, "nvcc (CUDA_HOME) was not found"
    sweep = ["-DW8A8_SWEEP_CONFIGS"] if SWEEP_CONFIGS else []
    cxx = ["-O3", "-DNDEBUG", "-std=c++17"] + sweep
    # CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED: CuTe's wgmma selector may pick the atoms of N = 24, 48,
    # 80, 160, ... (without it a 48- or 80-token tile runs 16-wide wgmmas, three or five per K step).
    nvcc = ["-O3", "-DNDEBUG", "-std=c++17", "--expt-relaxed-constexpr", "-DCUTLASS_ENABLE_DIRECT_CUDA_DRIVER_CALL=1",
            "-DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED", "-Xptxas=--warn-on-spills"] + sweep
    sm90_gencode = [f"-gencode=arch=compute_{a}a,code=sm_{a}a" for a in SM90_ARCHS]
    # compute_80 PTX for the sm_90 pass: the same mma.sync kernels, not a Hopper build of them.
    sm80_gencode = [f"-gencode=arch=compute_{a if a != '90' else '80'},code=sm_{a}" for a in SM80_ARCHS]
    common = dict(include_dirs=[str(ROOT / "csrc")] + _cutlass_include_dirs(), libraries=["cuda"])
    # The arch lists reach only the host compiler (the bindings): nvcc would split a -D value at its commas.
    exts = [
        CUDAExtension(name="w8a8._C", sources=SM90_SOURCES + (SM90_SWEEP_SOURCES if SWEEP_CONFIGS else []),
                      extra_compile_args={"cxx": cxx + ["-DW8A8_SM90_ARCHS=" + ",".join(SM90_ARCHS)],
                                          "nvcc": nvcc + sm90_gencode}, **common),
        CUDAExtension(name="w8a8._C_sm80", sources=SM80_SOURCES,
                      extra_compile_args={"cxx": cxx + ["-DW8A8_SM80_ARCHS=" + ",".join(SM80_ARCHS)],
                                          "nvcc": nvcc + sm80_gencode + ["--threads=4"]}, **common),
    ]
    return exts, BuildExtension, None


ext, build_ext, why_not = _cuda_extension()
if ext is None:
    print(f"w8a8: installing the pure-Python package without w8a8._C / w8a8._C_sm80: {why_not}.")

def _version():
    """``__version__`` from w8a8/_version.py, read without importing the package (which imports torch)."""
    scope = {}
    exec((ROOT / "w8a8" / "_version.py").read_text(), scope)
    return scope["__version__"]


setup(
    name="w8a8",
    version=_version(),
    description="Fast int8 (W8A8) linear layers for PyTorch: CUTLASS and Triton kernels",
    long_description=(ROOT / "README.md").read_text(),
    long_description_content_type="text/markdown",
    author="The w8a8 maintainers",
    license="Apache-2.0",
    license_files=["LICENSE"],
    classifiers=[
        "Development Status :: 4 - Beta",
        "Intended Audience :: Developers",
        "Intended Audience :: Science/Research",
        "Operating System :: POSIX :: Linux",
        "Programming Language :: C++",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3 :: Only",
        "Environment :: GPU :: NVIDIA CUDA",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
        "Typing :: Typed",
    ],
    keywords=["int8", "quantization", "w8a8", "pytorch", "cutlass", "triton", "inference"],
    packages=find_packages(include=["w8a8", "w8a8.*"]),
    package_data={"w8a8": ["py.typed"]},
    python_requires=">=3.10",
    install_requires=["torch>=2.4", "safetensors", "tqdm"],
    extras_require={
        "hf": ["transformers"],
        # triton: without a GPU the tests run the Triton kernels in Triton's interpreter.
        # compressed-tensors: the tests check our checkpoints against the library that defines the format.
        "test": ["pytest", "numpy", "hypothesis", "triton", "transformers", "compressed-tensors==0.20.0"],
        # The Triton kernels are among those compared (a CUDA torch already brings triton); the plots need matplotlib.
        "bench": ["triton", "matplotlib"],
    },
    ext_modules=ext or [],
    cmdclass={"build_ext": build_ext} if build_ext is not None else {},
    zip_safe=False,
)
