"""`resolve_relative_dates` against hand-computed calendar answers.

Question dates: Tuesday 2023-05-30 (TUE), Sunday 2023-06-04 (SUN) and Wednesday 2024-01-10 (JAN, for
expressions that cross a year boundary). Weeks run Monday to Sunday; "N months ago" keeps the day of the
month, clamped to the target month's length; winter is December to February.
"""

from datetime import date

import pytest

from apdmem.memory.time_expressions import resolve_relative_dates
from apdmem.nodes.dates import unresolved_cues

TUE = date(2023, 5, 30)
SUN = date(2023, 6, 4)
JAN = date(2024, 1, 10)

# (question date, question, the expression found, start, end); a point in time has start == end.
CASES = [
    # single days
    (TUE, "What did I cook today?", "today", "2023-05-30", "2023-05-30"),
    (TUE, "Who did I meet yesterday?", "yesterday", "2023-05-29", "2023-05-29"),
    (TUE, "What did I buy the day before yesterday?", "the day before yesterday", "2023-05-28", "2023-05-28"),
    (SUN, "What did I eat yesterday?", "yesterday", "2023-06-03", "2023-06-03"),
    # N units ago, digits and words
    (TUE, "Which book did I finish 3 days ago?", "3 days ago", "2023-05-27", "2023-05-27"),
    (TUE, "Where did I go ten days ago?", "ten days ago", "2023-05-20", "2023-05-20"),
    (TUE, "What did I order two weeks ago?", "two weeks ago", "2023-05-16", "2023-05-16"),
    (TUE, "What did I plant a couple of weeks ago?", "a couple of weeks ago", "2023-05-16", "2023-05-16"),
    (TUE, "Which museum did I visit a few days ago?", "a few days ago", "2023-05-27", "2023-05-27"),
    (TUE, "What did I decide a month ago?", "a month ago", "2023-04-30", "2023-04-30"),
    (TUE, "What did I adopt three months ago?", "three months ago", "2023-02-28", "2023-02-28"),  # Feb has no 30th
    (TUE, "Where did I live a year ago?", "a year ago", "2022-05-30", "2022-05-30"),
    (TUE, "What car did I drive 2 years ago?", "2 years ago", "2021-05-30", "2021-05-30"),
    (JAN, "What gift did I get 2 weeks ago?", "2 weeks ago", "2023-12-27", "2023-12-27"),
    (JAN, "Which course did I start three months ago?", "three months ago", "2023-10-10", "2023-10-10"),
    (JAN, "What did I bake a few weeks ago?", "a few weeks ago", "2023-12-20", "2023-12-20"),
    # rolling windows ending today
    (TUE, "How many times did I run in the past 10 days?", "in the past 10 days", "2023-05-20", "2023-05-30"),
    (TUE, "What did I read in the last two weeks?", "in the last two weeks", "2023-05-16", "2023-05-30"),
    (TUE, "Which shows did I watch in the past few months?", "in the past few months", "2023-02-28", "2023-05-30"),
    (TUE, "How much did I spend in the past week?", "in the past week", "2023-05-23", "2023-05-30"),
    (TUE, "What did I cook the past week?", "the past week", "2023-05-23", "2023-05-30"),
    (TUE, "How often did I swim over the last 3 months?", "over the last 3 months", "2023-02-28", "2023-05-30"),
    (JAN, "How many books did I read in the past month?", "in the past month", "2023-12-10", "2024-01-10"),
    (JAN, "What did I buy in the last year?", "in the last year", "2023-01-10", "2024-01-10"),
    # calendar periods: last/this week (Mon-Sun), month, year
    (TUE, "Which restaurant did I try last week?", "last week", "2023-05-22", "2023-05-28"),
    (SUN, "Which restaurant did I try last week?", "last week", "2023-05-22", "2023-05-28"),
    (JAN, "Which restaurant did I try last week?", "last week", "2024-01-01", "2024-01-07"),
    (TUE, "What did I finish last month?", "last month", "2023-04-01", "2023-04-30"),
    (JAN, "What did I finish last month?", "last month", "2023-12-01", "2023-12-31"),
    (TUE, "Where did I travel last year?", "last year", "2022-01-01", "2022-12-31"),
    (JAN, "Where did I travel last year?", "last year", "2023-01-01", "2023-12-31"),
    (TUE, "What meetings do I have this week?", "this week", "2023-05-29", "2023-06-04"),
    (SUN, "What did I do this week?", "this week", "2023-05-29", "2023-06-04"),
    (TUE, "What did I pay this month?", "this month", "2023-05-01", "2023-05-31"),
    (TUE, "What did I buy earlier this month?", "earlier this month", "2023-05-01", "2023-05-30"),
    (TUE, "Which concerts did I see earlier this year?", "earlier this year", "2023-01-01", "2023-05-30"),
    (JAN, "Which concerts did I see earlier this year?", "earlier this year", "2024-01-01", "2024-01-10"),
    (SUN, "Where did I run earlier this week?", "earlier this week", "2023-05-29", "2023-06-04"),
    # weekends
    (TUE, "Where did I hike last weekend?", "last weekend", "2023-05-27", "2023-05-28"),
    (TUE, "Where did I hike this past weekend?", "this past weekend", "2023-05-27", "2023-05-28"),
    (SUN, "Where did I hike last weekend?", "last weekend", "2023-05-27", "2023-05-28"),  # not the one under way
    (JAN, "Where did I hike last weekend?", "last weekend", "2024-01-06", "2024-01-07"),
    (SUN, "What am I doing this weekend?", "this weekend", "2023-06-03", "2023-06-04"),
    # weekdays
    (TUE, "What did I buy last Friday?", "last Friday", "2023-05-26", "2023-05-26"),
    (TUE, "Who called me last Tuesday?", "last Tuesday", "2023-05-23", "2023-05-23"),  # a week back, not today
    (TUE, "What did I eat on Monday?", "on Monday", "2023-05-29", "2023-05-29"),
    (SUN, "Who did I see last Sunday?", "last Sunday", "2023-05-28", "2023-05-28"),
    (JAN, "What did I watch last Sunday?", "last Sunday", "2024-01-07", "2024-01-07"),
    (TUE, "What is planned for next Friday?", "next Friday", "2023-06-02", "2023-06-02"),
    (SUN, "What is planned for next Monday?", "next Monday", "2023-06-05", "2023-06-05"),
    # seasons
    (TUE, "Where did I go last summer?", "last summer", "2022-06-01", "2022-08-31"),
    (TUE, "What did I knit last winter?", "last winter", "2022-12-01", "2023-02-28"),
    (JAN, "Where did I go last summer?", "last summer", "2023-06-01", "2023-08-31"),
    (JAN, "What did I knit last winter?", "last winter", "2022-12-01", "2023-02-28"),  # this winter is not over
    # named months
    (TUE, "Which course did I take in March?", "in March", "2023-03-01", "2023-03-31"),
    (TUE, "What did I spend in May?", "in May", "2023-05-01", "2023-05-31"),
    (TUE, "What did I order in June?", "in June", "2022-06-01", "2022-06-30"),  # the latest June is last year's
    (TUE, "How many runs have I done since March?", "since March", "2023-03-01", "2023-05-30"),
    (TUE, "Where did I go last March?", "last March", "2023-03-01", "2023-03-31"),
    (TUE, "Where did I go last May?", "last May", "2022-05-01", "2022-05-31"),
    (JAN, "What did I do in December?", "in December", "2023-12-01", "2023-12-31"),
    (JAN, "What did I cook last December?", "last December", "2023-12-01", "2023-12-31"),
    (JAN, "How many books have I read since November?", "since November", "2023-11-01", "2024-01-10"),
    # dates written out: without a year, the latest one not after the question date
    (TUE, "What did I do on March 3rd?", "March 3rd", "2023-03-03", "2023-03-03"),
    (TUE, "What did I eat on June 12?", "June 12", "2022-06-12", "2022-06-12"),
    (TUE, "What did I buy on May 20, 2023?", "May 20, 2023", "2023-05-20", "2023-05-20"),
    (TUE, "Where was I on the 3rd of March?", "the 3rd of March", "2023-03-03", "2023-03-03"),
    (TUE, "Who did I meet on 8 May, 2023?", "on 8 May, 2023", "2023-05-08", "2023-05-08"),
    (TUE, "Which museums did I visit in the month of February?", "the month of February", "2023-02-01", "2023-02-28"),
    (JAN, "What did I read in the month of December 2022?", "the month of December 2022", "2022-12-01", "2022-12-31"),
    (TUE, "Where did I travel in June 2022?", "in June 2022", "2022-06-01", "2022-06-30"),
    (TUE, "How many concerts did I see in 2022?", "in 2022", "2022-01-01", "2022-12-31"),
]


