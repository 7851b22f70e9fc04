"""Published dense peak FLOP/s of known accelerators, per dtype, with sources.

Dense means without 2:4 structured sparsity (datasheets often print the sparse figure, twice these). float32 is
the non-tensor-core rate: PyTorch does not use TF32 for float32 matmuls unless asked
(``torch.backends.cuda.matmul.allow_tf32`` is False by default). A device not in this table gets no spec peak:
`bench` then relies on its measured matmul peak, never on another device's number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

T = 10**12


@dataclass(frozen=True)
class DevicePeak:
    """Dense peak FLOP/s of one device by dtype, and where the numbers come from."""

    name: str
    float32: int
    bfloat16: int
    float16: int
    source: str

    def for_dtype(self, dtype: str) -> int:
        return {"float32": self.float32, "bfloat16": self.bfloat16, "float16": self.float16}[dtype]


# (pattern matched against torch.cuda.get_device_name(), peak). The first match wins, so SXM/PCIe variants
# come before the bare family name.
KNOWN_DEVICES: tuple[tuple[str, DevicePeak], ...] = (
    (r"H200", DevicePeak("NVIDIA H200 SXM", int(67 * T), int(989.5 * T), int(989.5 * T),
                         "NVIDIA H200 Tensor Core GPU datasheet (2024): FP32 67 TF, BF16/FP16 1,979 TF sparse")),
    (r"H100.*PCIe", DevicePeak("NVIDIA H100 PCIe", int(51 * T), int(756 * T), int(756 * T),
                               "NVIDIA H100 datasheet (2023): PCIe FP32 51 TF, BF16/FP16 1,513 TF sparse")),
    (r"H100", DevicePeak("NVIDIA H100 SXM", int(67 * T), int(989.5 * T), int(989.5 * T),
                         "NVIDIA H100 datasheet (2023): SXM FP32 67 TF, BF16/FP16 1,979 TF sparse")),
    (r"A100", DevicePeak("NVIDIA A100", int(19.5 * T), int(312 * T), int(312 * T),
                         "NVIDIA A100 datasheet (2021): FP32 19.5 TF, BF16/FP16 312 TF dense")),
    (r"L40S", DevicePeak("NVIDIA L40S", int(91.6 * T), int(362.05 * T), int(362.05 * T),
                         "NVIDIA L40S datasheet (2023): FP32 91.6 TF, BF16/FP16 733 TF sparse")),
    (r"\bL4\b", DevicePeak("NVIDIA L4", int(30.3 * T), int(121 * T), int(121 * T),
                           "NVIDIA L4 datasheet (2023): FP32 30.3 TF, BF16/FP16 242 TF sparse")),
    (r"A10G?\b", DevicePeak("NVIDIA A10", int(31.2 * T), int(125 * T), int(125 * T),
                            "NVIDIA A10 datasheet (2021): FP32 31.2 TF, BF16/FP16 250 TF sparse")),
    (r"V100", DevicePeak("NVIDIA V100 SXM2", int(15.7 * T), 0, int(125 * T),
                         "NVIDIA V100 datasheet (2020): SXM2 FP32 15.7 TF, FP16 tensor 125 TF; no BF16")),
    (r"\bT4\b", DevicePeak("NVIDIA T4", int(8.1 * T), 0, int(65 * T),
                           "NVIDIA T4 datasheet (2019): FP32 8.1 TF, FP16 tensor 65 TF; no BF16")),
)  # fmt: skip


def known_peak(device_name: str) -> DevicePeak | None:
    """The published peaks for a CUDA device name (``torch.cuda.get_device_name()``), or None if unknown."""
    for pattern, peak in KNOWN_DEVICES:
        if re.search(pattern, device_name):
            return peak
    return None
