"""`resolve_said`: the time expressions of a session's own sentences against the session's date, by hand-computed
calendar answers, and the ones that stay unresolved because no calendar places them without a guess.

Session dates: Monday 2023-05-08 (MON, the LoCoMo example: "I went to a support group yesterday"), Saturday
2023-06-03 (SAT), Friday 2023-12-29 (DEC, across a year boundary) and Wednesday 2024-01-31 (JAN31, month ends).
Weeks run Monday to Sunday; "N months ago" keeps the day of the month, clamped to the target month's length.
"""

from datetime import date

import pytest

from apdmem.memory.time_expressions import dated, resolve_said, undated

MON = date(2023, 5, 8)
SAT = date(2023, 6, 3)
DEC = date(2023, 12, 29)
JAN31 = date(2024, 1, 31)

# (session date, sentence, the expression found, what is written beside it); None: nothing is resolved.
CASES = [
    # single days, in the past
    (MON, "I went to a support group yesterday.", "yesterday", "7 May 2023"),
    (MON, "We had a barbecue last night.", "last night", "7 May 2023"),
    (MON, "I painted the fence the day before yesterday.", "the day before yesterday", "6 May 2023"),
    (MON, "I finally finished the book today!", "today", "8 May 2023"),
    (MON, "I'm seeing the band tonight.", "tonight", "8 May 2023"),
    (MON, "I had my first lesson this morning.", "this morning", "8 May 2023"),
    (SAT, "I ran five miles yesterday.", "yesterday", "2 June 2023"),
    (DEC, "I got a new bike yesterday.", "yesterday", "28 December 2023"),
    # the future
    (MON, "My interview is tomorrow.", "tomorrow", "9 May 2023"),
    (MON, "I fly out the day after tomorrow.", "the day after tomorrow", "10 May 2023"),
    (DEC, "The party is tomorrow.", "tomorrow", "30 December 2023"),
    (MON, "I will start the new job in three weeks.", "in three weeks", "29 May 2023"),
    (MON, "I'm going to visit my aunt in two days.", "in two days", "10 May 2023"),
    (MON, "We'll move in a month.", "in a month", "8 June 2023"),
    (DEC, "I'm planning to sign up in 2 weeks.", "in 2 weeks", "12 January 2024"),
    (MON, "The exam is three days from now.", "three days from now", "11 May 2023"),
    (JAN31, "I'll renew it in a month.", "in a month", "29 February 2024"),  # no 31 February
    # N units ago, digits and words
    (MON, "I adopted Luna two days ago.", "two days ago", "6 May 2023"),
    (MON, "I started the course 10 days ago.", "10 days ago", "28 April 2023"),
    (MON, "Two weeks ago I met my aunt.", "Two weeks ago", "24 April 2023"),
    (MON, "I bought a smoker a week ago.", "a week ago", "1 May 2023"),
    (MON, "I quit my job a month ago.", "a month ago", "8 April 2023"),
    (MON, "We moved here three months ago.", "three months ago", "8 February 2023"),
    (MON, "I graduated a year ago.", "a year ago", "8 May 2022"),
    (MON, "I ran my first marathon 5 years ago.", "5 years ago", "8 May 2018"),
    (JAN31, "I joined the gym a month ago.", "a month ago", "31 December 2023"),
    (JAN31, "I started knitting two months ago.", "two months ago", "30 November 2023"),  # November has 30 days
    (DEC, "I visited the museum an hour ago, no, a day ago.", "a day ago", "28 December 2023"),
    # weekdays
    (MON, "Last Tuesday I saw the doctor.", "Last Tuesday", "2 May 2023"),
    (MON, "I went hiking last Sunday.", "last Sunday", "7 May 2023"),
    (MON, "I called her last Monday.", "last Monday", "1 May 2023"),  # a week back, not today
    (SAT, "I cleaned the car this past Thursday.", "this past Thursday", "1 June 2023"),
    (MON, "I'll see him next Friday.", "next Friday", "12 May 2023"),
    (SAT, "The recital is next Monday.", "next Monday", "5 June 2023"),
    # weekends
    (MON, "I went camping last weekend.", "last weekend", "6 May to 7 May 2023"),
    (SAT, "I went camping last weekend.", "last weekend", "27 May to 28 May 2023"),
    (MON, "I'm going to the lake this weekend.", "this weekend", "13 May to 14 May 2023"),
    (SAT, "I'm at the lake this weekend.", "this weekend", "3 June to 4 June 2023"),
    # calendar weeks, months, years
    (MON, "I started yoga last week.", "last week", "1 May to 7 May 2023"),
    (MON, "The move is next week.", "next week", "15 May to 21 May 2023"),
    (MON, "I've been busy this week.", "this week", "8 May to 14 May 2023"),
    (MON, "I signed the lease last month.", "last month", "April 2023"),
    (MON, "The wedding is next month.", "next month", "June 2023"),
    (MON, "I've read four books this month.", "this month", "May 2023"),
    (DEC, "I'll retire next month.", "next month", "January 2024"),
    (MON, "I visited Japan last year.", "last year", "2022"),
    (DEC, "I'll visit Japan next year.", "next year", "2024"),
    (MON, "I got promoted earlier this year.", "earlier this year", "1 January to 8 May 2023"),
    (MON, "I bought a keyboard earlier this week.", "earlier this week", "8 May 2023"),  # Monday: the week began today
    # rolling windows ending on the session's date
    (MON, "I've run every day for the past two weeks.", "the past two weeks", "24 April to 8 May 2023"),
    (MON, "I've been sleeping badly in the past week.", "in the past week", "1 May to 8 May 2023"),
    (MON, "I read three books over the last 3 months.", "over the last 3 months", "8 February to 8 May 2023"),
    # seasons
    (MON, "We went to Maine last summer.", "last summer", "1 June to 31 August 2022"),
    (MON, "I'm taking a pottery class this summer.", "this summer", "1 June to 31 August 2023"),
    (DEC, "I learned to ski last winter.", "last winter", "1 December 2022 to 28 February 2023"),
    # a month or a day named without a year: the next one in a sentence about the future, else this year's if begun
    (MON, "I went to Paris in March.", "in March", "March 2023"),
    (MON, "I'm going to Japan in April.", "in April", "April 2024"),
    (MON, "I'll fly to Tokyo on June 12.", "June 12", "12 June 2023"),
    (MON, "We celebrated on the 3rd of March.", "the 3rd of March", "3 March 2023"),
    (date(2023, 3, 10), "I've been starting seeds indoors since February 20th.", "February 20th", "20 February 2023"),
    (date(2023, 3, 10), "I volunteered at the fundraising dinner back in February.", "in February", "February 2023"),
    # case does not matter
    (MON, "YESTERDAY was my birthday.", "YESTERDAY", "7 May 2023"),
]

