"""Every bad Python API call of tests/fault_table_api.py raises the exception docs/errors.md
lists, one line naming the argument and what is expected."""
import pytest

import fault_rows
from fault_table_api import ROWS, ApiRow, run

DOCUMENTED = fault_rows.documented_api()


def test_the_doc_lists_every_call_and_nothing_else():
    assert set(DOCUMENTED) == {r.what for r in ROWS}, \
        "docs/errors.md is out of date: run python tests/fault_rows.py"


@pytest.mark.parametrize("row", ROWS, ids=[r.what for r in ROWS])
def test_bad_call(row: ApiRow, tmp_path):
    kind, message = run(row, tmp_path)
    assert kind == row.raises, f"{row.what}: raised {kind or 'nothing'}: {message}"
    assert message.strip() and len(message.strip().splitlines()) == 1, message
    assert row.names in message, f"{row.what}: {message!r} does not name {row.names!r}"
    assert (kind, fault_rows.normalize(message, tmp_path)) == DOCUMENTED[row.what]
