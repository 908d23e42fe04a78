"""The HTTP layer: Litestar app, routes of the four dialects (OpenAI Chat Completions, OpenAI
Responses, Ollama, Anthropic Messages), streaming, CLI."""
