"""Authentication, operator policy and quotas of the control APIs (docs/protocol.md, section 7):
tenants cannot touch each other's jobs or exceed their caps and quotas, at the software switch,
at the PS, and through the job table the P4 switch's controller shares (on BMv2:
tests/test_p4_control.py); refused requests change
nothing."""

from __future__ import annotations

import argparse
import ast
import json
import logging
from pathlib import Path

import pytest
from control_support import OPERATOR_TOKEN, TENANTS, TOKENS, bearer, raw, rewrite, spec, write_policy

from ina.control.auth import Access
from ina.control.credentials import token_from_environment
from ina.control.http import MAX_BODY, ControlClient, ControlError, ControlServer
from ina.control.policy import OPEN, SCRAPER, Forbidden, Policy, Principal, acting_as
from ina.net.service import access_from_args
from ina.ps import ParameterServer
from ina.ps.server import PSServer
from ina.switch import SwitchConfig
from ina.switch import cli as switch_cli
from ina.switch.server import SwitchServer
from ina.switch.state import Jobs

LOOPBACK = ("127.0.0.1", 0)
SCRAPE_TOKEN = "scrape-token-0123456789"


@pytest.fixture
def policy_file(tmp_path):
    return write_policy(tmp_path)


@pytest.fixture
def access(policy_file):
    return Access(OPERATOR_TOKEN, Policy(policy_file))


@pytest.fixture
def switch(access):
    with SwitchServer(SwitchConfig(pool=32, words=4), LOOPBACK, LOOPBACK, access=access) as server:
        yield server


def client(server, who: str) -> ControlClient:
    return ControlClient(*server.control_address, token=OPERATOR_TOKEN if who == "operator" else TOKENS[who])


def registered(client: ControlClient) -> list[dict]:
    """The job table without what the watch measures live (GET /jobs adds it once the watch has sampled a job)."""
    return [{k: v for k, v in job.items() if k not in ("held", "slowest_rank", "stalled_ranks")} for job in client.jobs()]


def test_tokens_are_compared_with_every_known_one_and_unknown_ones_are_refused(access):
    assert access.authenticate(f"Bearer {OPERATOR_TOKEN}").operator
    tenant = access.authenticate(f"bearer {TOKENS['b']}")  # the scheme is case-insensitive; b's token came from a file
    assert (tenant.name, tenant.operator, tenant.tenant.priority_cap) == ("b", False, 200)
    for header in (None, "", "Bearer", "Bearer ", f"Basic {TOKENS['a']}", f"Bearer {TOKENS['a']}x", TOKENS["a"]):
        assert access.authenticate(header) is None, header
    assert Access().authenticate(None) is OPEN  # nothing configured: the open API of a single-user machine


def test_an_open_api_beyond_loopback_refuses_to_start_unless_allowed(tmp_path):
    with pytest.raises(ValueError, match="refusing to serve an unauthenticated control API beyond loopback"):
        ControlServer(SwitchServer.__new__(SwitchServer), "0.0.0.0", 0, access=Access())
    for allowed in (Access(allow_unauthenticated=True), Access(token=OPERATOR_TOKEN)):
        allowed.check_bind("0.0.0.0")
    Access().check_bind("127.0.0.1")
    Access().check_bind("localhost")


def test_tokens_come_from_a_file_or_the_environment(tmp_path):
    path = tmp_path / "token"
    path.write_text(" s3cret \n")
    assert token_from_environment({"INA_TOKEN_FILE": str(path), "INA_TOKEN": "other"}) == "s3cret"
    assert token_from_environment({"INA_TOKEN": "other"}) == "other"
    assert token_from_environment({}) is None
    with pytest.raises(ValueError, match="empty"):
        path.write_text("\n")
        token_from_environment({"INA_TOKEN_FILE": str(path)})


def test_the_scrape_token_authenticates_to_a_scrape_only_principal(policy_file):
    access = Access(OPERATOR_TOKEN, Policy(policy_file), scrape_token=SCRAPE_TOKEN)
    scraper = access.authenticate(f"Bearer {SCRAPE_TOKEN}")
    assert scraper is SCRAPER and (scraper.name, scraper.operator, scraper.tenant, scraper.scrape_only) == ("scraper", False, None, True)
    for token in (OPERATOR_TOKEN, *TOKENS.values()):  # everyone else reads and writes as before
        assert not access.authenticate(f"Bearer {token}").scrape_only
    assert access.authenticate(f"Bearer {SCRAPE_TOKEN}x") is None
    assert not OPEN.scrape_only


