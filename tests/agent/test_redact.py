"""agent.redact: every form a database address carries a credential in comes out without it."""

from __future__ import annotations

import pytest

from agent.redact import redact_dsn, scrub

S = "Pw-s3cret"
CASES = [
    (f"postgresql://ferry:{S}@127.0.0.1:5432/db", "postgresql://ferry:***@127.0.0.1:5432/db"),
    (f"postgresql://ferry@127.0.0.1:5432/db?password={S}", "postgresql://ferry@127.0.0.1:5432/db?***"),
    (f"postgres://h/db?sslmode=require&sslpassword={S}&application_name=x",
     "postgres://h/db?***"),
    (f"postgresql://h/db?passfile=/home/u/{S}", "postgresql://h/db?***"),
    (f"postgresql://h/db?auth_token={S}&api_secret={S}", "postgresql://h/db?***"),
    (f"postgresql://u:p@ss{S}@h/db", "postgresql://u:***@h/db"),  # an '@' inside the password
    (f"host=h port=5 user=u password={S} dbname=d", "host=h port=5 user=u password=*** dbname=d"),
    (f"host=h password = '{S} with spaces' dbname=d", "host=h password = *** dbname=d"),
    ("postgresql://ferry@h/db", "postgresql://ferry@h/db"),  # nothing to hide: unchanged
]


@pytest.mark.parametrize(("dsn", "shown"), CASES)
def test_redact_dsn_hides_every_credential(dsn: str, shown: str) -> None:
    assert redact_dsn(dsn) == shown
    assert S not in redact_dsn(dsn)


def test_scrub_takes_the_secrets_out_of_a_drivers_message() -> None:
    dsn = f"host=h password='{S}%21' user=u"
    text = f'invalid connection option near "{S}%21" (decoded {S}!) in postgresql://u:{S}@h'
    out = scrub(text, dsn)
    assert S not in out and "***" in out
    assert scrub(f"password={S} token: x", None) == "password=*** token: x"


@pytest.mark.parametrize(("dsn", "password"), [
    ("postgresql://ferry@127.0.0.1:5/postgres?pass%77ord=SECRET", "SECRET"),  # libpq percent-decodes the key
    ("postgresql://ferry@127.0.0.1:5/postgres?%70assword=SECRET", "SECRET"),
    ("postgresql://ferry@127.0.0.1:5/postgres?password=SEC#RET", "SEC#RET"),
    ("postgresql://ferry@127.0.0.1:5/postgres?password=SEC;RET", "SEC;RET"),
    ("host=h password=SEC\\ RET dbname=x", "SEC RET"),  # libpq's backslash escape
])
def test_forms_libpq_reads_as_a_password_leak_nothing(dsn: str, password: str) -> None:
    """Second reader's finding: these kept the password, or its tail, in the redacted text."""
    shown = redact_dsn(dsn)
    assert "SEC" not in shown and "RET" not in shown, shown
    said = scrub(f"could not connect with {dsn}: password {password} rejected", dsn)
    assert "SEC" not in said and "RET" not in said, said
