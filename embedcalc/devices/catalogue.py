"""The device catalogue (DESIGN.md §10): the schema of one device and the shipped YAML files; ``local`` (this
machine, measured and cached) is built and read by :mod:`embedcalc.devices.local`.

Shipped devices live in ``hardware/*.yaml`` in a checkout and ``embedcalc/hardware/*.yaml`` inside a wheel (as
presets do). ``--hardware`` takes a catalogue name, ``local`` (this machine as ``embedcalc bench --peak`` measured
it, cached in ``$XDG_CACHE_HOME/embedcalc/local.json``), or the path of a device file in the same schema.

Conventions, stated once:

- every figure is a :class:`~embedcalc.devices.figures.Figure`: a value and its ``source`` (a key of the device's
  ``sources`` or the citation written out) and an optional note on how it was read off the datasheet;
- peaks are **dense** (no 2:4 structured sparsity; datasheets often print the sparse rate, twice these), per dtype
  ``fp32`` (the non-tensor-core rate on NVIDIA; PyTorch uses TF32 for float32 matmuls only when asked), ``tf32``,
  ``bf16``, ``fp16``, ``fp8``, ``fp4`` and ``int8`` where the device has them (absent, never zero, where it has
  not: a100 has no fp8, hopper no fp4);
- memory capacity in bytes: datasheet "GB" of HBM/GDDR is binary (an H100's 80 GB is 80 GiB); bandwidths in
  bytes per second; links (NVLink, xGMI, ICI, PCIe) **per direction**: half the "total" a datasheet prints;
- ``price_per_hour`` is a *default*: one public on-demand list price per device-hour (USD), with its source and the
  date it was read, for the cost lines; prices move, so ``--price-per-hour`` overrides it. A device no public list
  rents by the hour (H800, MI250X, ...) has none, and the cost then needs ``--price-per-hour``.
- a link's ``latency_s`` is the time one small message takes per hop (one step of a ring collective), as the
  collective libraries model it (NCCL's and RCCL's ``src/graph/tuning.cc`` tables, low-latency protocol); its
  ``domain_size`` the devices it joins directly (an 8-GPU NVLink node, a 72-GPU NVL72 rack, a TPU slice); the
  ``network`` is the scale-out link between such domains, per device (one InfiniBand/RoCE NIC per GPU in DGX
  systems).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from embedcalc.config.dtypes import canonical_dtype
from embedcalc.config.problems import problems_from_validation
from embedcalc.devices.figures import (
    BASE,
    ByteFigure,
    Figure,
    FractionFigure,
    GemvFigure,
    LatencyFigure,
    PriceFigure,
    RateFigure,
)
from embedcalc.errors import ConfigError
from embedcalc.sources.parsing import load_mapping
from embedcalc.sources.presets import shipped_dir, shipped_names

PeakDtype = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "fp4", "int8"]
PEAK_DTYPES: tuple[PeakDtype, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4", "int8")
LinkKind = Literal[
    "nvlink", "xgmi", "ici", "pcie-gen3", "pcie-gen4", "pcie-gen5", "pcie-gen6", "nvlink-c2c", "infiniband", "roce",
    "ethernet", "loopback",
]  # fmt: skip
LOCAL = "local"
_NAME = r"^[a-z0-9][a-z0-9._-]*$"
MAX_PATTERN_CHARS = (
    256  # cuda_name_pattern: a device-name regex (issue 33: 5,000 nested groups were a RecursionError)
)
_MAX_FLOPS = (
    1e19  # 10 EFLOP/s per device: far above any chip; a bound that catches unit slips (PFLOP vs FLOP)
)
_MIN_FLOPS = 1e6  # 1 MFLOP/s: below any device; catches TFLOP/s written as FLOP/s (312 for 312e12)


class Link(BaseModel):
    """A link to other devices or to the host: its bandwidth in one direction, its per-hop latency, and how many
    devices it joins directly."""

    model_config = BASE

    kind: LinkKind = Field(
        description="nvlink, xgmi (AMD Infinity Fabric), ici (TPU), pcie-genN, nvlink-c2c, a network: "
        "infiniband, roce, ethernet; or loopback (processes of one machine, measured by `bench --peak --nproc N`)."
    )
    per_direction_bytes_per_s: RateFigure = Field(
        description="Bytes per second in one direction, summed over the device's links (half a 'total' figure)."
    )
    latency_s: LatencyFigure | None = Field(
        default=None,
        description="Seconds one small message takes per hop (one ring step), as the collective library's tuning "
        "model has it; none: the time model assumes NCCL's NVLink figure and says so.",
    )
    domain_size: int | None = Field(
        default=None, ge=2, le=1 << 20,
        description="Devices this link joins directly (8 in an HGX/DGX node, 72 in an NVL72 rack, a TPU slice); "
        "groups larger than this cross the device's `network`.",
    )  # fmt: skip


class Measurement(BaseModel):
    """How and when a ``local`` device was measured (``embedcalc bench --peak``)."""

    model_config = BASE

    measured_at: str = Field(description="ISO 8601 time of the measurement (UTC).")
    torch_version: str = Field(description="torch.__version__ at the measurement.")
    device: str = Field(description="The measured device as torch names it (e.g. 'NVIDIA H100 80GB HBM3').")
    matches: str | None = Field(
        default=None, description="The catalogue device whose cuda_name_pattern matches this device, if any."
    )
    efficiency: dict[str, float] = Field(
        default_factory=dict,
        description="Measured / datasheet for the matched catalogue device: 'memory' and one entry per peak dtype.",
    )


class Device(BaseModel):
    """One accelerator (or this machine): dense peaks per dtype, memory, bandwidths and links, each with a source."""

    model_config = BASE

    name: str = Field(pattern=_NAME, max_length=64, description="The catalogue name (`--hardware NAME`).")
    title: str = Field(min_length=1, description="The product as its vendor names it.")
    vendor: str = Field(
        min_length=1, description="NVIDIA, AMD, Google, ... ('local' for a measured machine)."
    )
    kind: Literal["gpu", "tpu", "cpu"] = Field(description="gpu, tpu or cpu.")
    cuda_name_pattern: str | None = Field(
        default=None,
        description="A regular expression matched against torch.cuda.get_device_name() to recognise this device.",
    )
    sources: dict[str, str] = Field(
        default_factory=dict, description="Citations (title, year, URL) by a short key that figures refer to."
    )
    peak_flops_per_s: dict[PeakDtype, Figure] = Field(
        min_length=1,
        description="Dense peak FLOP/s (int8: OP/s) by dtype: fp32, tf32, bf16, fp16, fp8, fp4, int8.",
    )
    memory_bytes: ByteFigure = Field(description="Device memory capacity in bytes.")
    memory_bandwidth_bytes_per_s: RateFigure = Field(
        description="Peak device-memory bandwidth, bytes per second."
    )
    kernel_overhead_s: LatencyFigure | None = Field(
        default=None,
        description="Seconds every kernel costs beyond its roofline time (dispatch, launch, prologue and tail), "
        "measured on this device (`bench --peak` for local); none: the calibration's kernel_overhead_s.",
    )
    gemm_half_rows: Figure | None = Field(
        default=None,
        description="GEMM rows (tokens through the matmul) at which a GEMM reaches half its large-matrix rate on "
        "this device, measured (`bench --peak` on a CPU); none: the calibration's gemm_half_rows.",
    )
    gemv_bytes_per_s: dict[PeakDtype, GemvFigure] = Field(
        default_factory=dict,
        description="Bytes per second a matmul through one row (a batch-1 decode's GEMV) and through up to "
        "gemv_max_rows rows reaches reading its weights from memory, by dtype, measured on this device (`bench "
        "--peak` for local); the expected time of a GEMV of that dtype reads its bytes at this rate. None for a "
        "dtype: the calibration's memory_fraction of the bandwidth.",
    )
    matmul_fraction: FractionFigure | None = Field(
        default=None,
        description="The maximum achievable matmul rate (the best large BF16 GEMM a benchmark finds under "
        "sustained load: the clock the matrix units hold and their tile efficiency) as a fraction of the datasheet "
        "BF16 peak, measured. The expected time's GEMM and attention fractions, fitted on a device of the "
        "calibration's reference_matmul_fraction, are scaled by this over that, for every dtype. None: as the "
        "fit's device.",
    )
    inference_attention_fraction: FractionFigure | None = Field(
        default=None,
        description="The fraction of the datasheet BF16 peak the fused causal attention kernel that serving engines "
        "run on this device reaches at long prompts, measured (FlashAttention-3 on Hopper); the expected time of an "
        "inference phase's attention cores uses it in place of the calibration's attention_fraction (a training "
        "step keeps the calibration's). None: the calibration's.",
    )
    interconnect: Link | None = Field(
        default=None,
        description="The device-to-device link (NVLink, xGMI, ICI); none: devices talk over PCIe.",
    )
    network: Link | None = Field(
        default=None,
        description="The scale-out network per device between link domains (InfiniBand/RoCE NIC per GPU); none: "
        "not published for this device.",
    )
    host_link: Link | None = Field(default=None, description="The link to the host (PCIe, NVLink-C2C).")
    price_per_hour: PriceFigure | None = Field(
        default=None,
        description="Default on-demand price of one device-hour (USD) from a public list, dated; none where no "
        "public list rents the device by the hour. `--price-per-hour` overrides it.",
    )
    measured: Measurement | None = Field(
        default=None, description="For a measured device (`local`): when, with which torch, on what."
    )

    @field_validator("cuda_name_pattern")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            if len(value) > MAX_PATTERN_CHARS:  # a device name's pattern: "H100(?!.*(PCIe|NVL))"
                raise ValueError(f"is {len(value):,} characters long; a device-name pattern is at most "
                                 f"{MAX_PATTERN_CHARS}")  # fmt: skip
            try:
                re.compile(value)
            except (re.error, RecursionError, OverflowError) as exc:  # nesting too deep for the regex parser
                why = exc if isinstance(exc, re.error) else "nested too deeply"
                raise ValueError(f"not a regular expression: {why}") from None
        return value

    @field_validator("peak_flops_per_s")
    @classmethod
    def _peaks_bounded(cls, value: dict[str, Figure]) -> dict[str, Figure]:
        for dtype, figure in value.items():
            if figure.value > _MAX_FLOPS:
                raise ValueError(
                    f"{dtype}: {figure.value:g} FLOP/s is above 10 EFLOP/s; write FLOP/s, not TFLOP/s"
                )
            if figure.value < _MIN_FLOPS:
                raise ValueError(
                    f"{dtype}: {figure.value:g} FLOP/s is below 1 MFLOP/s; write FLOP/s in full (312e12 for "
                    "312 TFLOP/s)"
                )
        return value

    @model_validator(mode="after")
    def _sources_exist(self) -> Device:
        """A source that looks like a key (one word) must be one of ``sources``."""
        for label, figure in self.figures():
            if re.fullmatch(r"[A-Za-z0-9_-]+", figure.source) and figure.source not in self.sources:
                known = ", ".join(sorted(self.sources)) or "none"
                raise ValueError(
                    f"{label}: source {figure.source!r} is not a key of `sources` ({known}); "
                    "add it there or write the citation out"
                )
        return self

    def figures(self) -> list[tuple[str, Figure]]:
        """Every number of the device with a label (``peak_flops_per_s.bf16``, ``memory_bytes``, ...)."""
        out: list[tuple[str, Figure]] = [
            (f"peak_flops_per_s.{d}", f) for d, f in self.peak_flops_per_s.items()
        ]
        out += [("memory_bytes", self.memory_bytes), ("memory_bandwidth_bytes_per_s",
                                                      self.memory_bandwidth_bytes_per_s)]  # fmt: skip
        out += [
            (name, figure)
            for name, figure in (
                ("kernel_overhead_s", self.kernel_overhead_s),
                ("gemm_half_rows", self.gemm_half_rows),
                ("matmul_fraction", self.matmul_fraction),
                ("inference_attention_fraction", self.inference_attention_fraction),
            )
            if figure is not None
        ]
        out += [(f"gemv_bytes_per_s.{d}", f) for d, f in self.gemv_bytes_per_s.items()]
        for label, link in (("interconnect", self.interconnect), ("network", self.network),
                            ("host_link", self.host_link)):  # fmt: skip
            if link is not None:
                out.append((f"{label}.per_direction_bytes_per_s", link.per_direction_bytes_per_s))
                if link.latency_s is not None:
                    out.append((f"{label}.latency_s", link.latency_s))
        if self.price_per_hour is not None:
            out.append(("price_per_hour", self.price_per_hour))
        return out

    def citation(self, figure: Figure) -> str:
        """The full source of ``figure``: the citation its key names, or the text itself."""
        return self.sources.get(figure.source, figure.source)

    def peak(self, dtype: PeakDtype) -> float | None:
        figure = self.peak_flops_per_s.get(dtype)
        return None if figure is None else figure.value

    def gemv_rate(self, dtype: PeakDtype, rows: float = 1.0) -> float | None:
        """The measured GEMV bytes per second for ``dtype`` through ``rows`` rows (``gemv_bytes_per_s``), None
        where not measured."""
        figure = self.gemv_bytes_per_s.get(dtype)
        return None if figure is None else figure.at(rows)

    @property
    def memory(self) -> int:
        return int(self.memory_bytes.value)

    @property
    def bandwidth(self) -> float:
        return self.memory_bandwidth_bytes_per_s.value


# --- the shipped catalogue ----------------------------------------------------------------------------------------


def hardware_dir() -> Path:
    """Where the device YAML files are: inside the installed package, else the checkout's ``hardware/``."""
    return shipped_dir("hardware")


