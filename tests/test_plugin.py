"""A method in the user's own file (docs/writing-a-method.md): found by `method.module` or an entry point, run,
resumed and compared without editing pfedkit; the FedAvgM example checked against a hand computation."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import pfedkit
from pfedkit.cli import main
from pfedkit.config import dump_toml
from pfedkit.engine import local_update
from pfedkit.engine.simulation import simulate
from pfedkit.errors import ConfigError
from pfedkit.io import read_csv
from pfedkit.methods import METHODS
from pfedkit.registry import build_config, import_method_module
from tests.conftest import tiny_context, tiny_data
from tests.test_engine import COMPARED, synthetic_raw

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "methods" / "fedavgm.py"


def fedavgm_raw(**method) -> dict:
    return synthetic_raw(method={"name": "fedavgm", "module": str(EXAMPLE), **method}, train={"rounds": 4})


def make_fedavgm(**params):
    import_method_module(str(EXAMPLE))
    cls = METHODS["fedavgm"]
    return cls(cls.validate_params(params), tiny_context())


def test_fedavgm_two_server_steps_equal_a_hand_computation():
    beta, lr = 0.5, 0.7
    method = make_fedavgm(server_momentum=beta, server_lr=lr)
    server = method.init_server()
    w = {k: v.clone() for k, v in server.items() if not k.startswith("server_momentum.")}
    v = {k: torch.zeros_like(t) for k, t in w.items()}
    for round in range(2):
        replies = {}
        for cid, n in ((0, 3), (1, 5)):
            g = torch.Generator().manual_seed(10 * round + cid)
            replies[cid] = {k: t + torch.randn(t.shape, generator=g) for k, t in w.items()} | {"num_samples": n}
        average = {k: (3 * replies[0][k] + 5 * replies[1][k]) / 8 for k in w}
        v = {k: beta * v[k] + (w[k] - average[k]) for k in w}
        w = {k: w[k] - lr * v[k] for k in w}
        server = method.aggregate(server, replies, round)
        for k in w:
            assert torch.allclose(server[k], w[k], atol=1e-6) and torch.allclose(
                server["server_momentum." + k], v[k], atol=1e-6
            )
    payload = method.payload(server, 2, 0)
    assert not any(k.startswith("server_momentum.") for k in payload)  # the momentum never leaves the server


def test_fedavgm_without_momentum_is_fedavg_and_sends_what_fedavg_sends(tmp_path):
    simulate(build_config(fedavgm_raw(server_momentum=0.0, server_lr=1.0)), tmp_path / "m", progress=False)
    simulate(build_config(synthetic_raw(train={"rounds": 4})), tmp_path / "avg", progress=False)
    got, want = read_csv(tmp_path / "m" / "metrics.csv"), read_csv(tmp_path / "avg" / "metrics.csv")
    for a, b in zip(got, want):
        assert a["bytes_down"] == b["bytes_down"] and a["bytes_up"] == b["bytes_up"]
        assert abs(float(a["acc"]) - float(b["acc"])) <= 0.002  # w - (w - average): the average, to float rounding


def test_a_method_of_ones_own_runs_resumes_and_compares_from_the_command_line(tmp_path):
    config = tmp_path / "fedavgm.toml"
    config.write_text(dump_toml(fedavgm_raw()))
    runner = CliRunner()
    done = runner.invoke(
        main, ["run", str(config), "--out", str(tmp_path / "run"), "--quiet", "--set", "train.rounds=2"]
    )
    assert done.exit_code == 0, done.output
    assert f'module = "{EXAMPLE}"' in (tmp_path / "run" / "config.toml").read_text()  # recorded for resume
    done = runner.invoke(
        main, ["run", "--out", str(tmp_path / "run"), "--resume", "--set", "train.rounds=4", "--quiet"]
    )
    assert done.exit_code == 0, done.output
    simulate(build_config(fedavgm_raw()), tmp_path / "straight", progress=False)
    got, want = read_csv(tmp_path / "run" / "metrics.csv"), read_csv(tmp_path / "straight" / "metrics.csv")
    assert [[r[k] for k in COMPARED] for r in got] == [[r[k] for k in COMPARED] for r in want]
    done = runner.invoke(
        main,
        [
            "compare",
            str(config),
            "--methods",
            "fedavgm,fedavg",
            "--seeds",
            "1",
            "--out",
            str(tmp_path / "cmp"),
            "--quiet",
            "--set",
            "train.rounds=2",
        ],
    )
    assert done.exit_code == 0, done.output
    assert "fedavgm" in (tmp_path / "cmp" / "table.md").read_text()


def test_worker_processes_take_the_users_method_too(tmp_path):
    raw = fedavgm_raw()
    raw["run"]["workers"] = 2
    simulate(build_config(raw), tmp_path / "two", progress=False)
    simulate(build_config(fedavgm_raw()), tmp_path / "one", progress=False)
    assert read_csv(tmp_path / "two" / "metrics.csv") != [] and [
        r["acc"] for r in read_csv(tmp_path / "two" / "metrics.csv")
    ] == [r["acc"] for r in read_csv(tmp_path / "one" / "metrics.csv")]


def test_an_unknown_method_says_how_to_plug_one_in_and_a_bad_module_says_why():
    with pytest.raises(ConfigError, match=r"unknown method 'nosuch'.*method.module.*entry-point group"):
        build_config({"method": {"name": "nosuch"}})
    with pytest.raises(ConfigError, match="there is no such file"):
        build_config({"method": {"name": "nosuch", "module": "missing/file.py"}})
    with pytest.raises(ConfigError, match="cannot be imported"):
        build_config({"method": {"name": "nosuch", "module": "no_such_package.method"}})


def test_an_installed_entry_point_is_found(monkeypatch, tmp_path):
    from importlib.metadata import EntryPoint

    module = tmp_path / "entry_point_method.py"
    module.write_text(EXAMPLE.read_text().replace('name = "fedavgm"', 'name = "fedavgm-installed"'))
    monkeypatch.syspath_prepend(str(tmp_path))
    point = EntryPoint(name="fedavgm-installed", value="entry_point_method", group="pfedkit.methods")
    monkeypatch.setattr(
        "importlib.metadata.entry_points", lambda group=None: [point] if group == "pfedkit.methods" else []
    )
    config = build_config({"method": {"name": "fedavgm-installed"}})
    assert config.method.name == "fedavgm-installed" and "fedavgm-installed" in METHODS


def test_pfedkit_methods_lists_the_installed_packages_methods_and_names_one_that_fails(monkeypatch, tmp_path):
    from importlib.metadata import EntryPoint

    module = tmp_path / "listed_entry_point.py"
    module.write_text(EXAMPLE.read_text().replace('name = "fedavgm"', 'name = "fedavgm-listed"'))
    monkeypatch.syspath_prepend(str(tmp_path))
    points = [
        EntryPoint(name="fedavgm-listed", value="listed_entry_point", group="pfedkit.methods"),
        EntryPoint(name="broken", value="no_such_module_here", group="pfedkit.methods"),
    ]
    monkeypatch.setattr(
        "importlib.metadata.entry_points", lambda group=None: points if group == "pfedkit.methods" else []
    )
    result = CliRunner().invoke(main, ["methods"])
    assert result.exit_code == 0, result.output
    assert "fedavgm-listed (from listed_entry_point)" in result.output
    assert "'broken' (no_such_module_here) did not import" in result.output


def test_the_python_api_gives_the_numbers_of_the_command_line(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text(dump_toml(synthetic_raw(train={"rounds": 3})))
    done = CliRunner().invoke(main, ["run", str(config), "--out", str(tmp_path / "cli"), "--quiet"])
    assert done.exit_code == 0, done.output
    summary = pfedkit.run(config, out=tmp_path / "api", progress=False)
    cli, api = pfedkit.load_run(tmp_path / "cli"), pfedkit.load_run(tmp_path / "api")
    assert api.column("acc") == cli.column("acc") and summary["last_acc"] == cli.summary["last_acc"]
    again = pfedkit.run(synthetic_raw(), out=tmp_path / "dict", progress=False, train={"rounds": 3})
    assert again["last_acc"] == summary["last_acc"]  # a dict of sections, overridden section by section


def test_one_import_serves_a_method():
    from pfedkit import methods

    for name in (
        "Method",
        "register",
        "HyperParams",
        "PartSharing",
        "State",
        "ClientData",
        "LocalPlan",
        "Phase",
        "select",
        "weighted_mean",
        "variant",
    ):
        assert hasattr(methods, name), name


def test_the_examples_tiny_update_is_fedavgs(tmp_path):
    method = make_fedavgm()
    server, data = method.init_server(), tiny_data(n=8)
    reply, _ = local_update(method, method.payload(server, 0, 0), {}, data, 0)
    assert reply["num_samples"] == 8 and set(reply) - {"num_samples"} == set(method.payload(server, 0, 0))


def test_a_module_file_named_in_a_config_file_is_found_beside_that_file(tmp_path, monkeypatch):
    from pfedkit.registry import load_config

    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "beside.py").write_text(EXAMPLE.read_text().replace('name = "fedavgm"', 'name = "fedavgm-beside"'))
    (folder / "run.toml").write_text('[method]\nname = "fedavgm-beside"\nmodule = "beside.py"\n')
    monkeypatch.chdir(tmp_path)  # elsewhere: the path is read relative to the config file, not the working folder
    config = load_config(folder / "run.toml")
    assert config.method.module == str(folder / "beside.py")


PART_SHARING = sorted(
    n
    for n, cls in METHODS.items()
    if issubclass(cls, pfedkit.methods.PartSharing) and cls.broadcast is pfedkit.methods.PartSharing.broadcast
)


@pytest.mark.parametrize("name", PART_SHARING)
def test_a_part_sharing_method_still_sends_its_whole_server_state_after_a_round(name):
    """Before server_only and `sent`, PartSharing sent the whole server state: every method that broadcasts that way
    sends the same keys now (its bytes_down unchanged), at the start and after a round of aggregation."""
    from tests.conftest import make

    method = make(name, params={"expected_participations": 2} if name == "fedphp" else None)
    server = method.init_server()
    for round in range(2):
        payload = method.payload(server, round, 0)
        assert set(payload) == {k for k in server if not method.is_server_only(k)}, name
        replies = {
            cid: local_update(
                method,
                method.payload(server, round, cid),
                method.init_client(cid, tiny_data(cid)),
                tiny_data(cid),
                round,
            )[0]
            for cid in range(2)
        }
        server = method.aggregate(server, replies, round)


@pytest.mark.parametrize("name", ["fedavgm", "fedpac", "pgfedsplit"])
def test_server_only_keys_are_never_broadcast(name):
    """The one declared place (Method.server_only) holds FedAvgM's momentum, FedPAC's per-client combined heads and
    PGFedSplit's period schedule: none reaches a client, whatever broadcast returns."""
    from tests.conftest import make

    method = (
        make_fedavgm() if name == "fedavgm" else make(name, params={"period_init": 1} if name == "pgfedsplit" else None)
    )
    server = method.init_server()
    replies = {
        cid: local_update(
            method, method.payload(server, 0, cid), method.init_client(cid, tiny_data(cid)), tiny_data(cid), 0
        )[0]
        for cid in range(2)
    }
    server = method.aggregate(server, replies, 0)
    kept = [k for k in server if method.is_server_only(k)]
    assert kept, f"{name} holds no server-only state to test"
    for cid in range(2):
        assert not any(method.is_server_only(k) for k in method.payload(server, 1, cid))
    leaky = type(method).broadcast  # a broadcast that returns everything is still filtered
    try:
        type(method).broadcast = lambda self, server, round, cid: dict(server)
        assert not set(kept) & set(method.payload(server, 1, 0))
    finally:
        type(method).broadcast = leaky


