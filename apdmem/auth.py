"""Who is asking: signed user tokens, and the LangGraph server auth handler that checks them.

With ``APDMEM_AUTH_SECRET`` set in the server's environment, every request must carry
``Authorization: Bearer <token>``, a token made by `make_token` (``apdmem token USER``) with the same secret.
The token's user is the run's identity: the graph reads that user's memory whatever the run's context
claims, and a client sees only the threads and crons it created. Nothing else gets in: LangGraph Studio's
LangSmith login is switched off (``disable_studio_auth`` in langgraph.json), and what apdmem does not use (the
server's own store, writes to assistants) is refused. Without the secret (``langgraph dev`` on a
laptop), requests are anonymous and the run's ``user_id`` is trusted.

A token lives at most `MAX_DAYS` and carries the time it was issued. ``APDMEM_AUTH_NOT_BEFORE`` in the
server's environment revokes tokens issued before a time: a single time for every user
(``2026-12-03T15:40:00Z``, or Unix seconds), or a JSON object of times per user id, ``"*"`` for everyone
(``{"alice": "2026-12-03T15:40:00Z"}``). Changing the secret revokes every token. What a token started and
runs later (a cron's runs, a background run) is refused as soon as that token would be: the run's user keeps
the token's times and a name of the secret (`token_user`).

>>> token = make_token("alice", "a-long-server-secret", days=1)
>>> verify_token(token, "a-long-server-secret")
'alice'
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
from datetime import datetime, timezone

from langgraph_sdk import Auth
from langgraph_sdk.auth.types import StudioUser

from apdmem.errors import ConfigError
from apdmem.memory.records import check_id

SECRET_ENV = "APDMEM_AUTH_SECRET"
NOT_BEFORE_ENV = "APDMEM_AUTH_NOT_BEFORE"
MAX_DAYS = 365  # a token is a password: a leaked one stops working within a year even if nobody revokes it
_VERSION = "apdmem2"  # "apdmem1" tokens (no issue time, no lifetime cap) are refused
_CLOCK_SKEW = 300  # seconds a token's issue time may lie ahead of the server's clock


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _signature(payload: str, secret: str) -> str:
    return _b64(hmac.new(secret.encode(), payload.encode(), hashlib.sha256).digest())


def make_token(user_id: str, secret: str, *, days: float = 30, now: float | None = None) -> str:
    """A token naming `user_id`, issued `now` (default: the current time), valid for `days` (at most
    `MAX_DAYS`), signed with `secret` (HMAC-SHA256)."""
    if len(secret) < 16:
        raise ConfigError(f"{SECRET_ENV} must be at least 16 characters")
    if not 0 < days <= MAX_DAYS:
        raise ConfigError(f"a token is valid for 1 to {MAX_DAYS} days, not {days:g}: issue a new one when it expires")
    issued = int(time.time() if now is None else now)
    payload = f"{_VERSION}.{_b64(check_id(user_id, 'user').encode())}.{issued}.{issued + int(days * 86400)}"
    return f"{payload}.{_signature(payload, secret)}"


def verify_token(token: str, secret: str, not_before: dict[str, float] | None = None) -> str | None:
    """The user a token names, or None unless it is signed with `secret`, of this version, issued at most
    `MAX_DAYS` before it expires, unexpired, and issued no earlier than the user's (or everyone's, ``"*"``)
    time in `not_before`."""
    claims = _signed_claims(token, secret)
    return claims[0] if claims is not None and _admitted(*claims, not_before) else None


def _signed_claims(token: str, secret: str) -> tuple[str, int, int] | None:
    """(user, issued, expires) of a token of this version signed with `secret`; None for anything else."""
    parts = token.split(".")
    if len(parts) != 5 or parts[0] != _VERSION or not (parts[2].isdigit() and parts[3].isdigit()):
        return None
    payload = ".".join(parts[:4])
    if not hmac.compare_digest(parts[4].encode(), _signature(payload, secret).encode()):
        return None
    try:
        user = check_id(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)).decode(), "user")
    except ValueError:
        return None
    return user, int(parts[2]), int(parts[3])


def _admitted(user: str, issued: int, expires: int, not_before: dict[str, float] | None) -> bool:
    """Whether a token of `user` issued and expiring at these times is accepted now: issued at most `MAX_DAYS`
    before it expires, not in the future, unexpired, and not revoked by `not_before`."""
    now = time.time()
    if not (issued <= now + _CLOCK_SKEW and now < expires and expires - issued <= MAX_DAYS * 86400):
        return False
    revoked_before = max((not_before or {}).get(user, 0), (not_before or {}).get("*", 0))
    return issued >= revoked_before


def secret_id(secret: str) -> str:
    """A name of the secret that does not reveal it: what a run keeps to tell whether the secret changed since."""
    return _signature("apdmem secret id", secret)[:16]


def not_before(raw: str | None) -> dict[str, float]:
    """``APDMEM_AUTH_NOT_BEFORE`` read as {user id or "*": Unix time}; a value that is not one raises
    ConfigError (the server then refuses every token rather than accept revoked ones).

    >>> not_before("1700000000"), not_before('{"alice": "2023-11-14T22:13:20Z"}')
    ({'*': 1700000000.0}, {'alice': 1700000000.0})
    """
    if not raw or not raw.strip():
        return {}
    entries = json.loads(raw) if raw.strip().startswith("{") else {"*": raw}
    return {str(user): _moment(value) for user, value in entries.items()}


def _moment(value) -> float:
    """Unix seconds from a number or an ISO 8601 time (UTC when it names no zone)."""
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"{NOT_BEFORE_ENV}: {text!r} is not a time (ISO 8601 or Unix seconds)") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()


def auth_on() -> bool:
    """Whether the server's environment turns auth on."""
    return bool(os.environ.get(SECRET_ENV))


