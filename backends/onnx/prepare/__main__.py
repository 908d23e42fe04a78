"""``python -m backends.onnx.prepare [cpu|cuda|dml]`` builds the default model (as
before); ``python -m backends.onnx.prepare SOURCE [options]`` is ``dragoman models
prepare``."""

from __future__ import annotations

import sys

from backends.onnx.prepare.cli import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
