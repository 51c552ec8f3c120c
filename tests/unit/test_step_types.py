"""Every step type of the definition format has its handler in the runtime's table."""

from waypost.model.definitions import format as definition_format
from waypost.runtime.steps import STEP_TYPES


def test_every_step_type_but_the_ends_has_a_handler_and_no_other() -> None:
    ends = {"succeed", "fail"}  # the interpreter's own: they end a walk
    assert set(STEP_TYPES) == set(definition_format.STEP_TYPES) - ends
