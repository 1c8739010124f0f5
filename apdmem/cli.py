"""The `apdmem` command line: ingest, search, show, forget, sessions, reindex, ask, demo, bench, eval."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from dataclasses import fields

from apdmem.errors import ApdmemError, ConfigError
from apdmem.memory.records import readable
from apdmem.memory.retriever import DATE_RANGE_TEXT, SEARCH_K, parse_date_range


def _resolve(args) -> None:
    """Fill the options left unset as `Settings` and `Context` resolve them (``APDMEM_*``, then the defaults): the
    values `Memory`, the graph and a server would use. The store stays unset here: `Memory` resolves it, and the
    benchmarks keep their own default store."""
    from apdmem.graph import Context
    from apdmem.settings import Settings

    for schema in (Settings, Context):
        names = [f.name for f in fields(schema) if f.name not in ("store", "user_id") and hasattr(args, f.name)]
        resolved = schema(**{name: getattr(args, name) for name in names if getattr(args, name) is not None})
        for name in names:
            setattr(args, name, getattr(resolved, name))


def _memory(args):
    from apdmem.memory import Memory

    return Memory(args.user, store=args.store, chat_model=args.chat_model, embeddings=args.embeddings, base_url=args.base_url,
                  l0_mode=getattr(args, "l0_mode", None))


def _settings(args):
    from apdmem.settings import Settings

    return Settings(store=args.store, chat_model=args.chat_model, controller_model=args.controller_model,
                    generator_model=args.generator_model, embeddings=args.embeddings, base_url=args.base_url)


def cmd_ingest(args) -> None:
    from apdmem.memory import load_sessions

    sessions = load_sessions(args.file)
    memory = _memory(args)
    report = memory.ingest(sessions, progress=not args.quiet)
    print(
        f"{len(report.added)} added, {len(report.updated)} updated, {len(report.unchanged)} unchanged; "
        f"{report.turns} turns, {report.units} L0 units in {report.seconds:.1f}s; "
        f"model tokens: {report.usage.input_tokens} in, {report.usage.output_tokens} out"
    )
    if args.eager_l1:
        started = time.perf_counter()
        spent = memory.build_facts([s.session_id for s in sessions], progress=not args.quiet)
        print(f"L1 key facts built now: {spent.calls} model call(s) in {time.perf_counter() - started:.1f}s (sessions whose "
              f"L1 was built before are skipped); model tokens: {spent.input_tokens} in, {spent.output_tokens} out")


def cmd_search(args) -> None:
    memory = _memory(args)
    dates = parse_date_range(args.date_range) if args.date_range is not None else None
    docs = memory.search(args.query, k=args.k, filter=args.filter, min_score=args.min_score, date_range=dates)
    if not docs and args.min_score is not None:
        best = memory.search(args.query, k=1, filter=args.filter)
        if best:  # say why nothing is shown: the cut-off, not an empty memory
            print(f"apdmem: no session scores at least {args.min_score} (the best scores {best[0].metadata['score']:.4f})",
                  file=sys.stderr)
    elif not docs and args.filter is not None and memory.session_ids():
        print("apdmem: no session matches the filter", file=sys.stderr)
    for rank, doc in enumerate(docs, 1):
        meta = doc.metadata
        if args.json:  # what Memory.search returns: the metadata, and the unit's text
            print_json({**meta, "text": doc.page_content})
            continue
        text = doc.page_content if len(doc.page_content) <= 300 else doc.page_content[:300] + " ..."
        print(f"{rank}. {meta['session_id']}  {meta['date'][:16]}  turns {meta['span'][0] + 1}-{meta['span'][1]}  score {meta['score']:.4f}")
        print("   " + text.replace("\n", "\n   "))


def cmd_show(args) -> None:
    session = args.session or args.link_session
    if args.links:
        show_links(_memory(args), session)
    elif session is None:
        raise ConfigError("show needs a session id (or --links for the cross-session links)")
    else:
        print(_memory(args).read(session, args.layer))


def show_links(memory, session_id: str | None) -> None:
    """Print the cross-session links (of one session, or all): the two sessions with their dates, the strength
    and its reason."""
    links = memory.links(session_id)
    dates = {sid: meta["date"][:10] for sid, meta in memory.manifest["sessions"].items()}
    for link in links:
        print(f"{link.session_id} ({dates.get(link.session_id, '?')}) -- {link.other} ({dates.get(link.other, '?')})  "
              f"strength {link.strength:.3f}: units' best cosine {link.similarity:.3f}, term overlap {link.overlap:.3f}; "
              f"shared: {', '.join(memory.spelled(link.terms, [link.session_id, link.other])) or '(no rare term)'}")
    if not links:
        print(f"no links{' of session ' + session_id if session_id else ''} (sessions are linked when they share rare "
              "terms and close units)")


def cmd_forget(args) -> None:
    """Forget the sessions named and, with --before, every session dated before that date: all or none."""
    from apdmem.memory.loaders import parse_date

    if not args.sessions and args.before is None:
        raise ConfigError("forget needs session ids, or --before DATE for the sessions dated before it")
    memory, wanted = _memory(args), list(args.sessions)
    if args.before is not None:
        try:
            before = parse_date(args.before)
        except ValueError as exc:
            raise ConfigError(f"--before: {exc}") from None
        wanted += [sid for sid in memory.session_ids() if parse_date(memory.manifest["sessions"][sid]["date"]) < before]
    if not wanted:
        print(f"no session is dated before {args.before}: nothing forgotten")
        return
    wanted = list(dict.fromkeys(wanted))
    memory.forget(*wanted)
    print(f"forgot session {wanted[0]}" if len(wanted) == 1 else f"forgot {len(wanted)} sessions: {', '.join(wanted)}")


def cmd_sessions(args) -> None:
    memory = _memory(args)
    for sid in memory.session_ids():
        meta = memory.manifest["sessions"][sid]
        if args.json:
            print_json({"session_id": sid, "date": meta["date"], "turns": meta["turns"], "units": meta["units"]})
        else:
            print(f"{sid}\t{meta['date'][:16]}\t{meta['turns']} turns\t{meta['units']} units")


def cmd_reindex(args) -> None:
    from apdmem.memory import Memory
    from apdmem.memory.migrate import stored_users
    from apdmem.settings import Settings

    for user in stored_users(Settings(store=args.store).store) if args.all_users else [args.user]:
        report = Memory.reindex(user, store=args.store, embeddings=args.embeddings, base_url=args.base_url,
                                progress=not args.quiet)
        for repair in report.repaired:
            print(repair, flush=True)  # "repaired the memory of user ...: what was rebuilt"
        if report.reindexed:
            kept = f"; {report.resumed} sessions' vectors kept from an interrupted reindex" if report.resumed else ""
            print(f"user {user!r}: {report.sessions} sessions, {report.units} L0 units re-embedded with {report.space!r} "
                  f"(was {report.recorded!r}) in {report.seconds:.1f}s{kept}", flush=True)
        elif report.recorded is None:
            print(f"user {user!r}: no memory in this store; nothing to do", flush=True)
        else:
            now = "now" if report.repaired else "already"
            print(f"user {user!r}: {now} embedded with {report.space!r}; nothing to do", flush=True)
        if args.rebuild_layers and report.recorded is not None:
            rebuilt = Memory(user, store=args.store, chat_model=args.chat_model, embeddings=args.embeddings,
                             base_url=args.base_url).rebuild_layers(progress=not args.quiet)
            if rebuilt.l1 or rebuilt.l2:
                print(f"user {user!r}: L1 of {len(rebuilt.l1)} and L2 of {len(rebuilt.l2)} session(s) written by another "
                      f"writer made again by {rebuilt.writer!r} in {rebuilt.seconds:.1f}s; model tokens: "
                      f"{rebuilt.usage.input_tokens} in, {rebuilt.usage.output_tokens} out", flush=True)
            else:
                print(f"user {user!r}: every cached L1/L2 was written by {rebuilt.writer!r}; nothing to make again", flush=True)


def cmd_migrate(args) -> None:
    from apdmem.memory.migrate import migrate

    copied = migrate(args.source, args.target, users=args.users, verify=not args.no_verify, progress=not args.quiet,
                     replace=args.replace)
    for m in copied:
        check = "" if args.no_verify else ("; verified: same sessions, same search results" if m.verified else
                                           f"; CHECK FAILED (same sessions: {m.same_sessions}, same results: {m.same_results})")
        print(f"{m.user_id}: {m.keys} keys, {m.sessions} sessions{' (replaced in the target)' if m.replaced else ''}{check}")
    if not args.no_verify and not all(m.verified for m in copied):
        raise ConfigError("the copy differs from the source; the source is unchanged")
    print(f"{len(copied)} user(s) copied")


def cmd_token(args) -> None:
    from apdmem.auth import SECRET_ENV, make_token

    secret = os.environ.get(SECRET_ENV)
    if not secret:
        raise ConfigError(f"set {SECRET_ENV} to the LangGraph server's secret to sign tokens")
    print(make_token(args.user_id, secret, days=args.days))


def _context(args, memory):
    from apdmem.graph import Context

    return Context(user_id=memory.user_id, tmax=args.tmax, top_k=args.top_k, drill_width=args.drill_width,
                   reflection=not args.no_reflection, follow_links=args.follow_links)


QUERY_SHOWN = 100  # characters of a query or a sentence the progress lines show (a question may be pages long)


def shortened(text: str) -> str:
    """`text` cut to QUERY_SHOWN characters for a progress line."""
    return text if len(text) <= QUERY_SHOWN else text[: QUERY_SHOWN - 3] + "..."


def lifted_by(via: dict | None) -> str:
    """What lifted a session into the question's ranking (`policy.lift`), as the trace shows it; "" for nothing.

    >>> lifted_by({"date_range": ["2024-05-05", "2024-05-05"]})
    ' (dated near 2024-05-05, a date the question names)'
    """
    if not via:
        return ""
    if "date_range" in via:
        start, end = via["date_range"]
        return f" (dated near {start if start == end else f'{start} to {end}'}, a date the question names)"
    return f" (linked from {via['from']}, strength {via['strength']:.3f}, shared: {', '.join(via['terms'])})"


def print_json(value) -> None:
    """One JSON line (`--json`: for scripts)."""
    print(json.dumps(value, ensure_ascii=False, default=str), flush=True)


def ask(question: str, question_date: str | None, graph, context, *, json_lines: bool = False) -> dict:
    """Run the controller graph, printing each disclosure as it happens (with `json_lines`, each event as it
    is streamed, one JSON line each); returns the final state."""
    final: dict = {}
    inputs = {"question": question, **({"question_date": question_date} if question_date else {})}
    for mode, chunk in graph.stream(inputs, context=context, stream_mode=["custom", "values"]):
        if mode == "values":
            final = chunk
        elif json_lines:
            print_json(chunk)
        elif chunk["event"] == "dates":
            if chunk["dates"]:
                print(f"  [dates] the question's dates, from {chunk['today']}: {'; '.join(chunk['dates'])}", flush=True)
            if chunk["ignored"]:
                print(f"  [dates] ignored: {'; '.join(chunk['ignored'])}", flush=True)
        elif chunk["event"] == "search":
            queries = [shortened(q) for q in chunk["queries"]]
            print(f"  [step {chunk['step']}] search {queries} -> {len(chunk['sessions'])} sessions", flush=True)
        elif chunk["event"] == "drill":
            turns = "" if chunk["turns"] is None else f" turns {chunk['turns'][0] + 1}-{chunk['turns'][-1] + 1}"
            why = lifted_by(chunk.get("via"))
            print(f"  [step {chunk['step']}] read {chunk['layer']} of {chunk['session_id']}{turns}{why}", flush=True)
        elif chunk["event"] == "holding":
            print(f"  [answer] the question's words no disclosed sentence says: {', '.join(chunk['unsaid'])}; "
                  f"best sentence {'none' if chunk['best'] is None else format(chunk['best'], '+.2f')}: "
                  f"{'held' if chunk['held'] else 'the memory does not hold the answer'}", flush=True)
        elif chunk["event"] == "quotes":
            print(f"  [answer] the best sentences disclosed, scored against the question (quoted from {chunk['threshold']:+.1f}):")
            for q in chunk["quotes"]:
                print(f"    {q['score']:+6.2f} {'quoted  ' if q['quoted'] else 'left out'} {q['date'][:10]} {q['session_id']}: "
                      f"{shortened(q['sentence'])}")
    return final


def cmd_ask(args) -> None:
    from apdmem.graph import build_graph
    from apdmem.graph.state import OutputState
    from apdmem.memory.loaders import parse_date

    if not args.question.strip():
        raise ConfigError("the question is empty")
    if args.date is not None:
        try:
            parse_date(args.date)
        except ValueError as exc:
            raise ConfigError(f"--date: {exc}") from None
    memory = _memory(args)
    final = ask(args.question, args.date, build_graph(settings=_settings(args), memory=memory), _context(args, memory),
                json_lines=args.json)
    if args.json:  # the last line: what a LangGraph server's run returns
        print_json({"event": "answer", **{k: final[k] for k in OutputState.__annotations__ if k in final}})
    else:
        print(f"\n{final.get('answer', '')}\n(mode: {final.get('answer_mode', '')})")


def cmd_demo(args) -> None:
    """Ingest one user's whole LongMemEval history (shipped with the package) and answer its question, showing
    what was searched, what was opened and how deep, and the evidence turn disclosed."""
    import tempfile
    from importlib.resources import files

    from apdmem.graph import build_graph
    from apdmem.memory import load_longmemeval
    from apdmem.models import is_embedded

    started = time.perf_counter()
    item = load_longmemeval(str(files("apdmem") / "data" / "longmemeval_s_af8d2e46.json.gz"))[0]
    with tempfile.TemporaryDirectory(prefix="apdmem-demo-") as directory:
        args.store = args.store or directory
        args.user = "demo"
        memory = _memory(args)
        print(f"LongMemEval-S item {item.question_id} (MIT licence): {len(item.sessions)} sessions, "
              f"{sum(len(s.turns) for s in item.sessions)} turns of one user's history", flush=True)
        report = memory.ingest(item.sessions, progress=True)
        print(f"  ingested in {report.seconds:.1f}s: {report.units} L0 units (L0 mode {memory.l0_mode}, chat model {args.chat_model})")
        # The embedded models cannot judge evidence: with them the deterministic disclosure policy decides.
        args.no_reflection = args.no_reflection or is_embedded(args.controller_model or args.chat_model)
        print(f"\nQuestion ({item.question_date:%Y-%m-%d}): {item.question}", flush=True)
        print("  (reflection off: the disclosure policy decides what to open and how deep)" if args.no_reflection else
              "  (the controller model reflects between rounds)", flush=True)
        graph = build_graph(settings=_settings(args), memory=memory)
        final = ask(item.question, item.question_date.isoformat(), graph, _context(args, memory))
    show_disclosure(final, item)
    print(f"\nAnswer (mode: {final.get('answer_mode', '')}):\n{final.get('answer', '')}")
    print(f"Reference answer: {item.answer}")
    usage = final.get("usage", {}).values()
    print(f"Wall time: {time.perf_counter() - started:.1f}s; model calls: {sum(u.get('calls', 0) for u in usage)}, "
          f"{sum(u.get('critical_calls', 0) for u in usage)} on the critical path")
    if final.get("answer_mode") == "extractive":
        print("(No generative model: the answer quotes the disclosed evidence. Use --chat-model <provider>:<model> "
              "for written answers.)")


DEMO_SHOWN = 8  # sessions of the ranking the demo prints


def show_disclosure(final: dict, item) -> None:
    """What the controller searched and opened, and the benchmark's evidence turns it disclosed (a layer's item
    that is the turn, or quotes it word for word)."""
    candidates = final.get("candidates", {})
    ranked = sorted(candidates, key=lambda sid: -candidates[sid]["score"])
    opened = final.get("opened", {})
    print(f"\nSessions searched: {len(item.sessions)}; the search's best {min(len(ranked), DEMO_SHOWN)} of {len(ranked)} "
          "found, with their rescored scores: " + ", ".join(f"{sid} ({candidates[sid]['score']:+.2f})" for sid in ranked[:DEMO_SHOWN]))
    print(f"Sessions opened ({len(opened)} of {len(item.sessions)}, {len(opened) / len(item.sessions):.0%}): "
          + (", ".join(f"{sid} at {layer}" for sid, layer in opened.items()) or "none")
          + f"; steps: {final.get('step', 0)}; stop: {final.get('stop_reason', '')}")
    for sid in item.answer_session_ids:
        print(f"Evidence session of the benchmark: {sid}, " + (f"opened at {opened[sid]}" if sid in opened else "not opened"))
    shown: dict[tuple, list[str]] = {}
    for e in final.get("evidence", []):
        if (turn := evidence_turn(e, item)) is not None:
            shown.setdefault((e["session_id"], e["date"][:10], turn, e["layer"]), []).append(e["text"])
    for (sid, date, turn, layer), texts in shown.items():
        print(f"\nEvidence turn disclosed (session {sid}, {date}, turn {turn + 1}, read at {layer}):" + "".join(f"\n  {t}" for t in texts))
    if not shown:
        print("The benchmark's evidence turn was not disclosed.")


def evidence_turn(evidence: dict, item) -> int | None:
    """The benchmark's evidence turn (0-based) that a disclosed item is, or quotes word for word; else None."""
    from apdmem.memory.layers import one_line

    session = next(s for s in item.sessions if s.session_id == evidence["session_id"])
    turns = [i for i, t in enumerate(session.turns) if t.has_answer]
    if evidence["layer"] == "L3":
        return evidence["turn"] if evidence["turn"] in turns else None
    text = one_line(evidence["text"])
    return next((i for i in turns if text and text in one_line(session.turns[i].content)), None)


