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