def hardware_names() -> list[str]:
    """Names of the shipped devices, sorted (``local`` is not among them)."""
    return shipped_names("hardware")


def parse_device(data: dict[str, Any], origin: str) -> Device:
    """Validate a device mapping; one ConfigError (exit 3) naming every problem."""
    try:
        return Device.model_validate(data)
    except ValidationError as exc:
        problems = problems_from_validation(exc, {}, prefix=f"{origin}: ")
        lines = [p.message if p.message.startswith(p.path) else f"{p.path}: {p.message}" for p in problems]
        # one problem: its line (which names the file); several: one line each under the file's name
        said = lines[0] if len(lines) == 1 else f"{origin}: not a valid device file" + "".join(
            f"\n  {line}" for line in lines)  # fmt: skip
        raise ConfigError(said, problems, "invalid_device") from None


def catalogue() -> list[Device]:
    """Every shipped device, by name."""
    return [parse_device(load_mapping(hardware_dir() / f"{n}.yaml"), n) for n in hardware_names()]


def match_cuda_name(device_name: str) -> Device | None:
    """The catalogue device whose ``cuda_name_pattern`` matches ``torch.cuda.get_device_name()``, or None."""
    for device in catalogue():
        if device.cuda_name_pattern and re.search(device.cuda_name_pattern, device_name):
            return device
    return None


