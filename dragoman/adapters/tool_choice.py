"""``tool_choice`` as both dialects spell it, read into :class:`ToolChoice` once.

OpenAI sends ``"none"`` / ``"auto"`` / ``"required"`` or ``{"type": "function",
"function": {"name": …}}``; dragoman's ``/api/chat`` takes the same as an extension
(Ollama has no such field), which is how one dragoman forwards it to another.
"""

from __future__ import annotations

from dragoman.adapters.canonical import Tool, ToolChoice
from dragoman.adapters.errors import RequestError

TOOL_CHOICE_MODES = ("none", "auto", "required")


def parse_tool_choice(mode: str | None, name: str | None, tools: list[Tool]) -> ToolChoice:
    """``mode`` is the string form; ``name`` the named function's (then ``mode`` is None)."""
    if name is not None:
        if all(tool.name != name for tool in tools):
            param = "tool_choice.function.name"
            raise RequestError(f"{param}: no tool named '{name}' in tools", param=param)
        return ToolChoice(mode="function", name=name)
    if mode is None:
        return ToolChoice()
    if mode not in TOOL_CHOICE_MODES:
        allowed = ", ".join(TOOL_CHOICE_MODES)
        message = f"tool_choice: unsupported value '{mode}'; allowed: {allowed}, or a named function"
        raise RequestError(message, param="tool_choice")
    if mode == "required" and not tools:
        raise RequestError("tool_choice: 'required' needs at least one tool in tools", param="tool_choice")
    return ToolChoice(mode=mode)  # type: ignore[arg-type]


def wire_tool_choice(choice: ToolChoice) -> str | dict[str, object] | None:
    """The OpenAI spelling of ``choice``; None for the default (``auto``)."""
    if choice.mode == "function":
        return {"type": "function", "function": {"name": choice.name}}
    return None if choice.mode == "auto" else choice.mode
