"""`pfedkit tune`: a method's hyper-parameters searched with Optuna (TPE sampler, median pruning on the per-round
curve), every trial scored on a validation split carved from each client's training data (eval.validation), never on
the test split; the best config written as a TOML file `pfedkit run` takes, then re-run on the test split.

The study lives in <out>/study.db (SQLite), so an interrupted tune resumes: a trial cut off mid-run is tried again
with the same values, and its run folder (named by those values) continues from its last checkpoint."""

from __future__ import annotations

import hashlib
import json
import math
import threading
from pathlib import Path
from typing import Any, Optional, Sequence

from filelock import FileLock, Timeout
from tqdm import tqdm

from pfedkit.config import PLACEMENT_KEYS, Config, dump_toml, flat, read_toml
from pfedkit.engine.divergence import Diverged
from pfedkit.engine.together import run_together
from pfedkit.errors import ConfigError, PfedkitError
from pfedkit.experiments import run_experiment
from pfedkit.experiments.pipeline import run_configs, together_batches
from pfedkit.io import atomic_write_csv, atomic_write_text, output_folder
from pfedkit.methods.base import search_space
from pfedkit.registry import build_config, method_class, method_source
from pfedkit.reports.tables import mean_of_last

STUDY = "pfedkit"


def optuna_module():
    try:
        import optuna
    except ImportError:
        raise ConfigError('pfedkit tune needs Optuna: pip install -e ".[tune]" (or pip install optuna)') from None
    # a trial that raises (a full disk) is pfedkit's to report in one line; Optuna's warning adds a traceback
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    return optuna


def searched_space(method: str, names: Sequence[str] = (), module: Any = None) -> dict[str, dict[str, Any]]:
    """The ranges to search: the method's declared ranges, or the `names` among them."""
    space = search_space(method_class(method, module).Params)
    if not space:
        declared = sorted(m for m, cls in _methods().items() if search_space(cls.Params))
        raise ConfigError(
            f"method {method!r} declares no search range for its hyper-parameters; methods that do: "
            f"{', '.join(declared)} (a range is declared beside the default: methods.base.searched)"
        )
    unknown = [n for n in names if n not in space]
    if unknown:
        raise ConfigError(
            f"--params {', '.join(unknown)}: {method} declares a search range only for {', '.join(space)}"
        )
    return {n: space[n] for n in names} if names else space


def _methods() -> dict[str, Any]:
    from pfedkit.methods import METHODS

    return METHODS


def defaults_of(method: str, names: Sequence[str], module: Any = None) -> dict[str, Any]:
    defaults = method_class(method, module).Params.model_fields
    return {n: defaults[n].default for n in names}


def values_key(values: dict[str, Any]) -> str:
    """A trial's run folder name: the same values (a retried trial) resume the same run."""
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:12]


def with_values(config: Config, values: dict[str, Any], **sections: dict[str, Any]) -> Config:
    """`config` with these method hyper-parameter values and section changes, validated again."""
    raw = config.to_dict()
    raw["method"] = {**raw["method"], **values}
    for section, changes in sections.items():
        raw[section] = {**raw.get(section, {}), **changes}
    return build_config(raw)


