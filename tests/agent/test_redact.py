"""agent.redact: every form a database address carries a credential in comes out without it."""

from __future__ import annotations

import pytest

from agent.redact import redact_dsn, scrub

S = "Pw-s3cret"
CASES = [
    (f"postgresql://ferry:{S}@127.0.0.1:5432/db", "postgresql://ferry:***@127.0.0.1:5432/db"),
    (f"postgresql://ferry@127.0.0.1:5432/db?password={S}", "postgresql://ferry@127.0.0.1:5432/db?password=***"),
    (f"postgres://h/db?sslmode=require&sslpassword={S}&application_name=x",
     "postgres://h/db?sslmode=require&sslpassword=***&application_name=x"),
    (f"postgresql://h/db?passfile=/home/u/{S}", "postgresql://h/db?passfile=***"),
    (f"postgresql://h/db?auth_token={S}&api_secret={S}", "postgresql://h/db?auth_token=***&api_secret=***"),
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
