"""verlctl: launch and keep alive verl RL jobs on Ascend NPU / NVIDIA GPU servers."""

__version__ = "0.1.0"
