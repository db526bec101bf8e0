"""The machine pre-check: typed, independent probes and their aggregate, :class:`MachineState`.

Importing this package pulls in pydantic; the CLI imports it inside ``verlctl detect`` only.
Optional dependencies (docker SDK, pyarrow) are imported inside the probes that use them.
"""

from verlctl.detect.common import Unavailable, UnavailableCode, strip_provenance
from verlctl.detect.datasets import (
    PARQUET_CHECK_SNIPPET,
    DatasetFile,
    DatasetInfo,
    ParquetColumn,
    check_verl_schema,
    inspect_parquet,
    parquet_check_argv,
    parse_parquet_check_output,
)
from verlctl.detect.docker_probe import ContainerInfo, DockerInfo, ImageInfo, probe_docker
from verlctl.detect.gpu import (
    GpuDevice,
    GpuInfo,
    GpuProcess,
    parse_nvidia_smi,
    parse_nvidia_smi_csv,
    parse_nvidia_smi_table,
    probe_gpu,
)
from verlctl.detect.machine import DetectOptions, MachineState, SystemInfo, check_datasets, detect_machine
from verlctl.detect.models import (
    ModelInfo,
    estimate_params_from_config,
    inspect_model,
    read_safetensors_header,
)
from verlctl.detect.network import (
    NetInterface,
    NetworkInfo,
    parse_ip_addr,
    parse_proc_net_route,
    probe_network,
)
from verlctl.detect.npu import NpuDevice, NpuInfo, NpuProcess, parse_npu_smi_info, probe_npu
from verlctl.detect.npu_kv import (
    NpuBoard,
    parse_npu_board,
    parse_npu_list,
    parse_npu_mapping,
    parse_npu_usages,
)
from verlctl.detect.ray_status import RayResource, RayStatus, parse_ray_status
from verlctl.detect.scan import ScanOptions, ScanResult, scan
from verlctl.detect.system import CannInfo, DiskSpace, disk_space, probe_cann, shm_space

__all__ = [
    "PARQUET_CHECK_SNIPPET",
    "CannInfo",
    "ContainerInfo",
    "DatasetFile",
    "DatasetInfo",
    "DetectOptions",
    "DiskSpace",
    "DockerInfo",
    "GpuDevice",
    "GpuInfo",
    "GpuProcess",
    "ImageInfo",
    "MachineState",
    "ModelInfo",
    "NetInterface",
    "NetworkInfo",
    "NpuBoard",
    "NpuDevice",
    "NpuInfo",
    "NpuProcess",
    "ParquetColumn",
    "RayResource",
    "RayStatus",
    "ScanOptions",
    "ScanResult",
    "SystemInfo",
    "Unavailable",
    "UnavailableCode",
    "check_datasets",
    "check_verl_schema",
    "detect_machine",
    "disk_space",
    "estimate_params_from_config",
    "inspect_model",
    "inspect_parquet",
    "parquet_check_argv",
    "parse_ip_addr",
    "parse_npu_board",
    "parse_npu_list",
    "parse_npu_mapping",
    "parse_npu_smi_info",
    "parse_npu_usages",
    "parse_nvidia_smi",
    "parse_nvidia_smi_csv",
    "parse_nvidia_smi_table",
    "parse_parquet_check_output",
    "parse_proc_net_route",
    "parse_ray_status",
    "probe_cann",
    "probe_docker",
    "probe_gpu",
    "probe_network",
    "probe_npu",
    "read_safetensors_header",
    "scan",
    "shm_space",
    "strip_provenance",
]
