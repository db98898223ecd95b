"""Published hardware specifications (vendor datasheets, bus standards) and the profile's hardware section.

Each number carries its citation. Peak FLOP/s are dense (no sparsity) BF16/FP16 tensor-core
figures; memory bandwidth is the HBM peak; link bandwidths are per direction, in GB/s (1e9 B/s).
Projection (``tripath/calibrate/published/projection.py``) scales costs by ratios of these numbers.
"""

from __future__ import annotations

import os
import platform
import shutil
from dataclasses import dataclass, field, replace

from tripath.core.errors import InputError
from tripath.profile.profile import Coefficient, Hardware

MIB = 1 << 20
GIB = 1 << 30

# Link bandwidths, per direction, with where each figure comes from.
PCIE4_X16 = Coefficient(31.5, "GB/s", "published", "PCIe 4.0 x16: 16 GT/s x 16 lanes x 128b/130b encoding, per "
                        "direction (PCI-SIG PCI Express Base Specification 4.0)")
PCIE5_X16 = Coefficient(63.0, "GB/s", "published", "PCIe 5.0 x16: 32 GT/s x 16 lanes x 128b/130b encoding, per "
                        "direction (PCI-SIG PCI Express Base Specification 5.0)")
NVME_GEN4 = Coefficient(7.0, "GB/s", "published", "PCIe 4.0 x4 NVMe sequential read, typical datacenter drive "
                        "(e.g. Samsung PM9A3 / Micron 7450 datasheets: 6.8-7.0 GB/s)")
# Measured by others: what an engine's copies reach over the bus (preferred for paging costs where published).
H100_DMA = Coefficient(50.0, "GB/s", "published", "H100 cudaMemcpyAsync DMA from pinned host memory, large "
                       "blocks, one way: about 50 GB/s; about 5 GB/s with 16-token blocks (vLLM issue #33398, "
                       "as summarised in reference/engines.md)")
H200_DMA = Coefficient(50.0, "GB/s", "derived", "H100's published pinned DMA rate (about 50 GB/s one way, vLLM "
                       "issue #33398), assuming H200 (the same GH100 die and PCIe 5.0 x16 host interface) copies "
                       "at the same rate; not measured on H200")
PCIE5_X16_H100 = replace(PCIE5_X16, note=f"{PCIE5_X16.note}; the bus figure is an upper bound: DMA copies "
                         "measured by others reach about 50 GB/s one way on H100 (vLLM issue #33398), which the "
                         "published profiles' paging cost uses")
NVLINK3 = Coefficient(300.0, "GB/s", "published", "NVLink 3 on A100 SXM4: 600 GB/s total bidirectional, 300 GB/s "
                      "per direction (NVIDIA A100 Tensor Core GPU datasheet)")
NVLINK5 = Coefficient(900.0, "GB/s", "published", "NVLink 5 on B200 SXM: 1.8 TB/s total bidirectional, 900 GB/s "
                      "per direction (NVIDIA DGX B200 / HGX B200 datasheets)")
NVLINK4 = Coefficient(450.0, "GB/s", "published", "NVLink 4 on H100/H200 SXM: 900 GB/s total bidirectional, 450 "
                      "GB/s per direction (NVIDIA H100 / H200 datasheets)")


@dataclass(frozen=True)
class HardwareSpec:
    """One accelerator's published roofline numbers and links."""

    name: str  # the profile key's hardware field
    device_name: str  # as torch.cuda.get_device_name reports it
    peak_tflops: float  # dense BF16/FP16 tensor core
    memory_tbps: float  # HBM peak bandwidth, TB/s
    memory_bytes: int
    host_memory_bytes: int
    ssd_bytes: int
    links: dict[str, Coefficient]
    citation: str
    copy_rates: dict[str, Coefficient] = field(default_factory=dict)  # link -> engine copy rate, where published
    fp32_tflops: tuple[float, str] | None = None  # FP32 (non-tensor) peak and its citation: dequantization's rate
    native_fp8: bool = False  # converts fp8 in one instruction (Hopper); Ampere emulates it with integer ops

    def __post_init__(self) -> None:
        for name in ("peak_tflops", "memory_tbps"):
            if not getattr(self, name) > 0:
                raise ValueError(f"HardwareSpec.{name}: must be > 0, got {getattr(self, name)!r}")

    def hardware(self, note: str = "") -> Hardware:
        text = f"{self.citation}. {note}".strip()
        return Hardware(self.device_name, self.memory_bytes, self.host_memory_bytes, self.ssd_bytes,
                        dict(self.links), text)


