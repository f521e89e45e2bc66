"""docs/configuration.md's configuration block claims to list every key with its default: held to the schema here."""

import re
from pathlib import Path

from pfedkit.config import Config, tomllib

README = Path(__file__).resolve().parent.parent / "README.md"
CONFIG_DOC = README.parent / "docs" / "configuration.md"  # the configuration block, moved out of the README
COMMENTED_KEY = re.compile(r"^# ([a-z_]+) = ")  # a key shown commented out: one whose default is None (unset)


def config_doc_block() -> str:
    text = CONFIG_DOC.read_text(encoding="utf-8")
    after = text.split("Every key, with its default.", 1)[1]
    return after.split("```toml\n", 1)[1].split("```", 1)[0]


def test_config_doc_block_lists_every_key_with_its_default():
    block = config_doc_block()
    shown = tomllib.loads(block)
    commented: dict[str, set[str]] = {}
    section = None
    for line in block.splitlines():
        if line.startswith("["):
            section = line.split("]")[0].strip("[")
        elif match := COMMENTED_KEY.match(line):
            commented.setdefault(section, set()).add(match.group(1))
    defaults = Config().model_dump()
    assert set(shown) == set(defaults), "docs/configuration.md's sections differ from the schema's"
    for name, fields in defaults.items():
        listed = set(shown[name]) | commented.get(name, set())
        assert listed == set(fields), (
            f"[{name}]: configuration.md lacks {set(fields) - listed}, has extra {listed - set(fields)}"
        )
        for key, value in shown[name].items():
            assert value == fields[key], (
                f"[{name}] {key}: configuration.md says {value!r}, the default is {fields[key]!r}"
            )
        for key in commented.get(name, set()):
            assert fields[key] is None, (
                f"[{name}] {key} is commented out in configuration.md but has a default {fields[key]!r}"
            )


REPO = README.parent
METHODS_DOC = REPO / "docs" / "methods.md"
# "docs/methods.md 3.4-d", "methods.md 2.4", "methods.md §1.3": a section (x or x.y) or an item label (x.y-z)
CITATION = re.compile(r"methods\.md`?[ ,]+§?(\d+(?:\.\d+)?(?:-[a-z]+)?)(?![\w.-]*\d)")


def methods_doc_labels() -> set[str]:
    text = METHODS_DOC.read_text(encoding="utf-8")
    headings = re.findall(r"^#+ (\d+(?:\.\d+)?)[ .]", text, flags=re.M)
    items = re.findall(r"\*\*(\d+\.\d+-[a-z]+)\*\*", text)
    return set(headings) | set(items)


def test_every_citation_of_docs_methods_names_a_label_it_has():
    labels = methods_doc_labels()
    assert {"2.5-a", "3.4-d", "3.3", "2"} <= labels  # the label forms are read at all
    sources = [*REPO.glob("pfedkit/**/*.py"), *REPO.glob("benchmarks/*.py"), README, *REPO.glob("docs/*.md")]
    missing = []
    for path in sources:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for label in CITATION.findall(line):
                if label not in labels:
                    missing.append(f"{path.relative_to(REPO)}:{number}: {label}")
    assert not missing, "citations of docs/methods.md labels it lacks:\n" + "\n".join(missing)


def test_every_shipped_config_loads_against_todays_schema():
    """The configs the README and the docs point users to (examples/, benchmarks/configs/) validate: keys, values,
    names of data sets, models and methods, and each method's hyper-parameters."""
    from pfedkit.registry import load_config

    shipped = sorted([*REPO.glob("examples/*.toml"), *REPO.glob("benchmarks/configs/*.toml")])
    assert len(shipped) >= 10
    for path in shipped:
        load_config(path, [])
