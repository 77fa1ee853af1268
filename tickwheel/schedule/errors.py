"""The one error type of schedule semantics: bad input, named by the field it came from."""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar

E = TypeVar("E", bound=StrEnum)


class ScheduleError(ValueError):
    """Bad schedule input: `field` names the job-document field, `message` is one sentence.

    `field` uses the job document's spelling ("schedule", "timezone", "at", "dst.gap",
    "misfire.policy", …) so the registry can put it in a 422 body or a rejection reason as is.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message

    def __reduce__(self) -> tuple[type[ScheduleError], tuple[str, str]]:
        # ValueError pickles its args, which here is only the message; keep the field too.
        return (type(self), (self.field, self.message))


def parse_choice(choices: type[E], value: object, field: str) -> E:
    """The member of `choices` whose value is `value`, or ScheduleError(field) listing them."""
    for member in choices:
        if value == member.value:
            return member
    allowed = ", ".join(member.value for member in choices)
    raise ScheduleError(field, f"{field} must be one of {allowed}; got {value!r}.")