# --- dtypes -------------------------------------------------------------------------------------------------------

# The peak a workload dtype's linear-layer GEMMs run at (embedcalc.config.dtypes): int8/int4 are weight-only
# formats, dequantised and multiplied in fp16; fp8 GEMMs run at the FP8 peak (the rest of an fp8 model at bf16's);
# mxfp4/nvfp4 at the FP4 peak where the device has one (elsewhere weight-only at bf16's: time.estimate decides).
_WORKLOAD_PEAK: dict[str, PeakDtype] = {
    "fp32": "fp32", "bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "mxfp4": "fp4", "nvfp4": "fp4",
    "int8": "fp16", "int4": "fp16",
}  # fmt: skip


def peak_dtype(dtype: str) -> PeakDtype:
    """The catalogue dtype whose peak a workload ``dtype`` (fp32, bfloat16, ...) computes its GEMMs at."""
    return _WORKLOAD_PEAK[canonical_dtype(dtype)]


def datasheet_peak(cuda_name: str, dtype: str) -> tuple[float | None, str | None]:
    """(dense datasheet FLOP/s, its source) of a CUDA device for ``dtype``, or (None, None) when the catalogue
    has no such device or no peak for that dtype: never another device's number."""
    device = match_cuda_name(cuda_name)
    if device is None:
        return None, None
    figure = device.peak_flops_per_s.get(peak_dtype(dtype))
    if figure is None:
        return None, None
    note = f" ({figure.note})" if figure.note else ""
    return figure.value, f"{device.name}: {device.citation(figure)}{note}"