def test_a_scrape_token_needs_a_protected_api_and_a_token_of_its_own():
    with pytest.raises(ValueError, match="guards nothing on an open control API"):
        Access(scrape_token=SCRAPE_TOKEN)
    with pytest.raises(ValueError, match="must differ from the operator's token"):
        Access(OPERATOR_TOKEN, scrape_token=OPERATOR_TOKEN)


def test_the_scrape_token_comes_from_a_file_named_by_an_option_or_the_environment(tmp_path, monkeypatch, caplog):
    token_file, scrape_file = tmp_path / "operator.token", tmp_path / "scrape.token"
    token_file.write_text(OPERATOR_TOKEN)
    token_file.chmod(0o600)
    scrape_file.write_text(SCRAPE_TOKEN + "\n")
    scrape_file.chmod(0o644)
    parser = switch_cli.configure(argparse.ArgumentParser())
    options = ["--token-file", str(token_file)]
    with caplog.at_level(logging.WARNING, logger="ina.control"):
        access = access_from_args(parser.parse_args([*options, "--scrape-token-file", str(scrape_file)]))
    assert access.authenticate(f"Bearer {SCRAPE_TOKEN}") is SCRAPER
    assert f"scrape token file {scrape_file} is readable by other users: chmod 600 it" in caplog.text
    monkeypatch.setenv("INA_SCRAPE_TOKEN_FILE", str(scrape_file))
    assert access_from_args(parser.parse_args(options)).authenticate(f"Bearer {SCRAPE_TOKEN}") is SCRAPER


def test_a_scraper_reaches_the_health_check_and_nothing_of_the_jobs(policy_file):
    with SwitchServer(SwitchConfig(pool=8, words=4), LOOPBACK, LOOPBACK,
                      access=Access(OPERATOR_TOKEN, Policy(policy_file), scrape_token=SCRAPE_TOKEN)) as server:  # fmt: skip
        scraper = ControlClient(*server.control_address, token=SCRAPE_TOKEN)
        assert scraper.health() == {"role": "switch", "ok": True}
        for attempt in (scraper.jobs, scraper.whoami, lambda: scraper.register(spec(3))):
            assert _refusal(attempt).status == 403
        assert server.jobs() == []


def test_the_control_modules_import_one_way():
    """auth -> policy -> credentials: the secrets' readers import none of the modules built on them."""
    folder = Path(__file__).parent.parent / "ina" / "control"

    def imported(name: str) -> set[str]:
        tree = ast.parse((folder / f"{name}.py").read_text())
        return {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}

    assert "ina.control.auth" not in imported("policy") and "ina.control.credentials" in imported("policy")
    assert not {m for m in imported("credentials") if m.startswith("ina")}
    assert {m for m in imported("tls") if m.startswith("ina")} == {"ina.control.credentials"}


@pytest.mark.parametrize("tenants, message", [
    ([{"name": "a", "token": "short"}], "at least 16 characters"),
    ([{"name": "a"}], "exactly one of 'token' and 'token_file'"),
    ([{"name": "operator", "token": "x" * 16}], "other than 'operator'"),
    ([{"name": "scraper", "token": "x" * 16}], "other than 'operator' and 'scraper'"),
    ([{"name": "a", "token": "x" * 16, "priority_cap": 256}], "priority_cap"),
    ([{"name": "a", "token": "x" * 16, "jobs": ["9-3"]}], "low end first"),
    ([{"name": "a", "token": "x" * 16}, {"name": "b", "token": "x" * 16}], "share a token"),
    ([{"name": "a", "token": "x" * 16, "quota": 3}], "unknown fields"),
])  # fmt: skip
def test_a_bad_policy_file_is_refused_at_start_with_what_to_fix(tmp_path, tenants, message):
    with pytest.raises(ValueError, match=message):
        Policy(write_policy(tmp_path, tenants))


