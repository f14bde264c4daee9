"""``broker create|alter|drop priority`` and ``broker show priorities``, through CliRunner.

The database fixtures (``url``, ``run``, ``services``) and helpers come from test_cli.
"""

from __future__ import annotations

import test_cli
from test_cli import CONTRACT, INITIATOR, TARGET, Run, as_json, one_error_line, send_request

# test_cli's fixtures: a fresh database (url), the runner (run) and two services.
url = test_cli.url
run = test_cli.run
services = test_cli.services


def priorities(run: Run) -> dict[str, dict[str, object]]:
    return {row["name"]: row for row in as_json(run("show", "priorities", "--json"))}


def endpoint_priorities(run: Run, handle: str) -> tuple[int, int]:
    """(initiator, target) priority of the dialog ``handle`` began."""
    rows = as_json(run("show", "endpoints", "--json"))
    [mine] = [r for r in rows if r["conversation_handle"].lower() == handle.lower()]
    [peer] = [r for r in rows if r["conversation_id"] == mine["conversation_id"] and not r["is_initiator"]]
    return mine["priority"], peer["priority"]


def test_create_show_alter_drop(run: Run, services: None) -> None:
    created = run(
        "create", "priority", "Urgent", "--contract", CONTRACT, "--local-service", INITIATOR,
        "--remote-service", TARGET, "--level", "8",
    )
    assert created.stdout.strip() == "created priority Urgent"
    run("create", "priority", "Everything")
    rows = priorities(run)
    assert rows["Everything"]["priority"] == 5
    assert rows["Everything"]["service_contract_id"] is None
    assert (rows["Urgent"]["priority"], rows["Urgent"]["remote_service_name"]) == (8, TARGET)
    assert isinstance(rows["Urgent"]["service_contract_id"], int)

    table = run("show", "priorities").stdout
    urgent_line = next(line for line in table.splitlines() if "Urgent" in line)
    assert CONTRACT in urgent_line and INITIATOR in urgent_line and TARGET in urgent_line
    everything_line = next(line for line in table.splitlines() if "Everything" in line)
    assert everything_line.count("ANY") == 3

    assert run("alter", "priority", "Urgent", "--level", "default").stdout.strip() == "altered priority Urgent"
    assert priorities(run)["Urgent"]["priority"] == 5
    run("alter", "priority", "Urgent", "--contract", "ANY", "--level", "9")
    assert (priorities(run)["Urgent"]["service_contract_id"], priorities(run)["Urgent"]["priority"]) == (None, 9)
    assert priorities(run)["Urgent"]["remote_service_name"] == TARGET

    assert run("drop", "priority", "Urgent").stdout.strip() == "dropped priority Urgent"
    assert list(priorities(run)) == ["Everything"]


def test_new_dialogs_get_the_priority(run: Run, services: None) -> None:
    run("create", "priority", "Asking", "--local-service", INITIATOR, "--level", "9")
    run("create", "priority", "Answering", "--local-service", TARGET, "--level", "2")
    handle = send_request(run)
    assert endpoint_priorities(run, handle) == (9, 2)

    run("alter", "priority", "Asking", "--level", "1")
    assert endpoint_priorities(run, handle) == (9, 2)  # fixed when the endpoint was created
    assert endpoint_priorities(run, send_request(run)) == (1, 2)


def test_errors(run: Run, services: None) -> None:
    one_error_line(run("create", "priority", "P", "--contract", "//no/such", expect=1), 8425)
    one_error_line(run("create", "priority", "P", "--local-service", "//no/such", expect=1), 8423)
    level = run("create", "priority", "P", "--level", "11", expect=1)
    assert level.stderr.startswith("error 59002: PRIORITY_LEVEL must be from 1 to 10")
    assert "DEFAULT" in run("create", "priority", "P", "--level", "high", expect=2).stderr

    run("create", "priority", "P")
    one_error_line(run("create", "priority", "P", expect=1), 2714)
    assert "nothing to change" in run("alter", "priority", "P", expect=2).stderr
    one_error_line(run("alter", "priority", "Q", "--level", "3", expect=1), 15151)
    run("drop", "priority", "P")
    one_error_line(run("drop", "priority", "P", expect=1), 3701)


def test_help_has_examples(run: Run) -> None:
    for command in (("create", "priority"), ("alter", "priority"), ("drop",), ("show",)):
        text = run(*command, "--help").stdout
        assert "Example:" in text and "priorit" in text, command
