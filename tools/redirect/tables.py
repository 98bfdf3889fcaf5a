"""Data tables of the CUDA redirect: which torch APIs take a device argument."""

# torch.* functions with a ``device=`` keyword (factories): wrapped to map CUDA devices.
FACTORIES: tuple[str, ...] = (
    "arange", "as_tensor", "asarray", "bartlett_window", "blackman_window", "empty", "empty_like",
    "empty_permuted", "empty_strided", "eye", "from_file", "full", "full_like", "hamming_window",
    "hann_window", "kaiser_window", "linspace", "logspace", "normal", "ones", "ones_like", "rand",
    "rand_like", "randint", "randint_like", "randn", "randn_like", "randperm", "range",
    "scalar_tensor", "sparse_bsc_tensor", "sparse_bsr_tensor", "sparse_compressed_tensor",
    "sparse_coo_tensor", "sparse_csc_tensor", "sparse_csr_tensor", "tensor", "tril_indices",
    "triu_indices", "zeros", "zeros_like",
)

# Tensor methods with a ``device=`` keyword.
TENSOR_FACTORIES: tuple[str, ...] = (
    "new_empty", "new_empty_strided", "new_full", "new_ones", "new_tensor", "new_zeros",
)

# Legacy typed constructors ``torch.cuda.<Name>(...)`` -> dtype name on the target device.
LEGACY_TENSOR_TYPES: dict[str, str] = {
    "FloatTensor": "float32", "DoubleTensor": "float64", "HalfTensor": "float16",
    "BFloat16Tensor": "bfloat16", "LongTensor": "int64", "IntTensor": "int32",
    "ShortTensor": "int16", "CharTensor": "int8", "ByteTensor": "uint8", "BoolTensor": "bool",
}

# torch.cuda.nvtx markers: profiling annotations with no effect on results -> no-ops.
NVTX_FUNCTIONS: tuple[str, ...] = ("range_push", "range_pop", "range_start", "range_end", "mark", "range")
