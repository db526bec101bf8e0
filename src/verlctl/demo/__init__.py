"""``verlctl demo``: verlctl's whole flow with real verl 0.9.1 on a machine with no accelerator.

* :mod:`verlctl.demo.environment`: the host's fitness for it, and the Python environment of real verl on the CPU
  (PyPI torch, vLLM's CPU build, Ray, TransferQueue), made once under the user's cache dir and reused;
* :mod:`verlctl.demo.spec`: the run spec it writes next to the user (``demo/run.yaml``, every CPU-only setting
  commented);
* ``device_layer.py``, ``tiny.py``, ``reward.py``: files that run inside that environment, not in verlctl (the
  demo device layer, the tiny model/tokenizer/data builder, a reward with variance for a random model).
"""
