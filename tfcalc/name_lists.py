"""Flags that take a list of names -- ``--overlap tp,pp``, ``--offload optimizer,activations`` -- read by one
rule, so that each takes what the other takes and refuses what the other refuses:

- the flag may be repeated, and each value may hold several names separated by commas;
- names are matched without regard to case or surrounding spaces;
- ``none``, alone, or nothing at all (an empty value) means no name;
- refused, one line each: an empty item among names ("tp,,pp", "tp,"), ``none`` beside a name, a name
  not among the choices, a name given twice.
The names come back in the choices' order (the list is a set: ``pp,tp`` is ``tp,pp``)."""

from __future__ import annotations

from typing import Sequence, Union

from tfcalc.errors import InputError, shown


def name_list(flag: str, values: Union[None, str, Sequence[str]], choices: tuple[str, ...]) -> tuple[str, ...]:
    """The names of ``values`` (one text or a repeated flag's texts), by the module docstring's rule."""
    texts = [values] if isinstance(values, str) else list(values or [])
    items = [item.strip().lower() for text in texts for item in text.split(",")]
    if not texts or (len(texts) == 1 and not texts[0].strip()):
        return ()  # no value, or one empty value: nothing
    listed = " or ".join([", ".join(choices[:-1]), choices[-1]]) if len(choices) > 1 else choices[0]
    if "" in items:
        raise InputError(f"{flag} has an empty item in {shown(','.join(texts))}: give {listed}, separated by "
                         "single commas")
    if "none" in items:
        if len(items) > 1:
            raise InputError(f"{flag} none means no {listed}: give it alone; got {shown(','.join(texts))}")
        return ()
    bad = [item for item in items if item not in choices]
    if bad:
        raise InputError(f"{flag} takes {', '.join(choices)} or both (comma-separated), or none; got {shown(bad[0])}")
    if len(set(items)) != len(items):
        raise InputError(f"{flag} names each of {', '.join(choices)} once; got {shown(','.join(texts))}")
    return tuple(c for c in choices if c in items)

