"""The real-verl tests read verl's own resolved config from the run log (the ``pprint`` TaskRunner prints, as
Ray forwards it). Ray's log monitor cuts a long line where its read chunk ends, anywhere, even inside a quoted
string; the lines below are verl 0.7.0's DAPO recipe dump as one real CI run logged it (the reward model's
``model`` block, cut twice: after ``'override_config': `` and inside the ``path`` string), with the test's
temporary directory shortened to /tmp/t. Reading them must give what verl printed, not a SyntaxError."""

from __future__ import annotations

import pytest

from test_realverl_dapo import config_dump_value

PREFIX = "\x1b[36m(TaskRunner pid=540)\x1b[0m "
CUT_DUMP = [
    "                  'model': {'external_lib': None,",
    "                            'fsdp_config': {'_target_': 'verl.workers.config.FSDPEngineConfig',",
    "                                            'forward_prefetch': False,",
    "                                            'fsdp_size': -1,",
    "                                            'param_offload': False,",
    "                                            'reshard_after_forward': True,",
    "                                            'wrap_policy': {'min_num_params': 0}},",
    "                            'input_tokenizer': '/tmp/t/tiny/model',",
    "                            'override_config': ",
    "{},",
    "                            ",
    "'path': '~/models/FsfairX-L",
    "LaMA3-RM-v0.1',",
    "                            'trust_remote_code': False,",
    "                            'use_fused_kernels': False,",
    "                            'use_remove_padding': False,",
    "                            'use_shm': False},",
    "                  'n_gpus_per_node': 8,",
]
LOG = "\n".join(PREFIX + line for line in CUT_DUMP) + "\n"


def test_a_dump_line_cut_inside_a_string_reads_as_verl_printed_it() -> None:
    model = config_dump_value(LOG, "model")
    assert model["path"] == "~/models/FsfairX-LLaMA3-RM-v0.1"
    assert model["override_config"] == {}
    assert model["fsdp_config"]["wrap_policy"] == {"min_num_params": 0}
    assert model["input_tokenizer"] == "/tmp/t/tiny/model" and model["use_shm"] is False
    assert len(model) == 9


def test_a_scalar_and_a_cut_scalar_read_whole() -> None:
    assert config_dump_value(LOG, "n_gpus_per_node") == 8
    cut = PREFIX + "  'total_training_steps': 12\n" + PREFIX + "34,\n"
    assert config_dump_value(cut, "total_training_steps") == 1234


def test_pprints_split_string_reads_as_one_string() -> None:
    """pprint splits a long string into adjacent literals on separate lines; they join, as Python joins them."""
    log = PREFIX + "{'path': ('/a/long/'\n" + PREFIX + "          'path'),\n"
    assert config_dump_value(log, "path") == "/a/long/path"


def test_a_key_verl_did_not_print_is_named() -> None:
    with pytest.raises(AssertionError, match="custom_reward_function not in verl's config dump"):
        config_dump_value(LOG, "custom_reward_function")
