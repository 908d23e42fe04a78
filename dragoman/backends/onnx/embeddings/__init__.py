"""Embedding models of ``onnx`` entries: built offline, loaded in the server's process and
run on threads (ONNX Runtime lets go of the GIL), batched across requests."""
