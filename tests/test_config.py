"""A broken config fails before training, naming the key and the valid choices."""

from __future__ import annotations

import pytest

from pfedkit.config import apply_overrides, dump_toml, tomllib
from pfedkit.errors import ConfigError
from pfedkit.registry import build_config, load_config


def write(tmp_path, text):
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def test_defaults_validate():
    cfg = build_config({})
    assert cfg.method.name == "fedavg" and cfg.train.batch_size == 10 and cfg.eval.protocol == "pfllib"


def test_unknown_key_names_key_and_valid_keys(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, "[train]\nlrr = 0.1\n"))
    assert "train.lrr" in str(err.value) and "lr" in str(err.value) and "batch_size" in str(err.value)


def test_unknown_section(tmp_path):
    with pytest.raises(ConfigError, match="unknown key `trian`"):
        load_config(write(tmp_path, "[trian]\nlr = 0.1\n"))


def test_bad_value_names_key(tmp_path):
    with pytest.raises(ConfigError, match="train.lr"):
        load_config(write(tmp_path, "[train]\nlr = -1\n"))
    with pytest.raises(ConfigError, match="partition.scheme"):
        load_config(write(tmp_path, '[partition]\nscheme = "dirichlett"\n'))


def test_unknown_method_lists_choices(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, '[method]\nname = "fedavgg"\n'))
    assert "fedavgg" in str(err.value) and "fedper" in str(err.value) and "fedrep" in str(err.value)


def test_unknown_method_hyperparameter_lists_the_methods_own(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, '[method]\nname = "fedrep"\nhead_epoch = 3\n'))
    assert "method.head_epoch" in str(err.value) and "head_epochs" in str(err.value)


def test_unknown_dataset_and_model(tmp_path):
    with pytest.raises(ConfigError, match="mnist"):
        load_config(write(tmp_path, '[data]\ndataset = "mnsit"\n'))
    with pytest.raises(ConfigError, match="fedavgcnn"):
        load_config(write(tmp_path, '[model]\nname = "cnn9"\n'))


def test_overrides_parse_toml_literals_and_strings():
    raw = apply_overrides(
        {}, ["train.lr=0.01", "method.name=fedrep", "method.head_epochs=3", "partition.balanced=false"]
    )
    cfg = build_config(raw)
    assert cfg.train.lr == 0.01 and cfg.method.name == "fedrep" and cfg.method_params() == {"head_epochs": 3}
    assert cfg.partition.balanced is False  # "false" is false (PFLlib's type=bool made it true)


def test_override_errors():
    with pytest.raises(ConfigError, match="section.key=value"):
        apply_overrides({}, ["train.lr"])
    with pytest.raises(ConfigError, match="must start with a section"):
        apply_overrides({}, ["lr=0.1"])
    for typo in ("model.options.widths=[8,16,32", "model.options={stem = 'cifar'", 'data.name="cifar10'):
        with pytest.raises(ConfigError, match="is not a TOML value"):  # a typo in a list, table or string, named
            apply_overrides({}, [typo])
    assert apply_overrides({}, ["data.name=cifar10"])["data"]["name"] == "cifar10"  # a bare word stays a string


def test_missing_file_and_bad_toml(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "[train\n"))


def test_dump_round_trips():
    cfg = build_config({"method": {"name": "fedrep", "head_epochs": 4}, "data": {"options": {"size": 16}}})
    again = build_config(tomllib.loads(dump_toml(cfg.to_dict())))
    assert again == cfg


def test_a_default_stated_or_left_out_is_the_same_run_and_another_value_is_not():
    from pfedkit.registry import build_config, run_differences

    base = {"data": {"dataset": "digits"}, "method": {"name": "fedrep"}}
    stated = {"data": {"dataset": "digits"}, "method": {"name": "fedrep", "head_epochs": 10}}  # FedRep's default
    other = {"data": {"dataset": "digits"}, "method": {"name": "fedrep", "head_epochs": 1}}
    assert run_differences(build_config(base), build_config(stated)) == []
    assert run_differences(build_config(base), build_config(other)) == ["method.head_epochs: 10 -> 1"]