def cmd_bench_retrieval(args) -> None:
    from pathlib import Path

    from apdmem.eval.retrieval import format_report, run

    result = run(args.dataset, l0_mode=args.l0_mode, chat_model=args.chat_model, embeddings=args.embeddings, base_url=args.base_url,
                 limit=args.limit, output=args.output, dates=args.dates)
    table = format_report(result)
    print(table)
    Path(args.output).with_suffix(".md").write_text(table + "\n")
    print(f"report: {args.output} (JSON, every question's ranking); table: {Path(args.output).with_suffix('.md')}")


def positive(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def json_object(text: str) -> dict:
    """An argparse type: a JSON object (a search filter)."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"not a JSON object: {text!r}, e.g. '{{\"channel\": \"email\"}}'")
    return value


def location(text: str) -> str:
    """An argparse type: a store location given explicitly, never empty (an empty one is not "the default")."""
    if not text.strip():
        raise argparse.ArgumentTypeError("the store location is empty: give a directory or a postgresql:// URL")
    return text


class Parser(argparse.ArgumentParser):
    """Usage errors in one line (exit code 2), like every other error of the command line."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="apdmem", description=__doc__)
    # Options left unset are resolved by `Settings` / `Context` (see `_resolve`): the defaults named below.
    where = Parser(add_help=False)
    where.add_argument("--store", "--memory-dir", dest="store", default=None, type=location,
                       help="where memories live: a directory or a postgresql:// URL (default $APDMEM_STORE, else "
                            "$APDMEM_MEMORY_DIR, else ~/.apdmem)")
    models = Parser(add_help=False)
    models.add_argument("--chat-model", default=None,
                        help="model that builds the layers (and, unless told otherwise, controls and answers): 'local' (no "
                             "generative model: extractive layers and answers), 'local:smollm2' (the embedded SmolLM2, extra "
                             "local-chat) or any LangChain '<provider>:<model>', e.g. openai:gpt-4.1-mini, "
                             "anthropic:claude-sonnet-4-5, ollama:llama3.1 (default $APDMEM_CHAT_MODEL, else local)")
    models.add_argument("--embeddings", default=None,
                        help="'local' (= 'local:bge-small', the embedded bge-small-en-v1.5) or any LangChain "
                             "'<provider>:<model>', e.g. "
                             "openai:text-embedding-3-small, ollama:nomic-embed-text (default $APDMEM_EMBEDDINGS, else local)")
    models.add_argument("--base-url", default=None,
                        help="the server the provider calls: an OpenAI-compatible one for openai:<model> (llama.cpp, vLLM ...), "
                             "an Ollama host for ollama:<model> (default $APDMEM_BASE_URL, else $OPENAI_BASE_URL)")
    common = Parser(add_help=False, parents=[where, models])
    user = Parser(add_help=False)
    user.add_argument("--user", default=os.environ.get("APDMEM_USER_ID", "default"),
                      help="user id (namespace); without --user: $APDMEM_USER_ID, else the user called 'default'")
    l0 = Parser(add_help=False)
    l0.add_argument("--l0-mode", choices=["auto", "llm", "raw"], default=None,
                    help="L0 units by the chat model (llm), the window text (raw), or auto: raw with the embedded model, llm "
                         "otherwise (default $APDMEM_L0_MODE, else auto)")
    as_json = Parser(add_help=False)
    as_json.add_argument("--json", action="store_true",
                         help="print JSON lines for scripts instead of text: one per session or hit (ask: one per event "
                              "of the disclosure, then the answer with its evidence)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("ingest", parents=[common, user, l0], help="add a conversation file to a user's memory")
    p.add_argument("file")
    p.add_argument("--eager-l1", action="store_true",
                   help="build L1 key facts of the ingested sessions now, not on first read (costs model calls for every session)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_ingest)
    p = sub.add_parser("search", parents=[common, user, as_json], help="top sessions for a query")
    p.add_argument("query")
    p.add_argument("-k", type=positive, default=SEARCH_K, help=f"how many sessions (default {SEARCH_K})")
    p.add_argument("--min-score", type=float, default=None,
                   help="leave out sessions scoring below this (the score printed; default: none, the k best are shown)")
    p.add_argument("--date-range", default=None, metavar="START..END",
                   help=f"rank the sessions dated in this range first, none dropped ({DATE_RANGE_TEXT})")
    p.add_argument("--filter", type=json_object, default=None,
                   help='only sessions whose metadata and date match, a JSON object: \'{"channel": "email"}\', '
                        '\'{"date": {"$gte": "2024-05-01", "$lt": "2024-06-01"}}\' (see docs/retrieval.md)')
    p.set_defaults(func=cmd_search)
    p = sub.add_parser("show", parents=[common, user], help="a layer of a session, as Markdown; or the cross-session links")
    p.add_argument("session", nargs="?")
    p.add_argument("--layer", choices=["L0", "L1", "L2", "L3"], default="L0")
    p.add_argument("--links", action="store_true",
                   help="the cross-session links instead (all, or those of the session given): the two sessions with "
                        "their dates, the strength and why (units' best cosine, term overlap, the shared rare terms)")
    p.add_argument("--session", dest="link_session", default=None, help="with --links: only this session's links")
    p.set_defaults(func=cmd_show)
    p = sub.add_parser("forget", parents=[common, user],
                       help="remove sessions from every layer and index (all of them, or none if one is unknown)")
    p.add_argument("sessions", nargs="*", metavar="SESSION", help="ids of the sessions to forget")
    p.add_argument("--before", metavar="DATE", default=None,
                   help="also forget every session dated before DATE (e.g. 2024-01-01 or 2024-01-01T12:00)")
    p.set_defaults(func=cmd_forget)
    p = sub.add_parser("sessions", parents=[common, user, as_json], help="list a user's sessions")
    p.set_defaults(func=cmd_sessions)

    graph = Parser(add_help=False)
    graph.add_argument("--controller-model", default=None,
                       help="model that decomposes and reflects (default $APDMEM_CONTROLLER_MODEL, else --chat-model)")
    graph.add_argument("--generator-model", default=None,
                       help="model that writes the notes and the answer (default $APDMEM_GENERATOR_MODEL, else --chat-model)")
    graph.add_argument("--tmax", type=positive, default=None, help="step budget (default $APDMEM_TMAX, else 20)")
    graph.add_argument("--top-k", type=positive, default=None,
                       help="sessions each controller search returns (the first 10 rescored), the pool the disclosure policy reads "
                            "(default $APDMEM_TOP_K, else 20; the policy's threshold was set with 20)")
    graph.add_argument("--drill-width", type=positive, default=None,
                       help="reads per drilling round, run concurrently (default $APDMEM_DRILL_WIDTH, else 3)")
    links = Parser(add_help=False)
    links.add_argument("--follow-links", action=argparse.BooleanOptionalAction, default=None,
                       help="for questions that gather several sessions (how many, in total, the latest ...), also open "
                            "the sessions most strongly linked to the best ones found (default $APDMEM_FOLLOW_LINKS, else on)")
    asking = Parser(add_help=False, parents=[links])
    asking.add_argument("--no-reflection", action="store_true",
                        help="no model reflection between rounds: the deterministic disclosure policy decides")
    p = sub.add_parser("ask", parents=[common, user, graph, asking, as_json], help="answer a question from a user's memory")
    p.add_argument("question")
    p.add_argument("--date", default=None, help="the question's date (default: now)")
    p.set_defaults(func=cmd_ask)
    p = sub.add_parser("reindex", parents=[common, user],
                       help="re-embed a user's memory with the configured --embeddings (after changing them); with "
                            "--layers, also make again the cached L1/L2 another chat model wrote")
    p.add_argument("--all-users", action="store_true", help="every user with a memory in the store, instead of --user")
    p.add_argument("--layers", dest="rebuild_layers", action="store_true",  # not `layers`: a Context field
                   help="also make again, with the configured --chat-model, every cached L1/L2 layer written by another "
                        "(another model, another prompt, or none: 'local' writes no model's text)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_reindex)
    p = sub.add_parser("migrate", help="copy memories from one store to another (e.g. into PostgreSQL) and check the copy")
    p.add_argument("--from", dest="source", required=True, help="source store: a directory or postgresql:// URL")
    p.add_argument("--to", dest="target", required=True, help="target store: a postgresql:// URL or a directory")
    p.add_argument("--user", dest="users", action="append", default=None, help="only this user (repeatable)")
    p.add_argument("--replace", action="store_true",
                   help="replace the memory of a user the target already holds (refused otherwise)")
    p.add_argument("--no-verify", action="store_true", help="skip the check (same sessions, same search results)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_migrate)
    p = sub.add_parser("token", help="a signed token for a user of a LangGraph server with auth on ($APDMEM_AUTH_SECRET)")
    p.add_argument("user_id")
    p.add_argument("--days", type=positive, default=30, help="validity in days, at most 365 (default 30); "
                   "$APDMEM_AUTH_NOT_BEFORE on the server revokes tokens issued before a time")
    p.set_defaults(func=cmd_token)
    p = sub.add_parser("demo", parents=[common, graph, l0, links], help="ingest a real user history (50 sessions) and answer its question")
    p.add_argument("--no-reflection", action="store_true",
                   help="no model reflection between rounds: the deterministic disclosure policy decides (always so with "
                        "the embedded chat models, local and local:smollm2, which cannot judge evidence; this flag matters "
                        "with --chat-model or --controller-model <provider>:<model>)")
    p.set_defaults(func=cmd_demo)

    evals = sub.add_parser("eval", help="question-answering benchmarks").add_subparsers(dest="eval", required=True)
    from apdmem.eval import locomo, longmemeval

    cache = Parser(add_help=False)  # a benchmark keeps its own memories, never in the user's store
    cache.add_argument("--store", "--memory-dir", dest="store", default=None,
                       help="directory where the benchmark's memories are kept between runs (default: a 'memory' "
                            "directory in the output directory)")
    longmemeval.add_parser(evals, [cache, models, graph, l0])
    locomo.add_locomo_parser(evals, [cache, models, graph, l0])

    bench = sub.add_parser("bench", help="benchmarks").add_subparsers(dest="bench", required=True)
    about = ("first-pass retrieval on a LongMemEval or LoCoMo file (ingested into a fresh temporary store, so that "
             "ingestion is timed from scratch)")
    p = bench.add_parser("retrieval", parents=[models], help=about, description=about)
    p.add_argument("dataset", help="a LongMemEval file (e.g. longmemeval_s_cleaned.json) or a LoCoMo file (locomo10.json)")
    p.add_argument("--l0-mode", choices=["auto", "llm", "raw"], default="raw",
                   help="L0 units by the chat model (llm), the window text (raw, the default here) or auto")
    p.add_argument("--limit", type=int, default=None, help="first N conversations (LongMemEval) or questions (LoCoMo)")
    p.add_argument("--dates", action="store_true", help="prefer the sessions in the date ranges resolved from the questions "
                   "(Memory.search's date_range; the controller does not)")
    p.add_argument("--output", default="reports/retrieval.json",
                   help="the JSON report (every question's ranking); the table printed is written beside it as .md")
    p.set_defaults(func=cmd_bench_retrieval)
    return parser


def main(argv: list[str] | None = None) -> int:
    # Repairs and clean-ups are reported on stderr, one line each, whatever logging the host process set up.
    log, handler = logging.getLogger("apdmem"), logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.addHandler(handler)
    propagate, log.propagate = log.propagate, False
    try:
        return _run(argv)
    finally:
        log.removeHandler(handler)
        log.propagate = propagate


FREE_TEXT = ("query", "question")  # the arguments that are free text, not ids, paths or options


def _run(argv: list[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # usage errors (already printed in one line) and --help
        return int(exc.code or 0)
    for name in FREE_TEXT:  # invalid UTF-8 bytes in the shell's argument become U+FFFD; ids are checked instead
        if isinstance(getattr(args, name, None), str):
            setattr(args, name, readable(getattr(args, name)))
    try:
        _resolve(args)
        args.func(args)
        sys.stdout.flush()
    except ApdmemError as exc:
        return _fail(f"apdmem: error: {exc}", 2)
    except BrokenPipeError:  # `apdmem show ... | head`: the reader left; nothing was changed
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes at exit
        return _fail("apdmem: error: output closed before it was all written (broken pipe)", 2)
    except KeyboardInterrupt:
        return _fail("apdmem: interrupted; stored work is kept, run the command again to continue", 130)
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        return _fail(f"apdmem: error: {exc.strerror or exc}{where}", 1)
    return 0


def _fail(message: str, code: int) -> int:
    print(message.replace("\n", " "), file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
