"""Text-generation pieces shared by the local backends: chat templates, stop strings,
and parsing model output into content, thinking and tool calls. Pure; no I/O."""
