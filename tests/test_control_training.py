"""Tokens end to end: `ina switch` and `ina ps` options, workers that read INA_TOKEN_FILE, and DDP
training through the switch and the PS under a tenant's caps and quota, exactly as without them."""

from __future__ import annotations

import argparse
import os

import pytest
from control_support import OPERATOR_TOKEN, TOKENS, write_policy
from test_transport_udp import UDP_TRANSPORTS, _losses

from ina.control.auth import Access
from ina.control.http import ControlClient, ControlError
from ina.control.policy import Policy
from ina.launch import LocalAggregators, run_workers
from ina.ps import cli as ps_cli
from ina.switch import cli as switch_cli
from ina.transport.errors import TransportError
from ina.transport.udp_setup import Aggregator


def _token_file(tmp_path, token: str):
    path = tmp_path / "worker.token"
    path.write_text(token + "\n")
    path.chmod(0o600)
    return path


def _losses_with_token(rank: int, workers: int, options: dict, token_file: str) -> dict:
    """`_losses` in a worker whose environment names its token file, as a torchrun worker's would."""
    os.environ["INA_TOKEN_FILE"] = token_file  # set here: a worker process may start before the test sets anything
    return _losses(rank, workers, options)


def test_ddp_training_with_a_tenants_token_ends_at_the_collective_loss(tmp_path):
    access = Access(OPERATOR_TOKEN, Policy(write_policy(tmp_path)))  # tenant a: cap 100, 8 slots, jobs 100-199
    token_file = str(_token_file(tmp_path, TOKENS["a"]))
    with LocalAggregators(access=access) as aggregators:
        options = {name: aggregators.options(name) for name in UDP_TRANSPORTS}
        results = run_workers(_losses_with_token, 4, options, token_file, timeout=90)
        losses = {name: loss for name, (loss, *_) in results[0].items()}
        assert losses["switch"] == losses["collective"] and losses["ps"] == losses["collective"], losses
        counters = aggregators.switch.counters()
        assert counters["unregistered"] == 0 and counters["completed"] > 0
        assert aggregators.switch.jobs() == [] and aggregators.ps.jobs() == []  # rank 0 deregistered its own jobs
        refused = aggregators.switch.control.counters()
        assert refused["control_unauthorized"] == refused["control_forbidden"] == 0


def test_a_worker_with_a_wrong_token_is_told_what_to_set(tmp_path, monkeypatch):
    with LocalAggregators(access=Access(OPERATOR_TOKEN)) as aggregators:
        control = aggregators.options("switch")["switch_control"]
        monkeypatch.setenv("INA_TOKEN", "not-the-operator-token")
        with pytest.raises(TransportError, match="refused this job's token.*INA_TOKEN_FILE"):
            Aggregator.configure("switch", control=control).describe()
        monkeypatch.setenv("INA_TOKEN_FILE", str(_token_file(tmp_path, OPERATOR_TOKEN)))  # the file wins over INA_TOKEN
        assert Aggregator.configure("switch", control=control).describe()["caller"]["operator"]


@pytest.mark.parametrize("cli", [switch_cli, ps_cli])
def test_the_servers_refuse_an_open_control_api_beyond_loopback_unless_allowed(cli, tmp_path, capsys):
    listen = ["--listen", "127.0.0.1:0", "--control", "0.0.0.0:0"]
    assert cli.main(listen) == 2
    assert "refusing to serve an unauthenticated control API beyond loopback" in capsys.readouterr().err
    for extra in (["--allow-unauthenticated"], ["--token-file", str(_token_file(tmp_path, OPERATOR_TOKEN))]):
        cli.build(cli.configure(argparse.ArgumentParser()).parse_args(listen + extra)).close()


@pytest.mark.parametrize("cli", [switch_cli, ps_cli])
def test_the_servers_take_the_operator_token_and_tenants_from_files(cli, tmp_path):
    options = ["--listen", "127.0.0.1:0", "--control", "127.0.0.1:0", "--tenants", str(write_policy(tmp_path)),
               "--token-file", str(_token_file(tmp_path, OPERATOR_TOKEN))]  # fmt: skip
    server = cli.build(cli.configure(argparse.ArgumentParser()).parse_args(options))
    try:
        address = server.control_address
        assert ControlClient(*address, token=TOKENS["b"]).whoami()["tenant"] == "b"
        assert ControlClient(*address, token=OPERATOR_TOKEN).whoami()["operator"]
        with pytest.raises(ControlError) as refused:
            ControlClient(*address, token="").health()
        assert refused.value.status == 401
    finally:
        server.close()
    with pytest.raises(ValueError, match="policy file"):
        cli.build(cli.configure(argparse.ArgumentParser()).parse_args(options[:4] + ["--tenants", str(tmp_path / "missing.json")]))
