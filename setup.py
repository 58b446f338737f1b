"""Build script for w8a8.

Where torch is a CUDA build and nvcc is found, the CUDA extensions ``w8a8._C``
(sm90) and ``w8a8._C_sm80`` (Ampere / Ada) are built from the explicit source
lists below; elsewhere the pure-Python
package (reference and Triton backends) is installed and one line says so.
Install with ``pip install --no-build-isolation -e .`` so the build sees the
torch you run with.
"""
import os
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).parent

# Hopper sources: compiled for sm_90a only (wgmma and setmaxnreg need the "a" target).
SM90_SOURCES = [
    "csrc/scaled_mm_sm90.cu",
    "csrc/scaled_mm_sm90_swap_n16.cu",
    "csrc/scaled_mm_sm90_swap_n64.cu",
    "csrc/scaled_mm_sm90_m128.cu",
    "csrc/scaled_mm_sm90_m256.cu",
    "csrc/scaled_mm_sm90_large_128x256.cu",
    "csrc/scaled_mm_sm90_large_256x128.cu",
    "csrc/scaled_mm_sm90_coop_streamk.cu",
    "csrc/scaled_mm_gemv.cu",  # the decode GEMV (plain CUDA, dp4a), one of the sm90 config table's entries
    "csrc/scaled_mm_skinny.cu",  # the few-token GEMM (plain CUDA, mma.sync), entries of the same table
    "csrc/quantize.cu",  # activation quantizers (plain CUDA; built for sm_90a with the rest for now)
]
# Ampere / Ada sources (mma.sync): the extension w8a8._C_sm80, compiled for each
# arch of SM80_ARCHS; sm_90 SASS of the same kernels lets an H100 run this path
# (backend="cutlass_sm80"). Keep in step with cutlass_sm80_archs() in the binding.
SM80_SOURCES = [
    "csrc/scaled_mm_sm80_bindings.cpp",
    "csrc/scaled_mm_sm80.cu",
    "csrc/scaled_mm_sm80_m16.cu",
    "csrc/scaled_mm_sm80_m32.cu",
    "csrc/scaled_mm_sm80_m64.cu",
    "csrc/scaled_mm_sm80_m128.cu",
    "csrc/scaled_mm_sm80_large.cu",
    "csrc/scaled_mm_sm80_m96.cu",
    "csrc/scaled_mm_sm80_m80.cu",
    "csrc/scaled_mm_sm80_m96_split_k.cu",
]
SM80_ARCHS = ["80", "86", "89", "90"]
# Host-side torch bindings: the thin layer that checks tensors and calls the kernels.
BINDING_SOURCES = [
    "csrc/torch_bindings.cpp",
    "csrc/quantize_bindings.cpp",
    "csrc/linear_bindings.cpp",
]


def _cutlass_include_dirs():
    """CUTLASS headers: $CUTLASS_DIR if set, else the nvidia-cutlass wheel."""
    root = os.environ.get("CUTLASS_DIR")
    if root:
        return [os.path.join(root, "include"), os.path.join(root, "tools", "util", "include")]
    import importlib.util

    spec = importlib.util.find_spec("cutlass_library")  # found, not imported: headers only
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("w8a8: building w8a8._C needs the nvidia-cutlass package or CUTLASS_DIR")
    src = Path(spec.submodule_search_locations[0]) / "source"
    return [str(src / "include"), str(src / "tools" / "util" / "include")]


def _cuda_extension():
    """The CUDA extension, or (None, reason) where it cannot be built here."""
    try:
        import torch
        from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CUDAExtension
    except ImportError as exc:
        return None, None, f"torch is not importable at build time ({exc})"
    if torch.version.cuda is None:
        return None, None, f"torch {torch.__version__} is a CPU build"
    if CUDA_HOME is None:
        return None, None, "nvcc (CUDA_HOME) was not found"
    nvcc_flags = [
        "-O3",
        "-DNDEBUG",
        "-std=c++17",
        "--expt-relaxed-constexpr",
        "-DCUTLASS_ENABLE_DIRECT_CUDA_DRIVER_CALL=1",
        "-Xptxas=--warn-on-spills",
    ]
    sm90 = ["-gencode=arch=compute_90a,code=sm_90a"]
    # compute_80 PTX for the sm_90 pass too: the same mma.sync kernels, not a Hopper build of them.
    sm80 = [f"-gencode=arch=compute_{a if a != '90' else '80'},code=sm_{a}" for a in SM80_ARCHS] + ["--threads=4"]
    common = dict(
        include_dirs=[str(ROOT / "csrc")] + _cutlass_include_dirs(),
        libraries=["cuda"],
    )
    cxx = ["-O3", "-DNDEBUG", "-std=c++17"]
    exts = [
        CUDAExtension(name="w8a8._C", sources=BINDING_SOURCES + SM90_SOURCES,
                      extra_compile_args={"cxx": cxx, "nvcc": nvcc_flags + sm90}, **common),
        CUDAExtension(name="w8a8._C_sm80", sources=SM80_SOURCES,
                      extra_compile_args={"cxx": cxx, "nvcc": nvcc_flags + sm80}, **common),
    ]
    return exts, BuildExtension, None


ext, build_ext, why_not = _cuda_extension()
if ext is None:
    print(f"w8a8: installing the pure-Python package without w8a8._C / w8a8._C_sm80: {why_not}.")

setup(
    name="w8a8",
    version="0.1.0",
    description="Fast int8 (W8A8) linear layers for PyTorch: CUTLASS and Triton kernels",
    long_description=(ROOT / "README.md").read_text(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["w8a8", "w8a8.*"]),
    python_requires=">=3.10",
    install_requires=["torch>=2.4", "triton", "nvidia-cutlass", "safetensors", "ninja", "tqdm"],
    extras_require={
        "hf": ["transformers"],
        # compressed-tensors: the tests check our checkpoints against the library that defines the format.
        "test": ["pytest", "numpy", "hypothesis", "transformers", "compressed-tensors==0.20.0"],
    },
    ext_modules=ext or [],
    cmdclass={"build_ext": build_ext} if build_ext is not None else {},
    zip_safe=False,
)
