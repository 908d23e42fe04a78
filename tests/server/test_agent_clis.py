"""The real agent CLIs against dragoman on the default model, offline, bounded in time:
Claude Code 2.1.197 (``claude -p``, Anthropic Messages) and Codex 0.171.0 (``codex exec``,
a custom provider on the Responses wire API).

Their default prompts and tool lists (tens of KB) do not fit the model's 2048-token
context: they must get the dialect's context error with both numbers. Trimmed (their own
options for a system prompt and no tools) a turn must complete without a protocol error.
The CLIs are installed from the npm registry into the git-ignored ``.agent-clis/`` on
first use (see ``tests/support/agent_clis.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.agent_clis import AgentCLIs, install_agent_clis
from tests.support.server import RunningServer, config_from_yaml, serve

MODEL = "smollm2:135m"
RUN_TIMEOUT = 240  # seconds for one CLI turn on a loaded 2-core machine
FIXTURES = Path(__file__).resolve().parents[1] / "adapters"
# The model's own system prompt: with it SmolLM2-135M answers "Say hi" in one line.
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
CODEX_TRIMMED = [
    "--disable", "multi_agent", "--disable", "goals", "--disable", "shell_tool", "--disable", "unified_exec",
    "--disable", "view_image", "--disable", "skill_search", "--disable", "apps", "--disable", "plugins",
    "-c", "web_search=disabled", "-c", "include_permissions_instructions=false", "-c", "include_environment_context=false",
    "-c", "include_apps_instructions=false", "-c", "skills.include_instructions=false",
]  # fmt: skip


@pytest.fixture(scope="session")
def clis() -> AgentCLIs:
    return install_agent_clis()


@pytest.fixture(scope="module")
def server(model_dir: Path) -> Iterator[RunningServer]:
    """The default model at its default context. A 135M model can loop for its whole
    context; one sentence is a whole turn here (a stop sequence ends it cleanly, where
    the length limit is an error to both CLIs)."""
    config = config_from_yaml(
        f"""\
        models:
          - name: "{MODEL}"
            backend: onnx
            path: {model_dir}
            provider: cpu
            context_length: 2048
            defaults: {{stop: ["\\n", "."]}}
        """
    )
    with serve(config) as running:
        yield running


def offline_env(home: Path, **extra: str) -> dict[str, str]:
    """Only 127.0.0.1 is reachable: every other address goes to a dead proxy."""
    dead = "http://127.0.0.1:9"
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "TERM": "dumb", "NO_COLOR": "1",
           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}  # fmt: skip
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        env[name] = dead
    return env | extra


def run(command: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=RUN_TIMEOUT)


# -- Claude Code ---------------------------------------------------------------------------


def claude(clis: AgentCLIs, server: RunningServer, tmp_path: Path, *options: str) -> dict[str, Any]:
    env = offline_env(
        tmp_path, ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="unused", DISABLE_TELEMETRY="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_AUTOUPDATER="1",
    )  # fmt: skip
    done = run([str(clis.claude), "-p", "Say hi", "--model", MODEL, "--output-format", "json", *options], env, tmp_path)
    assert done.stdout.strip(), f"claude printed nothing; stderr: {done.stderr[-2000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_claude_code_completes_a_turn_with_a_trimmed_prompt(clis: AgentCLIs, server: RunningServer, tmp_path: Path) -> None:
    result = claude(clis, server, tmp_path, "--bare", "--system-prompt", SYSTEM, "--tools", "")
    assert result["is_error"] is False and result["subtype"] == "success", result
    assert result["result"].strip() and result["num_turns"] >= 1
    assert result["usage"]["input_tokens"] > 0 and result["usage"]["output_tokens"] > 0


def test_claude_code_default_prompt_gets_the_context_error(clis: AgentCLIs, server: RunningServer, tmp_path: Path) -> None:
    result = claude(clis, server, tmp_path)
    assert result["is_error"] is True and result["api_error_status"] == 400, result
    assert "limit 2048" in result["result"]  # Claude Code read both numbers from our message
    # What it was sent, word for word: a recorded Claude Code request.
    body = json.loads((FIXTURES / "anthropic_fixtures" / "claude_code_default.json").read_text())
    r = httpx.post(server.url + "/v1/messages?beta=true", json=body, headers={"anthropic-version": "2023-06-01"}, timeout=60)
    message = r.json()["error"]["message"]
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert message.startswith("prompt is too long: ") and message.endswith(" tokens > 2048 maximum")
    assert int(message.split()[4]) > 2048


# -- Codex ---------------------------------------------------------------------------------


def codex(clis: AgentCLIs, server: RunningServer, tmp_path: Path, *options: str) -> list[dict[str, Any]]:
    home = tmp_path / "codex-home"
    home.mkdir(exist_ok=True)
    provider = f'model_providers.dragoman={{name="dragoman", base_url="{server.url}/v1", wire_api="responses"}}'
    command = [str(clis.codex), "exec", "--json", "--skip-git-repo-check", "-c", "model_provider=dragoman",
               "-c", provider, "-m", MODEL, *options, "Say hi"]  # fmt: skip
    done = run(command, offline_env(tmp_path, CODEX_HOME=str(home)), tmp_path)
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert events, f"codex printed no events; stderr: {done.stderr[-2000:]}"
    return events


def test_codex_completes_a_turn_with_a_trimmed_prompt(clis: AgentCLIs, server: RunningServer, tmp_path: Path) -> None:
    instructions = tmp_path / "instructions.md"
    instructions.write_text(SYSTEM)
    events = codex(clis, server, tmp_path, *CODEX_TRIMMED, "-c", f"model_instructions_file={instructions}")
    kinds = [e["type"] for e in events]
    assert "turn.completed" in kinds and "turn.failed" not in kinds and "error" not in kinds, events
    messages = [e["item"]["text"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "agent_message"]
    assert messages and messages[-1].strip()
    usage = next(e["usage"] for e in events if e["type"] == "turn.completed")
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0


def test_codex_default_prompt_gets_the_context_error(clis: AgentCLIs, server: RunningServer, tmp_path: Path) -> None:
    events = codex(clis, server, tmp_path)
    failed = [e for e in events if e["type"] == "turn.failed"]
    assert failed and "context window" in failed[0]["error"]["message"], events  # Codex read the code
    body = json.loads((FIXTURES / "responses_fixtures" / "codex_default.json").read_text())
    r = httpx.post(server.url + "/v1/responses", json=body, timeout=60)
    error = r.json()["error"]
    assert r.status_code == 400 and error["code"] == "context_length_exceeded"
    assert "context length of 2048 tokens" in error["message"] and int(error["message"].split()[3]) > 2048