class Tuner:
    """One tuning study in `out`: `config` (its method is the one tuned) searched over `space`, `trials` trials
    finished (complete, pruned or diverged) in all, each scored by its mean validation accuracy over the last `last_k`
    evaluated rounds. `batch` trials are drawn at a time and run together: on the cohort path, those that differ only
    in the method's packable hyper-parameters train as one stacked computation (run.together)."""

    def __init__(
        self,
        config: Config,
        out: Path,
        *,
        trials: int,
        validation: float = 0.2,
        params: Sequence[str] = (),
        last_k: int = 5,
        progress: bool = True,
        batch: int = 1,
    ):
        if trials < 1:
            raise ConfigError(f"--trials {trials}: ask for at least one trial")
        if batch < 1:
            raise ConfigError(f"--batch {batch}: run at least one trial at a time")
        if not 0 < validation < 1:
            raise ConfigError(
                f"--validation {validation}: the validation share of each client's training data is "
                "between 0 and 1, e.g. 0.2"
            )
        self.optuna = optuna_module()
        self.config, self.out, self.trials, self.last_k, self.progress = config, Path(out), trials, last_k, progress
        self.validation, self.batch = validation, batch
        self.space = searched_space(config.method.name, params, config.method.module)
        where = set(PLACEMENT_KEYS)  # where the data and workers are may change between sittings
        self.setup = {
            "method": config.method.name,
            "source": method_source(config),  # the method's code: trials of other code would not compare
            "space": self.space,
            "validation": validation,
            "last_k": last_k,
            "config": {k: v for k, v in flat(config.to_dict()).items() if k not in where and v is not None},
        }

    # -- the study ------------------------------------------------------------------------------------------------
    def check_setup(self) -> None:
        """A tune resumes only with the setup it began with (the scores would not compare otherwise)."""
        saved = self.out / "tune.toml"
        if saved.exists():
            old = read_toml(saved)
            source = self.setup["source"]
            if old.get("source", source) != source:  # a tune begun before sources were recorded: not compared
                raise ConfigError(
                    f"the method's code changed since the tune in {self.out} began ({old['source']} -> {source}): "
                    "its finished trials ran the old code, so their scores would not compare with new ones; tune "
                    "into another --out, or put the old code back to resume"
                )
            old.setdefault("source", source)
            if json.loads(json.dumps(old)) != json.loads(json.dumps(self.setup, default=str)):
                raise ConfigError(
                    f"{self.out} holds a tune of another setup (method, ranges, validation share, "
                    "last-k or config differ); resume with the same arguments or pass another --out"
                )
        else:
            output_folder(self.out)
            atomic_write_text(saved, dump_toml(json.loads(json.dumps(self.setup, default=str))))

    def study(self):
        optuna = self.optuna
        rounds = self.config.train.rounds
        study = optuna.create_study(
            study_name=STUDY,
            storage=f"sqlite:///{self.out / 'study.db'}",
            load_if_exists=True,
            direction="maximize",
            sampler=optuna.samplers.TPESampler(seed=self.config.run.seed),
            pruner=batch_pruner(optuna)(
                optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=max(1, rounds // 4))
            ),
        )
        if not study.trials:  # the method's own defaults are trial 0: a tuned value has to beat them on validation
            study.enqueue_trial(
                defaults_of(self.config.method.name, list(self.space), self.config.method.module),
                user_attrs={"defaults": True},
            )
        for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            # this process holds the folder's lock, so a running trial is one an interruption cut off: try it again
            study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
            study.enqueue_trial(trial.params, user_attrs={**trial.user_attrs, "retry_of": trial.number})
        return study

    def sampler_for(self, study):
        """The sampler of the next trial, seeded by how many trials were drawn before it, not counting those an
        interruption cut off (each is retried with its own values): a killed and rerun tune draws what an
        uninterrupted one draws, and a resumed sampler never repeats the first trials' values."""
        retried = {t.user_attrs["retry_of"] for t in study.get_trials(deepcopy=False) if "retry_of" in t.user_attrs}
        return self.optuna.samplers.TPESampler(
            seed=self.config.run.seed + len(study.trials) - len(retried),
            constant_liar=self.batch > 1,  # a batch's later draws keep away from its earlier, still running ones
        )

    def next_batch(self, study) -> int:
        """How many trials to draw now: an interrupted batch's retries alone first (so the batches after them are
        drawn as an uninterrupted tune draws them), else `batch`, never past `trials`."""
        states = self.optuna.trial.TrialState
        retries = [t for t in study.get_trials(deepcopy=False, states=(states.WAITING,)) if "retry_of" in t.user_attrs]
        return min(len(retries) or self.batch, self.trials - self.finished(study))

    def finished(self, study) -> int:
        states = self.optuna.trial.TrialState
        return sum(
            t.state in (states.COMPLETE, states.PRUNED) or "diverged" in t.user_attrs
            for t in study.get_trials(deepcopy=False)
        )

    # -- one trial ------------------------------------------------------------------------------------------------
    def suggest(self, trial) -> dict[str, Any]:
        values = {}
        for name, spec in self.space.items():
            if spec["integer"]:
                values[name] = trial.suggest_int(name, int(spec["low"]), int(spec["high"]), log=spec["log"])
            else:
                values[name] = trial.suggest_float(name, spec["low"], spec["high"], log=spec["log"])
        return values

    def trial_config(self, values: dict[str, Any]) -> Config:
        """A trial: the config with these values, evaluated on the validation split (the test split is not loaded)."""
        return with_values(self.config, values, eval={"validation": self.validation})

    def run_batch(self, study, trials: list) -> None:
        """The asked trials as runs, each told its score: those that may train as one cohort do (`together_batches`:
        on the cohort path, differing only in packable hyper-parameters), the others one after another. A trial that
        diverged is failed with the reason; an error fails its trial and is raised once the batch is told; an
        interruption (Ctrl-C) leaves the unfinished trials running, to be tried again with their values on resume."""
        by_folder: dict[Path, list] = {}  # trials drawing equal values (an integer range) share one run
        configs: dict[Path, Config] = {}
        first = min(t.number for t in trials)
        for trial in trials:
            if "batch_start" not in trial.user_attrs:  # a retry keeps its first try's: judged as that one was
                trial.set_user_attr("batch_start", first)
            values = self.suggest(trial)
            run_dir = self.out / "trials" / f"trial-{values_key(values)}"
            trial.set_user_attr("run_dir", str(run_dir.relative_to(self.out)))
            by_folder.setdefault(run_dir, []).append(trial)
            configs[run_dir] = self.trial_config(values)
        lock = threading.Lock()  # the runs of a pack report from threads of their own

        def start(run_dir: Path, config: Config, member: Any = None) -> dict[str, Any]:
            first = by_folder[run_dir][0]

            def report(row: dict[str, Any]) -> None:
                if row.get("acc") is None:
                    return
                with lock:
                    for trial in by_folder[run_dir]:
                        trial.report(row["acc"], row["round"])
                    pruned = first.should_prune()
                if pruned:
                    raise self.optuna.TrialPruned(f"round {row['round']}: below the median of earlier trials")

            return run_experiment(
                config,
                run_dir,
                resume=(run_dir / "config.toml").exists(),
                progress=False,
                observers=[report],
                together=member,
            )

        outcomes: dict[Path, Any] = {}
        for pack in together_batches(configs):
            if len(pack) > 1:
                outcomes.update(run_together(pack, start))
                continue
            [(run_dir, config)] = pack.items()
            try:
                outcomes[run_dir] = start(run_dir, config)
            except BaseException as err:  # told below, with the others of the batch
                outcomes[run_dir] = err
        self.tell(study, by_folder, outcomes)

    def tell(self, study, by_folder: dict[Path, list], outcomes: dict[Path, Any]) -> None:
        states = self.optuna.trial.TrialState
        error = interruption = None
        for run_dir, outcome in outcomes.items():
            for trial in by_folder[run_dir]:
                if isinstance(outcome, self.optuna.TrialPruned):
                    study.tell(trial, state=states.PRUNED)
                elif isinstance(outcome, Diverged):
                    trial.set_user_attr("diverged", str(outcome).splitlines()[0])
                    study.tell(trial, state=states.FAIL)  # counted as finished here (`finished`)
                elif isinstance(outcome, Exception):
                    study.tell(trial, state=states.FAIL)
                    error = error or outcome
                elif isinstance(outcome, BaseException):
                    interruption = interruption or outcome  # left running: retried on resume (`study`)
                else:
                    study.tell(trial, mean_of_last(run_dir, self.last_k))
        if interruption is not None:
            raise interruption
        if error is not None:
            raise error

    # -- the whole tune -------------------------------------------------------------------------------------------
    def run(self, test_seeds: Sequence[int] = ()) -> dict[str, Any]:
        output_folder(self.out)
        lock = FileLock(str(self.out / "tune.lock"))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            raise ConfigError(
                f"{self.out} is being tuned by another process; wait for it or pass another --out"
            ) from None
        try:
            self.check_setup()
            study = self.study()
            bar = tqdm(
                total=self.trials,
                initial=min(self.finished(study), self.trials),
                unit="trial",
                desc=f"tune {self.config.method.name}",
                disable=not self.progress,
                dynamic_ncols=True,
            )
            while self.finished(study) < self.trials:
                study.sampler = self.sampler_for(study)
                self.run_batch(study, [study.ask() for _ in range(self.next_batch(study))])
                bar.update(min(self.finished(study), self.trials) - bar.n)
                best = _best(study)
                if best is not None:
                    bar.set_postfix_str(f"best validation acc {best.value:.4f}")
            bar.close()
            return self.report(study, test_seeds)
        finally:
            lock.release()

    def report(self, study, test_seeds: Sequence[int]) -> dict[str, Any]:
        best = _best(study)
        if best is None:
            raise ConfigError(
                f"no trial of {self.out} finished with a score (every one diverged); narrow the ranges "
                "or lower train.lr"
            )
        tuned = {n: best.params[n] for n in self.space}
        defaults = defaults_of(self.config.method.name, list(self.space), self.config.method.module)
        best_config = with_values(self.config, tuned)
        atomic_write_text(
            self.out / "best.toml",
            f"# pfedkit tune: {self.config.method.name}'s best of "
            f"{len(study.trials)} trials on a {self.validation:g} validation split (seed "
            f"{self.config.run.seed}), mean of the last {self.last_k} evaluations "
            f"{best.value:.4f}\n" + dump_toml(best_config.to_dict()),
        )
        rows = trial_rows(study, self.space)
        atomic_write_csv(self.out / "trials.csv", rows, list(rows[0]))
        plot_search(rows, self.space, self.out / "search.png", f"tune {self.config.method.name}")
        cfg = self.config
        tuned_on = (
            f"{cfg.data.dataset}{'' if cfg.data.fraction == 1 else f' ({cfg.data.fraction:.0%} of it)'}, "
            f"{cfg.partition.clients} clients, "
            f"{cfg.partition.scheme}, {cfg.train.rounds} rounds, seed {cfg.run.seed}: a {self.validation:g} "
            f"validation split, {len(rows)} trials"
        )
        result = {
            "method": self.config.method.name,
            "tuned": tuned,
            "defaults": defaults,
            "tuned_on": tuned_on,
            "validation_tuned": best.value,
            "validation_defaults": _defaults_score(study),
            "trials": len(rows),
            "test": {},
        }
        for label, values in (("tuned", tuned), ("defaults", defaults)):
            if label == "defaults" and values == tuned:  # the defaults won: their test runs are the tuned ones
                result["test"]["defaults"] = result["test"].get("tuned", [])
                continue
            runs = {
                self.out / "test" / label / f"seed{seed}": with_values(self.config, values, run={"seed": seed})
                for seed in test_seeds
            }  # on the cohort path, the seeds train as one cohort (run.together)
            summaries = run_configs(runs, resume=True, progress=self.progress)
            for run_dir in runs:
                if "diverged" in summaries[run_dir]:  # as a test run alone would: the table has no number for it
                    raise PfedkitError(f"{run_dir}: {summaries[run_dir]['diverged']['message']}")
                result["test"].setdefault(label, []).append(mean_of_last(run_dir, self.last_k))
        atomic_write_text(self.out / "tune.md", tune_table(result, self.last_k, self.validation))
        (self.out / "tune.json").write_text(json.dumps(result, indent=2))
        return result


def batch_pruner(optuna):
    """A pruner class judging a trial only against the trials complete before its batch was drawn (its user attribute
    `batch_start`): in an uninterrupted tune no batch-mate is complete while it runs, and a trial retried after an
    interruption, alone, is judged as its first try was, not against batch-mates that finished meanwhile."""

    class Before:
        def __init__(self, study, start: int):
            self.study, self.start, self.direction = study, start, study.direction

        def get_trials(self, deepcopy: bool = True, states=None) -> list:
            return [t for t in self.study.get_trials(deepcopy=deepcopy, states=states) if t.number < self.start]

    class BatchPruner(optuna.pruners.BasePruner):
        def __init__(self, inner):
            self.inner = inner

        def prune(self, study, trial) -> bool:
            start = trial.user_attrs.get("batch_start")
            return self.inner.prune(study if start is None else Before(study, start), trial)

    return BatchPruner


def scored(trial) -> bool:
    """A trial that ran to its end: Optuna also gives a pruned trial a value (its accuracy when it was stopped, a few
    rounds in), which is no score."""
    return trial.state.name == "COMPLETE" and trial.value is not None and not math.isnan(trial.value)


def _best(study):
    return max((t for t in study.get_trials(deepcopy=False) if scored(t)), key=lambda t: t.value, default=None)


def _defaults_score(study) -> Optional[float]:
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get("defaults") and scored(t):
            return t.value
    return None


def trial_rows(study, space: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for t in study.get_trials(deepcopy=False):
        if "retry_of" in t.user_attrs and t.state.name == "RUNNING":
            continue
        state = "diverged" if "diverged" in t.user_attrs else t.state.name.lower()
        last = max(t.intermediate_values, default=None)
        rows.append(
            {
                "trial": t.number,
                "state": state,
                **{n: t.params.get(n) for n in space},
                "validation_acc": t.value if scored(t) else None,
                "acc_when_stopped": t.intermediate_values.get(last) if t.state.name == "PRUNED" else None,
                "rounds_run": last,
                "defaults": bool(t.user_attrs.get("defaults")),
                "run_dir": t.user_attrs.get("run_dir", ""),
            }
        )
    return rows


def plot_search(rows: list[dict[str, Any]], space: dict[str, Any], path: Path, title: str) -> Path:
    """The search: every trial's score by trial number with the best so far, and each hyper-parameter against the
    score (pruned trials are left out: their accuracy when stopped is no score)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    complete = [{**r, "validation_acc": 100 * r["validation_acc"]} for r in rows if r["validation_acc"] is not None]
    fig, axes = plt.subplots(1, 1 + len(space), figsize=(4.2 * (1 + len(space)), 3.4), squeeze=False)
    ax = axes[0][0]
    ax.scatter([r["trial"] for r in complete], [r["validation_acc"] for r in complete], s=18, color="tab:blue")
    best, line = -math.inf, []
    for r in complete:
        best = max(best, r["validation_acc"])
        line.append((r["trial"], best))
    if line:
        ax.step(*zip(*line), where="post", color="tab:orange", label="best so far")
        ax.legend(fontsize=8)
    ax.set_xlabel("trial")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # trials are whole numbers
    ax.set_ylabel("validation accuracy, % (mean of last k)")  # in % as every table
    for ax, (name, spec) in zip(axes[0][1:], space.items()):
        ax.scatter([r[name] for r in complete], [r["validation_acc"] for r in complete], s=18, color="tab:green")
        ax.set_xscale("log" if spec["log"] else "linear")
        ax.set_xlabel(name)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def tune_table(result: dict[str, Any], last_k: int, validation: float) -> str:
    def acc(value: Optional[float]) -> str:
        return "-" if value is None else f"{100 * value:.2f}"

    def test(label: str) -> str:
        values = result["test"].get(label, [])
        if not values:
            return "not run"
        mean = sum(values) / len(values)
        return f"{100 * mean:.2f} ({len(values)} seed{'s' if len(values) > 1 else ''})"

    names = list(result["tuned"])
    lines = [
        f"# pfedkit tune: {result['method']}",
        "",
        f"{result['trials']} trials; validation: a {validation:g} share of each client's training data; accuracy is "
        f"the mean of the last {last_k} evaluations; test: the best values re-run on the test split, trained on "
        "all of each client's training data.",
        "",
        "| | " + " | ".join(names) + " | validation acc | test acc |",
        "|---|" + "---|" * (len(names) + 2),
    ]
    for label, key in (("defaults", "validation_defaults"), ("tuned", "validation_tuned")):
        values = result[label]
        lines.append(
            f"| {label} | "
            + " | ".join(f"{values[n]:.4g}" if isinstance(values[n], float) else str(values[n]) for n in names)
            + f" | {acc(result[key])} | {test(label)} |"
        )
    return "\n".join(lines) + "\n"
