"""Who is asking: signed user tokens, and the LangGraph server auth handler that checks them.

With ``APDMEM_AUTH_SECRET`` set in the server's environment, every request must carry
``Authorization: Bearer <token>``, a token made by `make_token` (``apdmem token USER``) with the same secret.
The token's user is the run's identity: the graph reads that user's memory whatever the run's context
claims, and a client sees only the threads it created. Without the secret (``langgraph dev`` on a laptop),
requests are anonymous and the run's ``user_id`` is trusted.

>>> token = make_token("alice", "a-long-server-secret", days=1)
>>> verify_token(token, "a-long-server-secret")
'alice'
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import time

from langgraph_sdk import Auth

from apdmem.errors import ConfigError
from apdmem.memory.records import check_id

SECRET_ENV = "APDMEM_AUTH_SECRET"
_VERSION = "apdmem1"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _signature(payload: str, secret: str) -> str:
    return _b64(hmac.new(secret.encode(), payload.encode(), hashlib.sha256).digest())


def make_token(user_id: str, secret: str, *, days: float = 30) -> str:
    """A token naming `user_id`, valid for `days`, signed with `secret` (HMAC-SHA256)."""
    if len(secret) < 16:
        raise ConfigError(f"{SECRET_ENV} must be at least 16 characters")
    payload = f"{_VERSION}.{_b64(check_id(user_id, 'user').encode())}.{int(time.time() + days * 86400)}"
    return f"{payload}.{_signature(payload, secret)}"


def verify_token(token: str, secret: str) -> str | None:
    """The user a token names, or None if it is not a valid, unexpired token signed with `secret`."""
    parts = token.split(".")
    if len(parts) != 4 or parts[0] != _VERSION or not parts[2].isdigit():
        return None
    payload = ".".join(parts[:3])
    if not hmac.compare_digest(parts[3], _signature(payload, secret)) or int(parts[2]) < time.time():
        return None
    try:
        return check_id(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)).decode(), "user")
    except ValueError:
        return None


auth = Auth()


@auth.authenticate
async def authenticate(authorization: str | None) -> Auth.types.MinimalUserDict:
    """Bearer tokens when the server has a secret; anonymous requests otherwise."""
    secret = os.environ.get(SECRET_ENV)
    if not secret:
        return {"identity": "anonymous", "is_authenticated": False}
    scheme, _, token = (authorization or "").partition(" ")
    user = verify_token(token.strip(), secret) if scheme.lower() == "bearer" else None
    if user is None:
        raise Auth.exceptions.HTTPException(status_code=401, detail="missing, invalid or expired apdmem token")
    return {"identity": user}


@auth.on.threads
async def own_threads(ctx: Auth.types.AuthContext, value: dict):
    """A thread (with its runs and their state: answers, evidence) is seen only by the user who created it;
    what a user creates (threads, runs and the temporary threads of stateless runs) is marked as theirs."""
    if not ctx.user.is_authenticated:
        return None
    owner = {"owner": ctx.user.identity}
    if isinstance(value, dict) and "metadata" in value:
        if value["metadata"] is None:
            value["metadata"] = {}
        value["metadata"].update(owner)  # in place: the server goes on with this very dict
    return owner
