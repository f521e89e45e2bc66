"""A researcher's own method, tracked like a built-in (issue 59): its code and settings on record, one module
resolution everywhere, clear messages where a file or a method goes wrong."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch

from pfedkit.config import read_toml
from pfedkit.engine import local_update
from pfedkit.errors import ConfigError, PfedkitError
from pfedkit.experiments import run_experiment
from pfedkit.registry import build_config, import_method_module, load_config
from pfedkit.testing import make, tiny_data

METHOD = """
from pydantic import Field

from pfedkit.methods import HyperParams, PartSharing, register, weighted_mean


class Params(HyperParams):
    server_lr: float = Field({server_lr}, gt=0, description="the server's step toward the average; our choice")


@register
class {cls}(PartSharing):
    name = "{name}"
    summary = "FedAvg with a server step"
    Params = Params

    def aggregate(self, server, replies, round):
        average = weighted_mean(replies, server.keys())
        lr = self.params.server_lr
        return {{k: v + lr * (average[k] - v) if v.is_floating_point() else average[k] for k, v in server.items()}}
"""


def write_method(
    folder: Path, file: str = "mine.py", name: str = "my-avg", server_lr: float = 1.0, cls="MyAvg"
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file
    path.write_text(textwrap.dedent(METHOD.format(name=name, server_lr=server_lr, cls=cls)))
    return path


def write_config(folder: Path, module: str = "mine.py", name: str = "my-avg", rounds: int = 2, **method) -> Path:
    extra = "".join(f"{k} = {v!r}\n" for k, v in method.items())
    path = folder / "run.toml"
    path.write_text(
        textwrap.dedent(
            f"""
            [data]
            dataset = "synthetic"
            options = {{samples = 600, test_samples = 200}}
            [partition]
            clients = 4
            beta = 0.5
            [model]
            name = "mlp"
            options = {{hidden = 16}}
            [method]
            name = "{name}"
            module = "{module}"
            """
        )
        + extra
        + f"[train]\nrounds = {rounds}\nbatch_size = 16\nlr = 0.05\n[run]\nworkers = 1\ncheckpoint_every = 1\n"
    )
    return path


def elsewhere(monkeypatch, tmp_path: Path) -> Path:
    """A working folder with a decoy method file of the same name: a path taken from the working folder would find
    it (and its other number), one taken beside the config would not."""
    other = tmp_path / "elsewhere"
    write_method(other, server_lr=0.25, cls="Decoy", name="my-avg")
    monkeypatch.chdir(other)
    return other


# ---- 1. a run's identity holds its method's code and settings ----
def test_config_toml_records_every_hyper_parameter_and_the_methods_code(tmp_path):
    write_method(tmp_path / "cfg")
    run_experiment(load_config(write_config(tmp_path / "cfg")), tmp_path / "run", progress=False)
    saved = read_toml(tmp_path / "run" / "config.toml")["method"]
    assert saved["server_lr"] == 1.0  # the default, recorded: a default changed later cannot change the run
    assert saved["source"].startswith("sha256:")
    fedprox = build_config(
        {
            "data": {"dataset": "synthetic"},
            "model": {"name": "mlp"},
            "method": {"name": "fedprox"},
            "train": {"rounds": 1},
        }
    )
    run_experiment(fedprox, tmp_path / "prox", progress=False)
    prox = read_toml(tmp_path / "prox" / "config.toml")["method"]
    assert prox["mu"] == fedprox.method_params().get("mu", 0.01) and prox["source"].startswith("pfedkit ")


def test_a_method_file_edited_between_run_and_resume_is_refused_and_can_be_accepted_on_record(tmp_path):
    path = write_method(tmp_path / "cfg")
    config = write_config(tmp_path / "cfg")
    run_experiment(load_config(config), tmp_path / "run", progress=False)
    write_method(tmp_path / "cfg", server_lr=0.3)  # its default and its code change
    longer = load_config(tmp_path / "run" / "config.toml", ["train.rounds=4"])
    with pytest.raises(PfedkitError, match="method's code changed.*--accept-code-change"):
        run_experiment(longer, tmp_path / "run", resume=True, progress=False)
    assert len(read_toml(tmp_path / "run" / "config.toml")) and not (tmp_path / "run" / "code_changes.json").exists()
    run_experiment(longer, tmp_path / "run", resume=True, progress=False, accept_code_change=True)
    record = json.loads((tmp_path / "run" / "code_changes.json").read_text())
    assert len(record) == 1 and record[0]["from"] != record[0]["to"]
    assert read_toml(tmp_path / "run" / "config.toml")["method"]["server_lr"] == 1.0  # the run's own value, kept
    assert path.exists()


def test_compare_resume_refuses_a_changed_method_file_naming_it(tmp_path):
    from pfedkit.experiments.compare import run_comparison

    write_method(tmp_path / "cfg")
    config = write_config(tmp_path / "cfg")
    run_comparison(str(config), ["my-avg"], [0], tmp_path / "cmp", [], progress=False)
    (tmp_path / "cmp" / "my-avg" / "seed0" / "summary.json").unlink()  # an unfinished cell, to be resumed
    write_method(tmp_path / "cfg", server_lr=0.3)
    with pytest.raises(ConfigError, match="method.source"):
        run_comparison(str(config), ["my-avg"], [0], tmp_path / "cmp", [], resume=True, progress=False)


def test_a_suite_reuses_a_finished_run_of_the_same_method_code_only(tmp_path):
    """reproduce's reuse of an identical finished run compares the method's code as resume does: after an edit the
    old run is no copy of the new one."""
    from pfedkit.experiments.pipeline import reuse_identical_runs

    mine = write_method(tmp_path / "cfg")
    config = write_config(tmp_path / "cfg")
    run_experiment(load_config(config), tmp_path / "old" / "col" / "my-avg" / "seed0", progress=False)
    cell = tmp_path / "new" / "col" / "my-avg" / "seed0"
    made_with = mine.read_text()
    mine.write_text(made_with + "\n# edited\n")  # the same settings, other code
    assert reuse_identical_runs({cell: load_config(config)}, tmp_path / "old", log=lambda _: None) == []
    mine.write_text(made_with)  # the code the run was made with
    assert reuse_identical_runs({cell: load_config(config)}, tmp_path / "old", log=lambda _: None) == [cell]


def test_a_tune_resumed_after_its_method_file_changed_is_refused_naming_the_code(tmp_path):
    pytest.importorskip("optuna")
    from pfedkit.tune import Tuner

    mine = write_method(tmp_path / "cfg")
    mine.write_text(
        mine.read_text()
        .replace("from pfedkit.methods import", "from pfedkit.methods import searched,")
        .replace("gt=0, description", "gt=0, json_schema_extra=searched(0.1, 1.0), description")
    )
    config = write_config(tmp_path / "cfg", rounds=1)
    Tuner(load_config(config), tmp_path / "tune", trials=1, validation=0.25, progress=False).run(test_seeds=())
    mine.write_text(mine.read_text() + "\n# edited\n")
    with pytest.raises(ConfigError, match="method's code changed since the tune"):
        Tuner(load_config(config), tmp_path / "tune", trials=2, validation=0.25, progress=False).run(test_seeds=())


# ---- 2, 3, 6, 12. one module resolution everywhere, kept in every row, several modules ----
def test_the_api_finds_the_module_beside_the_config_from_another_folder(tmp_path, monkeypatch):
    import pfedkit

    write_method(tmp_path / "cfg")
    config = write_config(tmp_path / "cfg")
    elsewhere(monkeypatch, tmp_path)
    pfedkit.run(config, tmp_path / "api", progress=False)
    assert read_toml(tmp_path / "api" / "config.toml")["method"]["module"] == str((tmp_path / "cfg" / "mine.py"))


def test_compare_keeps_the_module_in_every_row_and_resumes_whatever_the_order(tmp_path, monkeypatch):
    from pfedkit.experiments.compare import run_comparison

    write_method(tmp_path / "cfg")
    config = write_config(tmp_path / "cfg")
    elsewhere(monkeypatch, tmp_path)
    run_comparison(str(config), ["fedavg", "my-avg"], [0], tmp_path / "cmp", [], progress=False)
    for row in ("fedavg", "my-avg"):
        assert read_toml(tmp_path / "cmp" / row / "seed0" / "config.toml")["method"]["module"].endswith("cfg/mine.py")
    table, _ = run_comparison(str(config), ["fedavg", "my-avg"], [0], tmp_path / "cmp", [], resume=True)
    assert "my-avg" in table


def test_compare_of_a_method_the_config_does_not_name_finds_it_through_set_module(tmp_path, monkeypatch):
    from pfedkit.experiments.compare import run_comparison

    write_method(tmp_path / "cfg")
    config = write_config(tmp_path / "cfg", module="mine.py", name="fedavg")
    table, _ = run_comparison(str(config), ["my-avg"], [0], tmp_path / "cmp", [], progress=False)
    assert "my-avg" in table


def test_tune_finds_the_module_beside_the_config_from_another_folder(tmp_path, monkeypatch):
    pytest.importorskip("optuna")
    from click.testing import CliRunner

    from pfedkit.cli import main

    mine = write_method(tmp_path / "cfg")  # with a search range; the decoy has none, so tune would refuse it
    mine.write_text(
        mine.read_text()
        .replace("from pfedkit.methods import", "from pfedkit.methods import searched,")
        .replace("gt=0, description", "gt=0, json_schema_extra=searched(0.1, 1.0), description")
    )
    config = write_config(tmp_path / "cfg")
    elsewhere(monkeypatch, tmp_path)
    result = CliRunner().invoke(
        main,
        ["tune", str(config), "--method", "my-avg", "--out", str(tmp_path / "tune"), "--trials", "1", "--quiet"]
        + ["--params", "server_lr", "--set", "train.rounds=1"],
    )
    assert result.exit_code == 0, result.output
    assert read_toml(tmp_path / "tune" / "best.toml")["method"]["module"] == str(mine.resolve())


def test_two_modules_in_one_config_each_method_found(tmp_path):
    write_method(tmp_path / "cfg", "one.py", name="my-one", cls="One")
    write_method(tmp_path / "cfg", "two.py", name="my-two", cls="Two")
    path = write_config(tmp_path / "cfg", module="one.py", name="my-two")
    path.write_text(path.read_text().replace('module = "one.py"', 'module = ["one.py", "two.py"]'))
    config = load_config(path)
    assert [Path(m).name for m in config.method.module] == ["one.py", "two.py"]
    assert run_experiment(config, tmp_path / "run", progress=False)["method"] == "my-two"


# ---- two files of one name, a file named like a standard module, a module that fails ----
def test_two_method_files_of_one_name_in_one_process_each_run_their_own_code(tmp_path):
    import pfedkit

    write_method(tmp_path / "a", name="my-avg", server_lr=1.0)
    write_method(tmp_path / "b", name="my-avg-b", server_lr=1.0, cls="B")
    a = pfedkit.run(write_config(tmp_path / "a"), tmp_path / "ra", progress=False)
    b = pfedkit.run(write_config(tmp_path / "b", name="my-avg-b"), tmp_path / "rb", progress=False)
    assert a["method"] == "my-avg" and b["method"] == "my-avg-b"


def test_a_method_file_named_like_a_standard_module_is_imported_as_itself(tmp_path):
    import importlib.machinery
    import sys

    write_method(tmp_path / "cfg", "json.py", name="my-json", cls="J")
    config = load_config(write_config(tmp_path / "cfg", module="json.py", name="my-json"))
    assert config.method.name == "my-json"
    assert json.dumps({"still": "the standard json"})
    # nor does its folder shadow the standard module for an import still to come: a spawned worker (a GPU's pool)
    # imports json afresh from this sys.path (with the folder first, it died importing the user's file)
    folder = (tmp_path / "cfg").resolve()
    assert str(folder) in sys.path
    found = importlib.machinery.PathFinder.find_spec("json", sys.path)
    assert found is not None and Path(found.origin).resolve().parent != folder


def test_a_module_with_a_syntax_error_or_an_error_at_import_is_a_clear_message(tmp_path):
    (tmp_path / "broken.py").write_text("def f(:\n    pass\n")
    with pytest.raises(ConfigError, match=r"syntax error \(.*broken.py, line 1\)"):
        import_method_module(str(tmp_path / "broken.py"))
    (tmp_path / "raising.py").write_text("x = 1\nraise ValueError('no GPU here')\n")
    with pytest.raises(ConfigError, match=r"raised ValueError while it was imported \(.*raising.py, line 2\): no GPU"):
        import_method_module(str(tmp_path / "raising.py"))


def test_a_method_named_like_a_built_in_is_a_clear_message(tmp_path):
    write_method(tmp_path / "cfg", name="fedavg", cls="Mine")
    with pytest.raises(PfedkitError, match="method name 'fedavg' .* is taken by pfedkit's built-in .*another name"):
        import_method_module(str(tmp_path / "cfg" / "mine.py"))


# ---- 4. the path each client took, on record ----
def test_a_method_written_as_code_on_the_cohort_path_says_it_trained_one_client_at_a_time(tmp_path):
    raw = {
        "data": {"dataset": "synthetic"},
        "model": {"name": "mlp"},
        "method": {"name": "fedamp"},
        "train": {"rounds": 1},
    }
    summary = run_experiment(build_config({**raw, "run": {"cohort": "on", "workers": 1}}), tmp_path, progress=False)
    assert summary["training"]["paths"] == {"one at a time (the method's training is written as code)": 20}


# ---- 5, 7. what a method declares is checked ----
def test_a_server_only_entry_naming_no_key_is_refused_when_the_method_first_runs(tmp_path, monkeypatch):
    from pfedkit.methods import METHODS

    write_method(tmp_path / "cfg")
    config = load_config(write_config(tmp_path / "cfg"))
    monkeypatch.setattr(METHODS["my-avg"], "server_only", ("body",))  # "body." meant: a prefix needs its dot
    with pytest.raises(PfedkitError, match=r"server_only entry 'body' names no key .* \(e.g. 'body.'\)"):
        run_experiment(config, tmp_path / "run", progress=False)


def test_a_reply_without_num_samples_is_a_clear_message():
    from pfedkit.methods.base import weighted_mean

    with pytest.raises(PfedkitError, match="client 3's reply has no 'num_samples'"):
        weighted_mean({3: {"w": torch.ones(2)}}, ["w"])


# ---- 9. the run's setting on the method's context ----
def test_a_method_reads_the_number_of_clients_rounds_and_participation_from_its_context(tmp_path):
    from pfedkit.data.federated import build_federated
    from pfedkit.registry import build_method

    raw = {"data": {"dataset": "synthetic"}, "partition": {"clients": 6}, "train": {"rounds": 7, "join_ratio": 0.5}}
    config = build_config(raw)
    fed = build_federated(config)
    setting = build_method(config, fed.input_shape, fed.num_classes).ctx.setting
    assert (setting.clients, setting.rounds, setting.join_ratio, setting.sampled) == (6, 7, 0.5, 3)


# ---- 11. the testing helpers ----
def test_the_testing_helpers_build_a_method_and_run_its_update():
    method = make("fedavg", lr=0.1)
    data = tiny_data(n=8)
    reply, _ = local_update(method, method.payload(method.init_server(), 0, 0), method.init_client(0, data), data, 0)
    assert reply["num_samples"] == 8


# ---- the guide's worked example of a phase with its own loss (examples/methods/bodyprox.py) ----
BODYPROX = Path(__file__).resolve().parents[1] / "examples" / "methods" / "bodyprox.py"


def test_the_guides_phase_with_its_own_loss_steps_as_computed_by_hand():
    """bodyprox's update on the tiny model equals SGD written out: cross-entropy plus weight/2 times the squared
    distance of the body to the received body, batch by batch in the seeded order; `moved` is the distance the
    parameters went."""
    import torch.nn.functional as F

    from pfedkit.methods.plan import parameters_and_buffers

    import_method_module(str(BODYPROX))
    method = make("bodyprox", params={"weight": 0.5}, lr=0.1, batch_size=4)
    data = tiny_data(n=12)
    payload = method.payload(method.init_server(), 0, 0)
    reply, state = local_update(method, payload, method.init_client(0, data), data, 0)
    params, _ = parameters_and_buffers(method.model, payload)
    start = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    w = {k: v.detach().clone() for k, v in start.items()}
    method.forget_draws()  # the same order again, on purpose
    for idx in method.batches(data, 0, "train"):
        w = {k: v.requires_grad_(True) for k, v in w.items()}
        z = torch.relu(data.train_x[idx] @ w["body.0.weight"].T + w["body.0.bias"])
        logits = z @ w["head.weight"].T + w["head.bias"]
        pull = sum((w[k] - params[k]).pow(2).sum() for k in w if k.startswith("body."))
        loss = F.cross_entropy(logits, data.train_y[idx]) + 0.5 / 2 * pull
        grads = torch.autograd.grad(loss, list(w.values()))
        w = {k: (v - 0.1 * g).detach() for (k, v), g in zip(w.items(), grads)}
    for key, value in w.items():
        assert torch.allclose(reply[key], value, atol=1e-6), key
    moved = torch.sqrt(sum((w[k] - params[k]).pow(2).sum() for k in w))
    assert float(state["moved"]) == pytest.approx(float(moved), abs=1e-6)


def test_check_cohort_passes_the_guides_example_and_names_what_differs():
    from pfedkit.engine import cohort as cohort_module
    from pfedkit.testing import check_cohort, tiny_federation

    import_method_module(str(BODYPROX))
    method = make("bodyprox", params={"weight": 0.5})
    check_cohort(method, tiny_federation(clients=3))  # a cohort, replayed steps, equals one client at a time

    real = cohort_module.Cohort.train

    def off_by_a_bit(self, tasks):
        for cid, (reply, state, after) in real(self, tasks):
            yield cid, ({**reply, "head.bias": reply["head.bias"] + 1e-3}, state, after)

    cohort_module.Cohort.train = off_by_a_bit
    try:
        with pytest.raises(AssertionError, match=r"client 0 reply\['head.bias'\]"):
            check_cohort(method, tiny_federation(clients=3))
    finally:
        cohort_module.Cohort.train = real
