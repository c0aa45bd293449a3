"""docs/configuration.md is what commands/configuration_doc.py writes from the code."""

from commands.configuration_doc import DOC, allowed, render, sections
from common.settings import Settings


def test_the_configuration_reference_is_up_to_date() -> None:
    assert DOC.read_text() == render(), "run: python -m commands.configuration_doc"


def test_every_key_says_what_it_means_and_what_it_takes() -> None:
    fields = {
        name: info for _, section in sections() for name, info in section.model_fields.items()
    }
    assert len(fields) == len(Settings.keys())
    doc = render()
    for name, info in fields.items():
        assert (info.description or "").strip(), f"{name} has no description"
        assert f"`{name.replace('_', '-')}`" in doc
    assert allowed("test_fraction", fields["test_fraction"]) == "number in (0, 1)"
    assert allowed("num_clients", fields["num_clients"]) == "integer >= 1"
    assert allowed("timing", fields["timing"]) == "`modelled`, `measured`"
    assert "`clip-screen`" in allowed("robust", fields["robust"])  # the table's names
    assert allowed("model", fields["model"]).endswith("or `package.module:factory`")
