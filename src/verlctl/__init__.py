"""verlctl: launch and keep alive verl RL jobs on Ascend NPU / NVIDIA GPU servers."""

__version__ = "0.1.0"

#: The verl versions verlctl knows (their configs, entry points and rules), and the default target.
#: Kept here, import-free, for ``verlctl --version``; ``tests/project/test_guides.py`` checks them against the spec model.
SUPPORTED_VERL_VERSIONS = ("0.7.0", "0.9.1")
DEFAULT_VERL_VERSION = "0.7.0"