auth = Auth()


def _revocations() -> dict[str, float]:
    """``APDMEM_AUTH_NOT_BEFORE`` as `not_before` reads it; raises ConfigError when it is malformed."""
    try:
        return not_before(os.environ.get(NOT_BEFORE_ENV))
    except (ConfigError, ValueError, AttributeError) as exc:  # fail closed: a broken revocation list admits nobody
        raise ConfigError(f"the server's {NOT_BEFORE_ENV} is malformed: {exc}") from None


@auth.authenticate
async def authenticate(authorization: str | None) -> Auth.types.MinimalUserDict:
    """Bearer tokens when the server has a secret; anonymous requests otherwise. The user carries the token's
    issue and expiry times and the secret's `secret_id`, so that a run started later in its name (a cron's, a
    background run) is checked against the same token then (`token_user`)."""
    if not auth_on():
        return {"identity": "anonymous", "is_authenticated": False}
    try:
        revoked = _revocations()
    except ConfigError as exc:
        raise Auth.exceptions.HTTPException(status_code=401, detail=str(exc))
    scheme, _, token = (authorization or "").partition(" ")
    secret = os.environ[SECRET_ENV]
    claims = _signed_claims(token.strip(), secret) if scheme.lower() == "bearer" else None
    if claims is None or not _admitted(*claims, revoked):
        raise Auth.exceptions.HTTPException(status_code=401, detail="missing, invalid, expired or revoked apdmem token")
    user, issued, expires = claims
    return {"identity": user, "issued": issued, "expires": expires, "secret_id": secret_id(secret)}


def token_user(user) -> str | None:
    """The user id of a request's or run's user when it is one `authenticate` made from an apdmem token that the
    server would still accept now, else None: the same check for a request and for a run started later in the
    token's name (a cron's, rebuilt from what `owned` stored with it; a background run), so that revoking a
    user's tokens (``APDMEM_AUTH_NOT_BEFORE``) or changing the secret stops what they scheduled too.

    With this module as the server's auth handler, the only other users are the anonymous one and LangGraph
    Studio's LangSmith login (switched off by ``disable_studio_auth`` in langgraph.json; refused here too,
    should a deployment switch it back on, also in the dict form a stored run keeps it in).
    """
    if user is None or isinstance(user, StudioUser) or not getattr(user, "is_authenticated", False):
        return None
    get = user.get if callable(getattr(user, "get", None)) else None
    if get is None or get("kind") == "StudioUser":
        return None
    issued, expires, secret = get("issued"), get("expires"), os.environ.get(SECRET_ENV)
    if type(issued) is not int or type(expires) is not int or not secret or get("secret_id") != secret_id(secret):
        return None  # no token behind it (a run stored by an older apdmem), or signed with a secret since changed
    try:
        return user.identity if _admitted(user.identity, issued, expires, _revocations()) else None
    except ConfigError:
        return None


def _token_user(ctx: Auth.types.AuthContext) -> bool:
    return token_user(ctx.user) is not None


@auth.on
async def deny_the_rest(ctx: Auth.types.AuthContext, value: dict):
    """With auth on, what apdmem does not use is refused: the server's own store (apdmem keeps memories in its
    own) and any resource a newer server adds."""
    return None if not auth_on() else False


@auth.on.assistants
async def shared_assistants(ctx: Auth.types.AuthContext, value: dict):
    """The graphs' assistants are the server's, read by every user; with auth on nobody creates, changes or
    deletes one (an assistant's stored context would reach other users' runs)."""
    if not auth_on() or (ctx.action in ("read", "search") and _token_user(ctx)):
        return None
    return False


@auth.on.threads
@auth.on.crons
async def owned(ctx: Auth.types.AuthContext, value: dict):
    """A thread (with its runs and their state: answers, evidence) or a cron is seen only by the user who
    created it; what a user creates (threads, runs, the temporary threads of stateless runs, crons) is marked as
    theirs. A cron's runs act as that user, and only while the token that created (or last changed) the cron
    would be accepted: its claims are stored with the cron's payload (`_run_as`)."""
    if not auth_on():
        return None
    if not _token_user(ctx):
        return False
    owner = {"owner": ctx.user.identity}
    if isinstance(value, dict) and "metadata" in value:
        if value["metadata"] is None:
            value["metadata"] = {}
        value["metadata"].update(owner)  # in place: the server goes on with this very dict
    if ctx.resource == "crons" and isinstance(value, dict) and isinstance(value.get("payload"), dict):
        _run_as(value["payload"], ctx.user)
    return owner


def _run_as(payload: dict, user) -> None:
    """Store the token's user (identity and claims) with a cron's payload, in place. langgraph_api's scheduler
    starts each run of the cron as the user it finds there (``langgraph_auth_user``, a key no client may set;
    without it, a bare identity that `token_user` refuses), so every run is checked against that token."""
    config = payload["config"] = payload.get("config") or {}
    configurable = config["configurable"] = config.get("configurable") or {}
    configurable["langgraph_auth_user"] = {"identity": user.identity, "issued": user.get("issued"),
                                           "expires": user.get("expires"), "secret_id": user.get("secret_id")}