def test_a_method_of_ones_own_is_tuned_by_its_declared_range(tmp_path):
    config = tmp_path / "fedavgm.toml"
    config.write_text(dump_toml(fedavgm_raw()))
    done = CliRunner().invoke(
        main,
        ["tune", str(config), "--trials", "2", "--seeds", "", "--out", str(tmp_path / "tune"), "--quiet"]
        + ["--set", "train.rounds=2"],
    )
    assert done.exit_code == 0, done.output
    assert "server_momentum" in done.output and (tmp_path / "tune" / "best.toml").exists()


def test_a_variant_declared_in_ones_own_file_is_that_files_and_pickles_by_name(tmp_path):
    import pickle

    from pfedkit.engine.workers import method_files
    from pfedkit.registry import method_source

    file = tmp_path / "myprox.py"
    file.write_text(
        "from pfedkit.methods import variant\n"
        "from pfedkit.methods.fedprox import FedProx\n\n"
        'variant(FedProx, "test-myprox", "FedProx with a stronger pull", mu=0.5)\n'
    )
    try:
        config = build_config(synthetic_raw(method={"name": "test-myprox", "module": str(file)}))
        cls = METHODS["test-myprox"]
        method = cls(cls.validate_params({}), tiny_context())
        # its code is the user's file, as a method of one's own: a changed file is a changed run
        assert method_source(config).startswith("sha256:") and method_files(method) == [str(file.resolve())]
        copy = pickle.loads(pickle.dumps(method))  # as a spawned worker (a GPU's pool) receives it
        assert type(copy) is cls and copy.params.mu == 0.5
    finally:
        METHODS.pop("test-myprox", None)
