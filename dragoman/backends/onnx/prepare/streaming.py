"""The streaming build (worker side): the builder reads a model whose weights come from
the GGUF one layer at a time, and an int4 build quantizes each layer's MatMuls as soon as
the builder has made them, so neither the float32 model nor a float32 folder ever exists.

Exact against the full-model path by construction, not by imitation:
- each weight is what transformers' GGUF reader makes of it (gguf-py's dequantize, then
  transformers' tensor processor for the architecture, then float32), tensor by tensor;
- each MatMul goes through onnxruntime's own MatMulNBits quantizer node by node, with the
  builder's settings, as the builder's ``to_nbits`` runs it over the whole graph.
tests/prepare/test_streaming_build.py compares the two paths' models.

Only for GGUF architectures transformers loads through its classic reader (the one with
per-tensor processors); the parent (:mod:`.build`) decides and says which path it takes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Tensors are read with plain reads, not through the reader's memory map, whose pages
# would stay resident and count against the build's peak; and dequantized, like
# quantized, a slab at a time so a large tensor (the LM head) has one float copy at most.
_SLAB = 16 << 20  # bytes of GGUF rows dequantized at once
_QUANTIZE_ELEMENTS = 4 << 20  # float weights quantized at once


class GgufTensors:
    """Float32 weights of a GGUF by transformers parameter name, made on demand."""

    def __init__(self, path: Path, model: Any) -> None:
        from gguf import GGUFReader
        from transformers.modeling_gguf_pytorch_utils import (
            TENSOR_PROCESSORS, TensorProcessor, get_gguf_hf_weights_map, load_gguf_checkpoint,
        )  # fmt: skip

        self.path = path
        reader = GGUFReader(path)
        arch = str(bytes(reader.fields["general.architecture"].parts[-1]), "utf-8")
        self.config = load_gguf_checkpoint(str(path), return_tensors=False)["config"]
        self.processor = TENSOR_PROCESSORS.get(arch, TensorProcessor)(config=self.config)
        self.key_mapping = get_gguf_hf_weights_map(model, self.processor)
        self.by_name = {self.key_mapping[t.name]: t for t in reader.tensors if t.name in self.key_mapping}
        # Tied parameters (the LM head sharing the embedding) are one tensor in the GGUF.
        first: dict[int, str] = {}
        self.alias: dict[str, str] = {}
        for name, param in model.named_parameters(remove_duplicate=False):
            owner = first.setdefault(id(param), name)
            if owner != name:  # a second name for one tensor: read whichever the GGUF holds
                self.alias[name] = self.alias[owner] = owner if owner in self.by_name else name
        missing = [n for n, _ in model.named_parameters(remove_duplicate=False) if self.source(n) not in self.by_name]
        if missing:
            raise SystemExit(f"error: the GGUF has no tensor for {len(missing)} weights of the model (e.g. {missing[0]})")

    def source(self, name: str) -> str:
        return self.alias.get(name, name)

    def load(self, name: str) -> Any:
        import numpy as np
        import torch

        tensor = self.by_name[self.source(name)]
        weights = self._dequantized(tensor)
        result = self.processor.process(weights=weights, name=tensor.name, tensor_key_mapping=self.key_mapping,
                                        parsed_parameters={"tensors": {}, "config": self.config})  # fmt: skip
        del weights
        # transformers copies (np.copy) and casts; a fresh contiguous array needs no copy.
        return torch.from_numpy(np.ascontiguousarray(result.weights)).to(torch.float32)

    def _dequantized(self, tensor: Any) -> Any:
        """gguf-py's dequantize of the tensor, read and dequantized a slab of rows at a time
        (blocks never span rows), into one array of the type dequantize gives."""
        import numpy as np
        from gguf import dequantize

        shape, dtype = tensor.data.shape, tensor.data.dtype
        row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize if len(shape) > 1 else 0
        rows = shape[0] if row_bytes else 1
        step = max(1, _SLAB // row_bytes) if row_bytes else 1
        out = None
        with self.path.open("rb") as f:
            f.seek(tensor.data_offset)
            for start in range(0, rows, step):
                count = min(step, rows - start)
                raw = np.empty((count, *shape[1:]) if row_bytes else shape, dtype=dtype)
                f.readinto(raw.reshape(-1).view(np.uint8).data)
                part = dequantize(raw, tensor.tensor_type)
                if not row_bytes:
                    return part
                if out is None:
                    out = np.empty((rows, *part.shape[1:]), dtype=part.dtype)
                out[start:start + count] = part
        return out


class LayerQuantizer:
    """Replaces the builder's float MatMuls that have a constant weight by onnxruntime's
    MatMulNBits, node by node, with the settings the builder's ``to_nbits`` uses."""

    def __init__(self, builder: Any) -> None:
        from onnxruntime.quantization.matmul_nbits_quantizer import (
            DefaultWeightOnlyQuantConfig, DefaultWeightOnlyQuantizer, QuantFormat,
        )  # fmt: skip

        self.builder = builder
        attrs = builder.quant_attrs
        problem = self.unsupported(builder)
        if problem:
            raise SystemExit(f"error: the streaming build cannot quantize with these options ({problem})")
        self.exclude = set(attrs["nodes_to_exclude"])
        self.op_types = tuple(attrs["op_types_to_quantize"])
        self.quantizer = DefaultWeightOnlyQuantizer(DefaultWeightOnlyQuantConfig(
            block_size=attrs["matmul_block_size"], is_symmetric=attrs["is_symmetric"],
            accuracy_level=attrs["accuracy_level"], quant_format=QuantFormat.QOperator,
            op_types_to_quantize=self.op_types, bits=attrs["bits"],
        ))  # fmt: skip

    @staticmethod
    def unsupported(builder: Any) -> str:
        attrs = builder.quant_attrs
        if attrs.get("use_qdq"):
            return "QDQ format"
        if getattr(builder, "int4_customized_weight_config", None) or getattr(builder, "exact_quant_overrides", None):
            return "per-node precision overrides"
        if getattr(builder, "quantization_algo", "default") != "default":
            return f"quantization method {builder.quantization_algo}"
        if builder.matmul_attrs.get("weights_prepacked", 0) > 0:
            return "prepacked CUDA weights"
        if set(attrs["op_types_to_quantize"]) - {"MatMul", "Gather"}:
            return f"quantizing {', '.join(attrs['op_types_to_quantize'])}"
        return ""

    def sweep(self) -> int:
        """Quantize every eligible MatMul now in the graph; returns how many."""
        import onnx_ir as ir

        graph = self.builder.model.graph
        todo = [node for node in graph if node.op_type in self.op_types and node.domain == ""
                and node.name not in self.exclude and self._weight(node) is not None]  # fmt: skip
        for node in todo:
            weight = self._weight(node)
            if node.op_type == "MatMul" and len(weight.shape) == 2 and weight.dtype in (ir.DataType.FLOAT, ir.DataType.FLOAT16):
                self._replace_matmul(node, weight)
            else:
                self._replace(node, weight)
        return len(todo)

    def _replace_matmul(self, node: Any, weight: Any) -> None:
        """``quantize_matmul``'s QOperator branch for a 2-D weight, quantizing a slab of
        columns at a time (each column is its own blocks, so the bytes are the same) so
        the float weight is never copied whole."""
        import numpy as np
        import onnx_ir as ir

        matrix = weight.const_value.numpy()
        rows, cols = matrix.shape
        step = max(1, _QUANTIZE_ELEMENTS // max(rows, 1))
        pieces = [self.quantizer.qbits_block_quant(np.ascontiguousarray(matrix[:, a:a + step])) for a in range(0, cols, step)]
        del matrix
        packed, scales, zero_points = (np.concatenate([p[i] for p in pieces], axis=0) for i in range(3))
        del pieces
        bits = self.quantizer.config.bits
        made = [ir.Tensor(packed, name=f"{weight.name}_Q{bits}"), ir.Tensor(scales, name=f"{weight.name}_scales")]
        if not self.quantizer.config.is_symmetric:
            made.append(ir.Tensor(zero_points, name=f"{weight.name}_zero_points"))
        attributes = {"K": rows, "N": cols, "bits": bits, "block_size": self.quantizer.config.block_size}
        if self.quantizer.config.accuracy_level:
            attributes["accuracy_level"] = self.quantizer.config.accuracy_level
        inputs = [node.inputs[0], *(self._initializer(t) for t in made)]
        new = ir.node("MatMulNBits", inputs, attributes, domain="com.microsoft", name=f"{node.name}_Q{bits}")
        self._swap(node, new, [o.name for o in node.outputs], weight)

    def _initializer(self, tensor: Any) -> Any:
        import onnx_ir as ir

        value = ir.Value(name=tensor.name, type=ir.TensorType(tensor.dtype), shape=tensor.shape, const_value=tensor)
        self.builder.model.graph.register_initializer(value)
        self.builder.values[tensor.name] = value
        return value

    def _swap(self, node: Any, new: Any, names: list[str], weight: Any) -> None:
        """Put ``new`` where ``node`` was, its outputs taking the old ones' names and uses."""
        import onnx_ir as ir

        graph = self.builder.model.graph
        for out, name in zip(new.outputs, names, strict=True):
            old = next((v for v in node.outputs if v.name == name), None)
            out.name = name
            if old is not None:
                out.dtype, out.shape = old.dtype, old.shape
                ir.convenience.replace_all_uses_with(old, out, replace_graph_outputs=True)
            self.builder.values[name] = out
        graph.insert_before(node, new)
        graph.remove(node, safe=True)
        if not weight.uses():
            graph.initializers.pop(weight.name, None)
            self.builder.values.pop(weight.name, None)

    @staticmethod
    def _weight(node: Any) -> Any:
        """The constant the quantizer would quantize: MatMul's B, Gather's data."""
        index = 0 if node.op_type == "Gather" else 1
        value = node.inputs[index] if len(node.inputs) > index else None
        return value if value is not None and value.is_initializer() and value.const_value is not None else None

    def finish(self, model: Any) -> None:
        """What the quantizer's ``process`` does to the whole model besides the nodes: the
        opsets, and dropping the initializers nothing reads (``clean_initializers``)."""
        graph = model.graph
        for name, value in list(graph.initializers.items()):
            if not value.uses() and value not in graph.outputs:
                graph.initializers.pop(name)
                self.builder.values.pop(name, None)
        model.opset_imports["com.microsoft"] = 1
        if "Gather" in self.op_types:
            # int4 data needs opset 21 and IR version 10
            model.opset_imports[""] = max(model.opset_imports.get("", 21), 21)
            model.ir_version = max(model.ir_version, 10)

    def _replace(self, node: Any, weight: Any) -> None:
        """Any other node: through the quantizer's own ``quantize``, on a graph holding
        only this node's weight."""
        import onnx
        import onnx_ir as ir

        mini = onnx.GraphProto(name="part")
        mini.initializer.append(ir.serde.serialize_tensor(weight.const_value))
        made = self.quantizer.quantize(ir.serde.serialize_node(node), [mini])
        if len(made) != 1 or list(made[0].output) != [v.name for v in node.outputs]:
            raise SystemExit(f"error: the streaming build cannot place the quantized form of {node.name}")
        values = {t.name: self._initializer(ir.serde.deserialize_tensor(t)) for t in mini.initializer if t.name != weight.name}
        (proto,) = made
        inputs = [(values.get(name) or _named(node, name)) if name else None for name in proto.input]
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in proto.attribute}
        new = ir.node(proto.op_type, inputs, attributes, domain=proto.domain, name=proto.name, num_outputs=len(proto.output))
        self._swap(node, new, list(proto.output), weight)