def test_the_policy_reloads_when_its_file_changes_and_a_bad_edit_keeps_the_old_one(switch, policy_file, caplog):
    a = client(switch, "a")
    assert a.whoami() == {"tenant": "a", "operator": False, "priority_cap": 100, "slots": 8, "jobs": [[100, 199]], "slots_used": 0}
    rewrite(policy_file, [dict(TENANTS[0], priority_cap=50), TENANTS[1]])
    assert a.register(spec(100))["priority_cap"] == 50
    with caplog.at_level(logging.ERROR, logger="ina.control"):
        policy_file.write_text("{not json")
        rewrite(policy_file, "not a list")  # type: ignore[arg-type]
        assert a.whoami()["priority_cap"] == 50
    assert "not reloaded" in caplog.text
    rewrite(policy_file, [TENANTS[1]])  # tenant a removed: its token is no longer known
    with pytest.raises(ControlError) as refused:
        a.jobs()
    assert refused.value.status == 401


def test_a_tenant_cannot_deregister_reregister_or_replace_another_tenants_job(switch):
    a, b, operator = client(switch, "a"), client(switch, "b"), client(switch, "operator")
    answer = a.register(spec(100))
    before = registered(operator)
    assert [(j["job"], j["owner"], j["priority_cap"]) for j in before] == [(100, "a", 100)] and answer["priority_cap"] == 100
    for attempt, status in ((lambda: b.deregister(100), 403), (lambda: b.register(spec(100)), 403),
                            (lambda: a.register(spec(100)), 400), (lambda: a.register(spec(200)), 403)):  # fmt: skip
        with pytest.raises(ControlError) as refused:
            attempt()
        assert refused.value.status == status
        assert registered(operator) == before
    assert "may deregister only its own jobs" in str(_refusal(lambda: b.deregister(100)))
    counters = operator.counters()
    assert counters["control_forbidden"] == 4 and counters["control_malformed"] == 1
    b.register(spec(7))
    with pytest.raises(ControlError, match="belongs to another tenant"):
        a.deregister(7)
    a.deregister(100)  # its owner may
    operator.deregister(7)  # and the operator may deregister anyone's
    assert operator.jobs() == []


def _refusal(attempt) -> ControlError:
    with pytest.raises(ControlError) as refused:
        attempt()
    return refused.value


def test_no_job_gets_a_priority_above_its_tenants_cap_or_more_slots_than_its_quota(switch):
    a, operator = client(switch, "a"), client(switch, "operator")
    assert a.register(spec(100, window=4, priority_cap=255))["priority_cap"] == 100
    assert a.register(spec(101, window=2, priority_cap=30))["priority_cap"] == 30  # a lower cap stays
    assert switch.core.table.priority_cap[switch.core.table.index[[100, 101]]].tolist() == [100, 30]  # the data plane's caps
    error = _refusal(lambda: a.register(spec(102, window=4)))
    assert error.status == 403 and "has 2 of its 8 free" in str(error)
    assert a.whoami()["slots_used"] == 6
    a.register(spec(102, window=2))
    assert [j["job"] for j in operator.jobs()] == [100, 101, 102]
    assert operator.register(spec(5, window=32))["slot_base"] >= 0  # the operator has no cap or quota


def test_the_switch_data_plane_caps_the_priority_packets_carry(access):
    from switch_support import Rig, job_spec

    rig = Rig(pool=8, words=4)
    with acting_as(access.authenticate(f"Bearer {TOKENS['a']}")):
        rig.register(job_spec(150, workers=2, window=4, priority_cap=255))
    rig.send(rig.data(150, 0, 0, prio=255))
    assert rig.slot_state(150, 0)["prio"] == 100


