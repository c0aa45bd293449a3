"""docs/configuration.md is what commands/configuration_doc.py writes from the code."""

import dataclasses

from commands.configuration_doc import DOC, allowed, render
from common.settings import Settings


def test_the_configuration_reference_is_up_to_date() -> None:
    assert DOC.read_text() == render(), "run: python -m commands.configuration_doc"


def test_every_key_says_what_it_means_and_what_it_takes() -> None:
    for f in dataclasses.fields(Settings):
        assert f.metadata["doc"].strip(), f"{f.name} has no doc"
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    assert allowed(fields["test_fraction"]) == "number in (0, 1)"
    assert allowed(fields["num_clients"]) == "integer >= 1"
    assert "`clip-screen`" in allowed(fields["robust"])  # the table's names
    assert allowed(fields["model"]).endswith("or `package.module:factory`")
