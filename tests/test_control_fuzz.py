"""Fuzzed control requests against a live control API with a policy in force: the server always
answers with a clear status, never an internal error, and a refused request changes nothing."""

from __future__ import annotations

import json
import string

import pytest
from control_support import OPERATOR_TOKEN, TOKENS, raw, spec, write_policy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ina.control.auth import Access
from ina.control.policy import Policy, acting_as
from ina.switch import SwitchConfig
from ina.switch.server import SwitchServer

LOOPBACK = ("127.0.0.1", 0)
ANSWERS = {200, 400, 401, 403, 404, 413}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
registration = spec(120).to_json()
fields = st.sampled_from(sorted(registration) + ["slot_base", "owner", ""])
mutated = st.builds(lambda changes, drop: {k: v for k, v in (registration | changes).items() if k not in drop},
                    st.dictionaries(fields, json_values, max_size=3), st.sets(fields, max_size=2))  # fmt: skip
bodies = st.one_of(
    st.none(),
    st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode()),
    mutated.map(lambda v: json.dumps(v).encode()),
)
paths = st.one_of(
    st.sampled_from(["/health", "/config", "/whoami", "/jobs", "/jobs/", "/counters", "/jobs/120", "/jobs/7", "/jobs/-1", "//jobs"]),
    st.text(string.ascii_letters + string.digits + "/-_.%?&=~", max_size=40).map(lambda s: "/" + s),
)
known = st.sampled_from([OPERATOR_TOKEN, *TOKENS.values()]).map(lambda t: f"Bearer {t}")
tokens = st.one_of(known, known, known, st.none(), st.text(string.printable.strip(), max_size=40))  # mostly known
methods = st.sampled_from(["GET", "POST", "DELETE", "PUT", "PATCH"])
requests = st.one_of(  # mostly near-misses of the requests that change state, and some of anything
    st.tuples(st.just("POST"), st.just("/jobs"), mutated.map(lambda v: json.dumps(v).encode()), tokens),
    st.tuples(st.just("DELETE"), st.sampled_from(["/jobs/7", "/jobs/120", "/jobs/200", "/jobs/07"]), st.none(), tokens),
    st.tuples(methods, paths, bodies, tokens),
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    access = Access(OPERATOR_TOKEN, Policy(write_policy(tmp_path_factory.mktemp("policy"))))
    with SwitchServer(SwitchConfig(pool=16, words=4), LOOPBACK, LOOPBACK, access=access) as s:
        s.tenant_b = access.authenticate(f"Bearer {TOKENS['b']}")
        s.control.read_timeout = 1.0  # a body shorter than its Content-Length is refused before the client gives up
        yield s


def baseline(server) -> None:
    """Only tenant b's job 7 registered, whatever the last request did."""
    for entry in server.core.jobs():
        server.core.deregister(entry["job"])
    with acting_as(server.tenant_b):
        server.core.register(spec(7))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(request=requests, length=st.one_of(st.none(), st.sampled_from(["", "abc", "-1", "99999999999", "1"])))
def test_fuzzed_requests_get_clear_answers_and_refused_ones_change_nothing(server, request, length):
    method, path, body, authorization = request
    baseline(server)
    headers = {} if authorization is None else {"Authorization": authorization}
    if length is not None:
        headers["Content-Length"] = length
    before = server.core.jobs()
    try:
        status, answer = raw(server.control_address, method, path, body, headers)
    except ConnectionError:  # the server may close a connection whose body it will not read
        status, answer = None, None
    if status is not None:
        assert status in ANSWERS, (status, answer)
        assert status == 200 or isinstance(answer.get("error"), str)
    if status != 200:
        assert server.core.jobs() == before
    assert raw(server.control_address, "GET", "/health", headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"})[0] == 200


def test_the_fuzzed_server_counted_its_refusals(server):
    counters = raw(server.control_address, "GET", "/counters", headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"})[1]
    assert counters["control_errors"] == 0