# Sentences whose time words name no date without a guess: they stay unresolved.
UNRESOLVED = [
    (MON, "I went there a few days ago."),  # how many is a few?
    (MON, "We met a couple of weeks ago."),
    (MON, "I tried it several months ago."),
    (MON, "I'll see the dentist on Tuesday."),  # last Tuesday or the coming one?
    (MON, "The concert is on June 12."),  # this June or last?
    (MON, "My cousin's wedding is in August."),
    (MON, "My sister visits next weekend."),  # the coming weekend or the one after?
    (MON, "I read the whole series in three weeks."),  # a duration, not a day ahead
    (MON, "In 2 days we were done."),
    (MON, "Two days later I fell ill."),  # later than what?
    (MON, "I saw him the other day."),
    (MON, "I've been cooking more recently."),
    (MON, "A while ago I lived in Ohio."),
    (MON, "On May 20, 2023 I ran."),  # already a date: nothing to add
    (MON, "In the past few months I learned a lot."),
    (MON, "I painted it in summer."),
    (MON, "I bought 3 May tickets."),
]


@pytest.mark.parametrize(("said_on", "sentence", "expression", "spoken"), CASES, ids=[f"{c[0]}:{c[2]}" for c in CASES])
def test_said_expression(said_on, sentence, expression, spoken):
    assert [(h.expression, h.spoken()) for h in resolve_said(sentence, said_on)] == [(expression, spoken)]
    assert dated(sentence, said_on) == f"{sentence} [{expression} = {spoken}]"
    assert undated(dated(sentence, said_on)) == sentence


@pytest.mark.parametrize(("said_on", "sentence"), UNRESOLVED, ids=[c[1] for c in UNRESOLVED])
def test_ambiguous_expressions_stay_unresolved(said_on, sentence):
    assert resolve_said(sentence, said_on) == []
    assert dated(sentence, said_on) == sentence


def test_several_expressions_in_one_sentence():
    sentence = "I met her last Tuesday and we fly out next month, a few days after her birthday."
    assert dated(sentence, MON) == f"{sentence} [last Tuesday = 2 May 2023; next month = June 2023]"


def test_a_sentence_that_looks_dated_keeps_its_own_brackets():
    assert undated("I paid [in cash] yesterday.") == "I paid [in cash] yesterday."
