"""Checks an ONNX model as the onnx package does, for tests/onnx_test.cc.

    /usr/bin/python3 check_model.py MODEL.onnx

Runs onnx.checker.check_model(full_check=True) (Debian's python3-onnx: the checker, then shape
inference in strict mode) and prints one JSON object: ir_version, opsets, the graph's inputs
and outputs with their dims (a symbolic dim as its name), the initializers' names and dims,
the nodes' operators, and metadata_props. Exit 1 with the checker's message when it fails.
"""
import json
import sys

import onnx


def dims(value):
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def main():
    model = onnx.load(sys.argv[1])
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:  # the checker's own exception types vary by version
        print(f"check_model.py: {sys.argv[1]}: {e}", file=sys.stderr)
        return 1
    g = model.graph
    print(json.dumps({
        "ir_version": model.ir_version,
        "opsets": {o.domain or "ai.onnx": o.version for o in model.opset_import},
        "inputs": {v.name: dims(v) for v in g.input},
        "outputs": {v.name: dims(v) for v in g.output},
        "initializers": {t.name: list(t.dims) for t in g.initializer},
        "ops": sorted({n.op_type for n in g.node}),
        "metadata": {p.key: p.value for p in model.metadata_props},
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
