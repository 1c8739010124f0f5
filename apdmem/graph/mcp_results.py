"""MCP tool results as JSON. LangGraph Server's MCP endpoint (`/mcp`) returns a graph's output as the Python repr
of the dict the run produced (``{'added': ['chat-7'], ...}``), which clients cannot parse as JSON. This app, mounted
by `langgraph.json` (``"http": {"app": "apdmem.graph.mcp_results:app"}``), rewrites each text result of a
``tools/call`` response into the JSON of the same value, and adds it as the result's ``structuredContent`` (MCP's
field for a tool's structured output). The repr is read back with `ast.literal_eval`, which evaluates literals only
(no name, call or attribute), so nothing in a result can run.

A failed call would read only the error's type (``InputError``): langgraph_api's MCP handler keeps
``__error__["error"]`` of the run and drops its message. So this app answers ``tools/call`` itself, the way that
handler does (the same tool names, the same in-process client, the caller's headers, hence the same auth), and
a failed run's result is its one-line error (``InputError: sessions, record 0: ...``). Other methods, and a call
whose tool name does not match exactly one graph, go to langgraph_api unchanged.
"""

from __future__ import annotations

import ast
import json
import logging

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


MAX_ASSISTANTS = 1000  # as langgraph_api's tools/list and tools/call look them up
_NOT_FORWARDED = {b"host", b"content-length", b"content-type", b"accept", b"accept-encoding", b"connection",
                  b"transfer-encoding"}  # the in-process client sets its own


def error_result(error: dict) -> dict:
    """The MCP result of a failed run: its error's type and one-line message, as the REST API gives them.

    >>> error_result({"error": "InputError", "message": "question: give the question as text"})["content"]
    [{'type': 'text', 'text': 'InputError: question: give the question as text'}]
    """
    kind, message = str(error.get("error") or "Error"), str(error.get("message") or "")
    return {"isError": True, "content": [{"type": "text", "text": f"{kind}: {message}" if message else kind}]}


async def call_tool(scope, headers: dict[str, str], params: dict) -> dict | None:
    """Run the graph a ``tools/call`` names, as langgraph_api's handler does, and its JSON-RPC result: the output
    (Python repr, which `json_results` turns into JSON) or `error_result`. None, before anything ran, when the
    name does not match exactly one graph or langgraph_api's internals are not where this expects them:
    langgraph_api answers then. A run is never started twice.

    The in-process client's requests skip the server's auth (langgraph_api trusts them): the caller's identity
    reaches them as it reaches langgraph_api's own handler, through the auth context of this request, which the
    server's auth middleware authenticated before this app's (``"middleware_order": "auth_first"`` in
    langgraph.json); a request it did not authenticate is left to langgraph_api."""
    if "user" not in scope:  # not behind the server's auth middleware: never run anything unauthenticated
        return None
    try:
        from langgraph_api.api.mcp._sanitizers import normalize_name
        from langgraph_api.utils import with_user
        from langgraph_sdk import get_client
    except ImportError:  # another langgraph_api: its own handler answers, errors by type only
        return None
    async with with_user(scope["user"], scope.get("auth")):
        try:
            client = get_client(url=None)  # in process, as langgraph_api's MCP handler calls the server
            assistants = await client.assistants.search(limit=MAX_ASSISTANTS, headers=headers)
        except Exception as error:
            logging.getLogger("apdmem").debug("MCP tools/call left to langgraph_api: %s", error)
            return None
        matching = [a for a in assistants if normalize_name(a["name"]) == params.get("name")]
        if len(matching) != 1:
            return None
        try:
            value = await client.runs.wait(None, matching[0]["assistant_id"], input=params.get("arguments") or {},
                                           context=params.get("context"), headers=headers, raise_error=False)
        except Exception as error:  # refused or failed before the run: said in one line, not raised into the server
            text = str(error).splitlines()[0] if str(error) else ""
            return error_result({"error": type(error).__name__, "message": text})
    if isinstance(value, dict) and isinstance(value.get("__error__"), dict):
        return error_result(value["__error__"])
    return {"content": [{"type": "text", "text": repr(value)}]}


async def _body(receive) -> bytes:
    chunks, more = [], True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(chunks)


async def _respond(send, body: bytes, status: int = 200, headers=()) -> None:
    headers = [(k, v) for k, v in headers if k.lower() != b"content-length"]
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class JsonToolResults:
    """ASGI middleware over ``.../mcp``: a ``tools/call`` is answered by `call_tool`, and the body of every
    response goes through `json_results` (with its length fixed)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or not scope["path"].rstrip("/").endswith("/mcp"):
            await self.app(scope, receive, send)
            return
        body = await _body(receive)
        try:
            request = json.loads(body)
        except ValueError:
            request = None
        if (isinstance(request, dict) and request.get("jsonrpc") == "2.0" and request.get("method") == "tools/call"
                and request.get("id") is not None and isinstance(request.get("params"), dict)):
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"] if k.lower() not in _NOT_FORWARDED}
            result = await call_tool(scope, headers, request["params"])
            if result is not None:
                response = {"jsonrpc": "2.0", "id": request["id"], "result": result}
                await _respond(send, json_results(json.dumps(response).encode()),
                               headers=[(b"content-type", b"application/json")])
                return
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        start, chunks = None, []

        async def rewrite(message):
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
            elif message["type"] == "http.response.body" and start is not None:
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    await _respond(send, json_results(b"".join(chunks)), start["status"], start.get("headers", []))
            else:
                await send(message)

        await self.app(scope, replay, rewrite)


app = Starlette(middleware=[Middleware(JsonToolResults)])