def _named(node: Any, name: str) -> Any:
    for value in node.inputs:
        if value is not None and value.name == name:
            return value
    raise SystemExit(f"error: the quantizer made a node reading {name}, which {node.name} does not have")


class StreamedParts:
    """``modules()`` for a transformers model on the meta device: the builder gets one
    part at a time (the embedding, each decoder layer, the final norm, the LM head) with
    its weights loaded, and they are freed (quantized first, for int4) when it asks for
    the next part."""

    def __init__(self, model: Any, tensors: GgufTensors, builder: Any, quantizer: LayerQuantizer | None) -> None:
        self.model = model
        self.tensors = tensors
        self.builder = builder
        self.quantizer = quantizer
        self.parts = 0

    def modules(self) -> Iterator[Any]:
        current: tuple[str, Any] | None = None
        for name, module in self.model.named_modules():
            inside = current is not None and name.startswith(current[0] + ".")
            if not inside and self._is_part(module):
                if current is not None:
                    self._finish(*current)
                self._load(name, module)
                current = (name, module)
            yield module
        if current is not None:
            self._finish(*current)

    def _is_part(self, module: Any) -> bool:
        return bool(self.builder.is_layer(module)) or any(True for _ in module.parameters(recurse=False))

    def _load(self, prefix: str, module: Any) -> None:
        import torch

        for name, param in list(module.named_parameters(prefix=prefix, remove_duplicate=False)):
            owner, leaf = self._owner(name)
            owner._parameters[leaf] = torch.nn.Parameter(self.tensors.load(name), requires_grad=False)
            del param

    def _finish(self, prefix: str, module: Any) -> None:
        import torch

        if self.quantizer is not None:
            self.quantizer.sweep()
        for name, param in list(module.named_parameters(prefix=prefix, remove_duplicate=False)):
            owner, leaf = self._owner(name)
            owner._parameters[leaf] = torch.nn.Parameter(torch.empty(param.shape, device="meta"), requires_grad=False)
        self.parts += 1
        _return_freed_memory()

    def _owner(self, name: str) -> tuple[Any, str]:
        path, _, leaf = name.rpartition(".")
        return (self.model.get_submodule(path) if path else self.model), leaf


