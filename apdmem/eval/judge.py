"""The LongMemEval judge: a yes/no LLM verdict with one criterion per question type, and beside it a
deterministic "gold answer contained" check (secondary: it misses paraphrases and accepts lucky lists)."""

from __future__ import annotations

import re

from apdmem import prompts
from apdmem.memory.records import Usage
from apdmem.models import generate

_YES_NO = re.compile(r"\b(yes|no)\b", re.I)


def judge_prompt(question_type: str, question: str, answer: str, reply: str, abstention: bool) -> str:
    key = "abstention" if abstention else question_type
    criterion = prompts.JUDGE_CRITERIA.get(key, prompts.JUDGE_CRITERIA["default"])
    return prompts.JUDGE.format(question=question, answer=answer, reply=reply, criterion=criterion)


def parse_verdict(text: str) -> bool | None:
    """The first yes/no word of the judge's reply; None when there is none."""
    match = _YES_NO.search(text or "")
    return None if match is None else match.group(1).lower() == "yes"


def judge(model, *, question_type: str, question: str, answer: str, reply: str, abstention: bool, usage: Usage) -> bool | None:
    """The judge's verdict, None when its reply holds no yes/no or there is no generative judge (`model` None,
    chat model "local"), counted as incorrect in reports."""
    if model is None:
        return None
    return parse_verdict(generate(model.bind(max_tokens=8), judge_prompt(question_type, question, answer, reply, abstention), usage))


def _normalize(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9 ]", " ", str(text).lower()).split())


def gold_contained(reply: str, answer: str) -> bool:
    """Whether the normalized gold answer appears in the normalized reply."""
    gold = _normalize(answer)
    return bool(gold) and f" {gold} " in f" {_normalize(reply)} "
