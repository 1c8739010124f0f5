"""MCP tool results as JSON. LangGraph Server's MCP endpoint (`/mcp`) returns a graph's output as the Python repr
of the dict the run produced (``{'added': ['chat-7'], ...}``), which clients cannot parse as JSON. This app, mounted
by `langgraph.json` (``"http": {"app": "apdmem.graph.mcp_results:app"}``), rewrites each text result of a
``tools/call`` response into the JSON of the same value, and adds it as the result's ``structuredContent`` (MCP's
field for a tool's structured output). The repr is read back with `ast.literal_eval`, which evaluates literals only
(no name, call or attribute), so nothing in a result can run. Errors and other methods pass unchanged.
"""

from __future__ import annotations

import ast
import json

from starlette.applications import Starlette
from starlette.middleware import Middleware


def json_results(body: bytes) -> bytes:
    """A JSON-RPC response body (one response or a batch) with each tool result's Python repr turned into JSON;
    anything else unchanged.

    >>> tool_result = {"content": [{"type": "text", "text": repr({"added": ["s1"], "ok": True})}]}
    >>> json.loads(json_results(json.dumps({"jsonrpc": "2.0", "id": 1, "result": tool_result}).encode()))["result"]
    {'content': [{'type': 'text', 'text': '{"added": ["s1"], "ok": true}'}], 'structuredContent': {'added': ['s1'], 'ok': True}}
    """
    try:
        payload = json.loads(body)
    except ValueError:
        return body
    responses = payload if isinstance(payload, list) else [payload]
    changed = False
    for response in responses:
        result = response.get("result") if isinstance(response, dict) else None
        if not isinstance(result, dict) or result.get("isError") or not isinstance(result.get("content"), list):
            continue
        for item in result["content"]:
            value = _literal(item.get("text")) if isinstance(item, dict) and item.get("type") == "text" else None
            if isinstance(value, (dict, list)):
                item["text"], changed = json.dumps(value, ensure_ascii=False), True
                if isinstance(value, dict):
                    result["structuredContent"] = value
    return json.dumps(payload, ensure_ascii=False).encode() if changed else body


def _literal(text):
    """The Python literal `text` spells, or None."""
    if not isinstance(text, str):
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


class JsonToolResults:
    """ASGI middleware: the body of each POST to ``.../mcp`` goes through `json_results` (with its length fixed)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or not scope["path"].rstrip("/").endswith("/mcp"):
            await self.app(scope, receive, send)
            return
        start, chunks = None, []

        async def rewrite(message):
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
            elif message["type"] == "http.response.body" and start is not None:
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    body = json_results(b"".join(chunks))
                    headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
                    await send({**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
                    await send({"type": "http.response.body", "body": body})
            else:
                await send(message)

        await self.app(scope, receive, rewrite)


app = Starlette(middleware=[Middleware(JsonToolResults)])
