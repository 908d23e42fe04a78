"""What runs inside a model's worker process (``python -m dragoman.backends.onnx.worker.process``).

The server side of the backend (``backend.py``, ``client.py``, ``worker_slot.py``) never
imports these modules: the two sides meet only in the frames of
:mod:`~dragoman.backends.onnx.worker_protocol` (``tests/test_import_direction.py`` holds
that line). Here the worker may import the few modules both sides share: the protocol,
the sampling plan, the provider probe, the tokenizer readers.
"""