@pytest.mark.parametrize(("today", "question", "expression", "start", "end"), CASES, ids=[f"{c[0]}:{c[2]}" for c in CASES])
def test_relative_expression(today, question, expression, start, end):
    hints = resolve_relative_dates(question, today)
    assert [(h.expression.lower(), f"{h.start}", f"{h.end}") for h in hints] == [(expression.lower(), start, end)]


def test_several_expressions_in_order():
    hints = resolve_relative_dates("Did I spend more last week or two weeks ago?", TUE)
    assert [(h.expression, f"{h.start}", f"{h.end}") for h in hints] == [
        ("last week", "2023-05-22", "2023-05-28"),
        ("two weeks ago", "2023-05-16", "2023-05-16"),
    ]


def test_describe():
    point, span = resolve_relative_dates("What did I buy last Saturday, and what last month?", TUE)
    assert point.describe() == '"last Saturday" = 2023-05-27 (Saturday)'
    assert span.describe() == '"last month" = 2023-04-01 to 2023-04-30'


def test_no_expression():
    assert resolve_relative_dates("What is my dog's name?", TUE) == []
    # Numbers that are no dates: a day before a month without "the"/"on" or a year, a date that does not exist,
    # a number that is no year.
    for question in ["I bought 3 May tickets", "Where was I on February 30?", "I walked in 1000 steps"]:
        assert resolve_relative_dates(question, TUE) == [], question


def test_unresolved_cues():
    question = "What did I pack the day before my birthday trip?"
    hints = resolve_relative_dates(question, TUE)
    assert hints == [] and unresolved_cues(question, hints)  # no calendar places a birthday: ask the model
    question = "How many days ago did I buy the blender?"
    hints = resolve_relative_dates(question, TUE)
    assert hints == [] and not unresolved_cues(question, hints)  # an interval the answer node computes
    question = "What did I buy last week?"
    assert not unresolved_cues(question, resolve_relative_dates(question, TUE))
    assert not unresolved_cues("What is my dog's name?", [])
