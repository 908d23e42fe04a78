"""dragoman: a local chat-API gateway.

Clients speak OpenAI Chat Completions and Responses, Ollama or Anthropic Messages; each
model named in the YAML config is answered by a local model (ONNX Runtime GenAI,
ctransformers) or an upstream server of any of those dialects. Four subpackages, imported
one way (``proxy → backends → config → adapters``, tests/test_import_direction.py):

- :mod:`dragoman.adapters`: pure translation between each dialect and the canonical request
  and events;
- :mod:`dragoman.backends`: what answers a canonical request;
- :mod:`dragoman.config`: the YAML schema, loader and routing;
- :mod:`dragoman.proxy`: the Litestar app, routes and CLI (``dragoman`` on the command line,
  also ``python -m dragoman``).
"""
