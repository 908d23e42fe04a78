"""Pure translation between the four chat dialects (OpenAI Chat Completions, OpenAI
Responses, Ollama, Anthropic Messages) and the canonical model, one package each. No I/O."""
