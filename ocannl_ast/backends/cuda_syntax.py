"""The CUDA dialect of the C renderer: what differs from `CSyntax` for NVRTC.

NVRTC compiles without the C library headers, so the prologue defines the fixed-width
integer types and the NAN / INFINITY literals itself; helpers are ``__device__`` functions,
buffers ``__restrict__`` pointers, indices ``long long``, static arguments read from the
routine's device array of them (``ocannl_statics``). Kernels return nothing: a failing
`CheckIndex` stores its code in the routine's error cell (first failure wins) and returns.
The math spellings, helpers and threefry text are the C dialect's, so a device routine
computes the same bits as the C one (with ``-fmad=false``, as gcc's ``-ffp-contract=off``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ocannl_ast.backends.c_syntax import CSyntax
from ocannl_ast.lowering.loop_ir import CONTRACTION_MIN_WORK, Precision

#: Name of the error-cell parameter every kernel takes last.
ERR = "ocannl_err"
#: Name of the flattened thread index of a grid-stride loop.
THREAD = "ocannl_t"
#: Name of the parameter pointing to the routine's device array of static arguments.
STATICS = "ocannl_statics"

#: C++ keywords and CUDA built-ins a buffer name may not take (C's are prefixed already).
CUDA_RESERVED = frozenset((
    "alignas", "alignof", "and", "asm", "bool", "catch", "class", "compl", "concept",
    "consteval", "constexpr", "constinit", "const_cast", "decltype", "delete", "dynamic_cast",
    "explicit", "export", "false", "friend", "mutable", "namespace", "new", "noexcept", "not",
    "nullptr", "operator", "or", "private", "protected", "public", "reinterpret_cast",
    "requires", "static_assert", "static_cast", "template", "this", "thread_local", "throw",
    "true", "try", "typeid", "typename", "using", "virtual", "wchar_t", "xor", "threadIdx",
    "blockIdx", "blockDim", "gridDim", "warpSize", "atomicCAS", "std", "cuda", "bitand",
    "bitor", "not_eq", "or_eq", "xor_eq", "and_eq", "char8_t", "char16_t", "char32_t",
))

PRELUDE: tuple[str, ...] = (
    "typedef unsigned int uint32_t;",
    "typedef unsigned long long uint64_t;",
    "typedef long long int64_t;",
    "#define INFINITY __int_as_float(0x7f800000)",
    "#define NAN __int_as_float(0x7fc00000)",
)


@dataclass(frozen=True, slots=True)
class CudaSyntax(CSyntax):
    """CUDA C++ for NVRTC: ``extern "C" __global__ void k(float* __restrict__ b, ...)``.

    Example: ``CUDA.for_header("i0", 4) == "for (long long i0 = 0; i0 < 4; ++i0) {"``.
    """

    type_names: dict[Precision, str] = field(
        default_factory=lambda: {Precision.FLOAT32: "float", Precision.FLOAT64: "double"})
    includes: tuple[str, ...] = PRELUDE
    kernel_qualifier: str = 'extern "C" __global__ '
    helper_qualifier: str = "static __device__ __forceinline__ __attribute__((unused))"
    restrict: str = "__restrict__"
    index_type: str = "long long"
    reserved_names: frozenset[str] = CUDA_RESERVED
    contraction_kernels: bool = False  #: one thread per cell instead (`cuda_backend`)
    reorder_loops: bool = False
    tiny_loop_pragma: str = ""  #: (nvcc unrolls small constant loops itself)
    own_math: bool = False  #: the device math library (expf, ...), not `c_math`
    fusion_limit: int = CONTRACTION_MIN_WORK  #: no contraction kernels: fuse up to 32^3

    def check(self, index: str, bound: int, code: int) -> str:
        return (f"if (!(0 <= ({index}) && ({index}) < {bound})) "
                f"{{ atomicCAS({ERR}, 0, {code}); return; }}")

    def statics_param(self) -> str:
        """The parameter of a kernel that reads static arguments: their device array."""
        return f"const {self.index_type}* {self.restrict} {STATICS}"

    def static_read(self, name: str, pos: int) -> str:
        """The first statement of such a kernel: static argument `pos` as a local `name`."""
        return f"  const {self.index_type} {name} = {STATICS}[{pos}];"

    def signature(self, cname: str, params: list[str]) -> str:
        return f"{self.kernel_qualifier}void {cname}({', '.join([*params, f'int* {ERR}'])}) {{"

    def grid_stride(self, total: int) -> str:
        """The header of a loop giving each thread the flat indices t, t + stride, ..."""
        t = THREAD
        return (f"for ({self.index_type} {t} = (long long)blockIdx.x * blockDim.x + "
                f"threadIdx.x; {t} < {total}LL; {t} += (long long)gridDim.x * blockDim.x) {{")

    def epilogue(self) -> list[str]:
        return ["}"]


#: The dialect of the CUDA backend.
CUDA = CudaSyntax()