def _return_freed_memory() -> None:
    """glibc keeps freed blocks of a part's weights in its heap, where the next part's
    smaller allocations pin them; hand them back so the peak is one part's, not the sum."""
    import ctypes
    import sys

    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):
            pass


def meta_model(config: Any) -> Any:
    """The transformers model of ``config`` with no memory behind its weights."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def install(gguf: Path, config: Any) -> None:
    """Make the builder (onnxruntime-genai's ``Model``) read ``gguf`` streamed: its
    ``load_weights`` gives the meta-device model with :class:`StreamedParts` as its
    ``modules()`` (the builder reads the rest of its structure as usual), and for int4
    its ``to_nbits`` finds the graph already quantized (a last sweep catches any MatMul made outside a part)."""
    import importlib

    import onnx_ir as ir

    # onnxruntime_genai.models puts its own folder on sys.path and builder.py imports
    # ``builders`` from there: that module, not onnxruntime_genai.models.builders, is the one run.
    importlib.import_module("onnxruntime_genai.models")
    model_class = importlib.import_module("builders.base").Model

    def load_weights(builder: Any, input_path: str) -> Any:
        model = meta_model(config)
        quantizer = None
        if builder.onnx_dtype in {ir.DataType.INT4, ir.DataType.UINT4, ir.DataType.INT8, ir.DataType.UINT8}:
            quantizer = LayerQuantizer(builder)
            builder._streaming_quantizer = quantizer
        parts = StreamedParts(model, GgufTensors(gguf, model), builder, quantizer)
        model.modules = parts.modules  # the only loop over the weights in Model.make_model
        return model

    def to_nbits(builder: Any) -> Any:
        quantizer = getattr(builder, "_streaming_quantizer", None)
        if quantizer is None:
            raise SystemExit("error: the streaming build was asked to quantize a graph it did not make")
        quantizer.sweep()
        quantizer.finish(builder.model)
        return builder.model

    model_class.load_weights = load_weights
    model_class.to_nbits = to_nbits