# host and SSD: one GPU's share of the vendor's 8-GPU server (DGX A100: 1 TiB RAM, 15.36 TB NVMe cache;
# DGX H100 / H200: 2 TiB RAM, 30.72 TB NVMe cache).
SPECS: dict[str, HardwareSpec] = {
    "a100-80gb": HardwareSpec(
        "a100-80gb", "NVIDIA A100-SXM4-80GB", 312.0, 2.039, 81920 * MIB, 128 * GIB, 15_360_000_000_000 // 8,
        {"device_host": PCIE4_X16, "host_ssd": NVME_GEN4, "interconnect": NVLINK3},
        "NVIDIA A100 80GB SXM4 datasheet: 312 TFLOP/s dense BF16, 2,039 GB/s HBM2e, 80 GB (81920 MiB); host and "
        "SSD are one GPU's share of a DGX A100 (1 TiB, 15.36 TB NVMe)",
        fp32_tflops=(19.5, "NVIDIA A100 Tensor Core GPU datasheet: 19.5 TFLOP/s FP32")),
    "h100-sxm": HardwareSpec(
        "h100-sxm", "NVIDIA H100 80GB HBM3", 989.4, 3.35, 81559 * MIB, 256 * GIB, 30_720_000_000_000 // 8,
        {"device_host": PCIE5_X16_H100, "host_ssd": NVME_GEN4, "interconnect": NVLINK4},
        "NVIDIA H100 SXM5 datasheet: 989 TFLOP/s dense BF16, 3.35 TB/s HBM3, 80 GB (81559 MiB); host and SSD are "
        "one GPU's share of a DGX H100 (2 TiB, 30.72 TB NVMe)", {"device_host": H100_DMA},
        fp32_tflops=(67.0, "NVIDIA H100 Tensor Core GPU datasheet (SXM): 67 TFLOP/s FP32"), native_fp8=True),
    "h200": HardwareSpec(
        "h200", "NVIDIA H200", 989.4, 4.8, 143771 * MIB, 256 * GIB, 30_720_000_000_000 // 8,
        {"device_host": PCIE5_X16_H100, "host_ssd": NVME_GEN4, "interconnect": NVLINK4},
        "NVIDIA H200 SXM datasheet: 989 TFLOP/s dense BF16, 4.8 TB/s HBM3e, 141 GB (143771 MiB); host and SSD are "
        "one GPU's share of a DGX H200 (2 TiB, 30.72 TB NVMe)", {"device_host": H200_DMA},
        fp32_tflops=(67.0, "NVIDIA H200 Tensor Core GPU datasheet (SXM): 67 TFLOP/s FP32"), native_fp8=True),
    "b200": HardwareSpec(
        "b200", "NVIDIA B200", 2250.0, 8.0, 183359 * MIB, 256 * GIB, 30_720_000_000_000 // 8,
        {"device_host": PCIE5_X16, "host_ssd": NVME_GEN4, "interconnect": NVLINK5},
        "NVIDIA DGX B200 datasheet: 72 PFLOP/s FP8 training for 8 GPUs = 2.25 PFLOP/s dense BF16 per GPU, 8 TB/s "
        "HBM3e, 1,440 GB for 8 GPUs = 180 GB per GPU (183359 MiB as vLLM reports it); host and SSD are one GPU's "
        "share of a DGX B200 (2 TiB, 8 x 3.84 TB NVMe)",
        fp32_tflops=(75.0, "NVIDIA HGX B200 datasheet: 75 TFLOP/s FP32 per GPU"), native_fp8=True),
}


def spec_named(name: str) -> HardwareSpec:
    if name not in SPECS:
        raise InputError(None, "hardware", f"unknown hardware spec {name!r}; known: {', '.join(SPECS)}")
    return SPECS[name]


def spec_for_device(device_name: str) -> HardwareSpec | None:
    """The published spec whose device name matches a CUDA device's, if any."""
    lowered = device_name.lower()
    for key, marker in (("b200", "b200"), ("h200", "h200"), ("h100-sxm", "h100"), ("a100-80gb", "a100")):
        if marker in lowered:
            return SPECS[key]
    return None


def cpu_hardware() -> tuple[str, Hardware]:
    """This machine as a CPU 'device': its RAM is the device memory; no links are measured."""
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    disk = shutil.disk_usage("/").total
    name = platform.processor() or platform.machine() or "cpu"
    note = ("CPU run: device memory is this machine's RAM (os.sysconf), ssd the root file system's size "
            "(shutil.disk_usage), both measured; no paging links were measured, so none are listed")
    return "cpu", Hardware(f"{name} ({os.cpu_count()} logical CPUs)", ram, ram, disk, {}, note)
