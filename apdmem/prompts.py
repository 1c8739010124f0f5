"""Every prompt apdmem sends to a model, in one place. Written for apdmem from the paper's descriptions."""

# --- Memory construction -------------------------------------------------------------------------

L0_WINDOW = """You index a personal assistant's conversation history so it can be searched later.
The excerpt below is from a session that started on {date} ({weekday}).

Write ONE sentence that says what these turns are about, so that a search for it would find them:
- name people, places, products and organisations instead of using pronouns ("the user" for the person talking
  to the assistant);
- turn relative dates into absolute ones using the session date ("yesterday" -> "{yesterday}");
- keep numbers, quantities and names exactly.
Then list up to 8 keywords (exact names, titles, numbers, distinctive terms from the text) and up to 4 short
topic tags (e.g. "travel", "health", "work").

Excerpt:
{turns}"""

L1_FACTS = """From this conversation session (started {date}, {weekday}), extract the key facts about the user
that a personal assistant should remember: who they are, their possessions, relationships, preferences,
habits, plans, decisions, events in their life, constraints, and anything they said they did or will do.

Rules:
- between 5 and 25 facts; fewer only when the session really has fewer;
- each fact is one self-contained sentence that makes sense without the conversation: use names, never
  "he"/"it"/"this";
- give absolute dates (the session date is {date}) and keep numbers and names exactly;
- include what the assistant recommended or stated only when the user relied on it or asked for it.

Session:
{turns}"""

L2_NOTES = """Turn this part of a conversation (session started {date}, {weekday}) into evidence notes.
For every turn listed, write short atomic facts, one per bullet, that keep every specific detail: names,
titles, dates (made absolute), times, quantities, prices, places, list items and their order. Each bullet must
stand alone without the conversation. Refer to turns by their number.

Turns:
{turns}"""

# --- Controller ------------------------------------------------------------------------------------------

RESOLVE_DATES = """Today is {today} ({weekday}). The question below may mention times relative to today
("last spring", "a few weeks ago", "around my birthday"). For each such expression that names a period of the
calendar, give the expression as written and the absolute date range it most likely means (YYYY-MM-DD to
YYYY-MM-DD). Skip expressions that depend on events you do not know. Return an empty list when there are none.

Question: {question}"""

DECOMPOSE = """You prepare searches over a user's past conversations with their assistant.
Question (asked {today}): {question}

If answering needs facts from several separate events or topics (comparisons, counts, "which came first",
totals over several items), list one short search query per fact needed. Otherwise return the question itself
as the only query. At most {max_queries} queries; each should contain the distinctive words of what it looks for."""

REFLECT = """You control the search of a user's conversation memory to answer a question.
Memory is layered: L0 one-line summaries (found by search), L1 key facts of a session, L2 detailed notes of
chosen turns, L3 the exact messages. Open the cheapest layer that can answer; go deeper only for exact
wording, numbers, lists or details the upper layer lacks.

Question (asked {today}): {question}
{date_hints}
Sessions found by search (id, date, depth already read, best-matching summary):
{candidates}

Evidence read so far:
{evidence}

Steps used: {step} of {tmax}.

Decide:
- sufficient: true only if the evidence answers the question completely (for counts and lists, every item);
- missing: what is still unknown, in a few words;
- draft_answer: your best answer from the evidence so far (say what is uncertain);
- open_sessions: ids of found sessions not yet read that probably hold missing facts (read at L1);
- deepen: sessions already read whose finer layer is needed, with layer "L2" (detailed notes) or "L3" (exact words);
- new_queries: new search queries if the needed sessions were probably not found yet."""

SYNTHESIZE_NOTES = """Organize the evidence below into notes for answering the question. Do not answer it.

Question (asked {today}): {question}
{date_hints}
Evidence, oldest first (each line: [session date | session id | layer] text; the lines of the latest session end
their bracket with "| latest"):
{evidence}

Write Markdown notes with these sections, leaving out empty ones:
## Relevant facts - only facts that bear on the question, each with its date;
## Timeline - the events in date order, with absolute dates and the gaps between them when time matters;
## Updates and contradictions - values that changed over time, latest first, each with its date; mark the latest
   one as (latest) and the ones it replaced as (earlier);
## Items and counts - when the question asks how many or which ones: every distinct item, numbered, without
   duplicates, and the total;
## Answer hint - what the answer should be based on, and whether the evidence is enough to answer at all."""

ANSWER = """You are a personal assistant with a long-term memory of your conversations with the user.
Answer the user's question from the notes and the draft below. Today is {today}.
- Be concise: give the answer first, then at most two sentences of justification.
- For counts, dates and durations, work them out from the notes step by step before answering. When the notes
  end with "Computed from the dated evidence" (a date, a duration, a count of distinct items, a sum or a difference
  of stated figures, each with its quotes), start from it, and correct it only where the notes show an item it
  missed or counted twice.
- When facts changed over time, answer with the latest one (marked "latest" in the notes) and say it is the
  current one; give an earlier value only when the question asks about the past ("before", "used to", "at first",
  "in March", "when did it change"), and say when each held.
- If the notes do not contain the information, say that you don't have that information from your past
  conversations, and do not guess.

Question: {question}

Notes:
{notes}

Draft answer from the search: {draft}"""

# --- Evaluation ------------------------------------------------------------------------------------------

JUDGE = """You grade an assistant's reply against a reference answer. Answer with one word: yes or no.

Question: {question}
Reference answer: {answer}
Assistant's reply: {reply}

{criterion}
Is the reply correct? Answer yes or no."""

JUDGE_CRITERIA = {
    "default": "Say yes if the reply contains the reference answer or something equivalent to it. If the reply "
    "gives only part of the information the reference requires, say no.",
    "temporal-reasoning": "Say yes if the reply contains the reference answer or an equivalent. Do not penalize "
    "off-by-one differences in counts of days, weeks or months (e.g. 18 days where the reference says 19).",
    "knowledge-update": "Say yes if the reply gives the updated answer in the reference, even if it also mentions "
    "earlier information. Say no if it gives only outdated information.",
    "single-session-preference": "The reference is a rubric describing what a good personalized reply does. Say yes "
    "if the reply recalls and uses the user's personal information correctly, as the rubric asks; it need not "
    "cover every point of the rubric.",
    "abstention": "The question cannot be answered from the conversation history. Say yes if the reply says the "
    "information is not available or that it does not know, and no if it gives an answer as if it knew.",
}