def test_unauthenticated_malformed_and_oversized_requests_get_clear_errors_and_change_nothing(switch):
    operator = client(switch, "operator")
    operator.register(spec(3))
    before = registered(operator)
    address, body = switch.control_address, json.dumps(spec(4).to_json()).encode()
    cases = [
        ("POST", "/jobs", body, {}, 401),
        ("POST", "/jobs", body, bearer("wrong-token-0123456789"), 401),
        ("DELETE", "/jobs/3", None, {}, 401),
        ("GET", "/jobs", None, {"Authorization": f"Basic {OPERATOR_TOKEN}"}, 401),
        ("POST", "/jobs", b"{not json", bearer(OPERATOR_TOKEN), 400),
        ("POST", "/jobs", b'{"job": 4}', bearer(OPERATOR_TOKEN), 400),
        ("POST", "/jobs", b"[" * 5000 + b"]" * 5000, bearer(OPERATOR_TOKEN), 400),
        ("POST", "/jobs", b'{"job": 1e999, "workers": [], "window": 1}', bearer(OPERATOR_TOKEN), 400),
        ("POST", "/jobs", b" " * (MAX_BODY + 1), bearer(OPERATOR_TOKEN), 413),
        ("POST", "/jobs", body, bearer(OPERATOR_TOKEN) | {"Content-Length": "-5"}, 400),
        ("DELETE", "/jobs/x", None, bearer(OPERATOR_TOKEN), 400),
        ("DELETE", "/jobs/99999999999999999999", None, bearer(OPERATOR_TOKEN), 400),
        ("PUT", "/jobs/3", body, bearer(OPERATOR_TOKEN), 404),
    ]
    for method, path, data, headers, status in cases:
        code, answer = raw(address, method, path, data, headers)
        assert (code, bool(answer["error"])) == (status, True), (method, path, data[:30] if data else None, answer)
        assert registered(operator) == before
    counters = operator.counters()
    assert (counters["control_unauthorized"], counters["control_malformed"], counters["control_oversized"],
            counters["control_not_found"]) == (4, 7, 1, 1)  # fmt: skip
    _, answer = raw(address, "GET", "/jobs")
    assert "Authorization: Bearer" in answer["error"]


def test_refusals_are_logged_without_the_token(switch, caplog):
    with caplog.at_level(logging.INFO, logger="ina.control"):
        raw(switch.control_address, "GET", "/jobs", headers=bearer("a-guess-at-the-token-0123"))
        raw(switch.control_address, "DELETE", "/jobs/1", headers=bearer(TOKENS["a"]))  # not registered: 400
        raw(switch.control_address, "POST", "/jobs", b" " * (MAX_BODY + 1), headers=bearer(TOKENS["a"]))
    assert [r.message.split(":")[0].split()[-2:] for r in caplog.records] == [["refused", "(401)"], ["refused", "(400)"], ["refused", "(413)"]]
    assert "from 127.0.0.1" in caplog.text
    assert "a-guess-at-the-token" not in caplog.text and TOKENS["a"] not in caplog.text


def test_the_ps_enforces_the_same_policy(access):
    with PSServer(ParameterServer(words=4), LOOPBACK, LOOPBACK, access=access) as ps:
        a = ControlClient(*ps.control_address, token=TOKENS["a"])
        b = ControlClient(*ps.control_address, token=TOKENS["b"])
        assert a.register(spec(100))["priority_cap"] == 100
        assert _refusal(lambda: b.deregister(100)).status == 403
        assert _refusal(lambda: b.register(spec(150))).status == 403
        assert [(j["job"], j["owner"], j["priority_cap"]) for j in a.jobs()] == [(100, "a", 100)]
        assert _refusal(lambda: ControlClient(*ps.control_address, token="").jobs()).status == 401
        a.deregister(100)
        assert a.jobs() == []


def test_in_process_callers_are_the_open_operator_and_a_tenant_is_checked_by_the_table_itself(access):
    table = Jobs(16)
    table.add(spec(1, window=16))  # no control request: OPEN, as before any policy
    tenant_a = access.authenticate(f"Bearer {TOKENS['a']}")
    with acting_as(tenant_a), pytest.raises(Forbidden):
        table.remove(1)
    with acting_as(tenant_a):
        assert table.add(spec(120, window=8)).spec.priority_cap == 100
    with acting_as(Principal("b", False, access.authenticate(f"Bearer {TOKENS['b']}").tenant)), pytest.raises(Forbidden):
        table.remove(120)
    table.remove(120)


def test_the_workers_default_window_fits_the_tenants_free_slots():
    from ina.transport.udp import SwitchTransport
    from ina.transport.udp_setup import Deployment

    transport = SwitchTransport(switch="127.0.0.1:47100", ps="127.0.0.1:47101")
    deployment = Deployment(64, 128, ("127.0.0.1", 1), ("127.0.0.1", 2))
    assert transport._default_window(deployment) == 128  # the whole pool
    assert transport._default_window(Deployment(64, 4096, ("127.0.0.1", 1), ("127.0.0.1", 2))) == 1024  # at most 1024
    for free, window in ((None, 128), (100, 64), (12, 8), (8, 8), (0, 1)):  # a power of two: a static partition holds it
        assert transport._default_window(Deployment(64, 128, ("127.0.0.1", 1), ("127.0.0.1", 2), slots_free=free)) == window
