"""``python -m dragoman.backends.onnx.prepare [cpu|cuda|dml]`` builds the default model (as
before); ``python -m dragoman.backends.onnx.prepare SOURCE [options]`` is ``dragoman models
prepare``."""

from __future__ import annotations

import sys

from dragoman.backends.onnx.prepare.cli import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
