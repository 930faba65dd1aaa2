"""Safe YAML for config files and --set values, guarded against documents that are valid but hostile.

PyYAML's SafeLoader builds no objects but builds any amount of data, and so needs four more guards here:

- aliases: a 400-byte "billion laughs" (nine levels of nine aliases) is a 387-million-item list once
  expanded. PyYAML shares the aliased nodes, so composing it is cheap, but anything that walks the value
  (a type check's message, a comparison) expands it. After composing, and before any value is built, the
  document's size with every alias expanded is counted (each node once, memoized) and refused past
  ``MAX_VALUES``; an alias inside the very value it names (a cycle) is refused too.
- nesting: ``[[[[...]]]]`` 100,000 deep overflows libyaml's recursive composer (a segfault, not an
  exception). The events still come from libyaml's parser (it keeps an explicit stack); the composing is
  PyYAML's Python composer, which counts the depth and stops at ``MAX_DEPTH``.
- duplicate keys: YAML forbids them but PyYAML keeps the last silently, so ``n_layer: 2 ... n_layer: 3``
  counted a 3-layer model without a word; refused here, naming the key and both lines. Keys brought in
  by a merge (``<<: *base``) may still be overridden, as YAML's merge means.
- long integers: past 4,300 digits ``int()`` raises ValueError (not a YAML error); refused in one line.

And one extension: floats without a dot such as ``1e-5`` (YAML 1.1, and so PyYAML, reads them as strings).
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.composer import Composer, ComposerError
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from tfcalc import reading
from tfcalc.errors import InputError, shown, shown_path

MAX_VALUES = 10_000  # a config holds ~40 values; a list of aliases in a comment field, a few hundred
MAX_DEPTH = 64
_MERGE = "tag:yaml.org,2002:merge"

try:  # libyaml's parser when PyYAML was built with it (fast), PyYAML's own otherwise
    from yaml._yaml import CParser as _Events  # type: ignore[import-not-found]

    def _init_events(loader: Any, stream: str) -> None:
        _Events.__init__(loader, stream)
except ImportError:  # pragma: no cover - PyYAML without libyaml
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Events(Reader, Scanner, Parser):  # type: ignore[no-redef]
        pass

    def _init_events(loader: Any, stream: str) -> None:
        Reader.__init__(loader, stream)
        Scanner.__init__(loader)
        Parser.__init__(loader)


class Loader(Composer, _Events, SafeConstructor, Resolver):  # Composer first: its compose_* win over libyaml's
    """SafeLoader with the guards of the module docstring."""

    def __init__(self, stream: str):
        _init_events(self, stream)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        Composer.__init__(self)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep",
                                    self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_node(self) -> Node | None:
        node = super().get_single_node()
        if node is not None:
            _check_expansion(node)
        return node

    def construct_mapping(self, node: Node, deep: bool = False) -> dict:
        if isinstance(node, MappingNode):
            _check_duplicates(node)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: ScalarNode) -> int:
        try:
            return super().construct_yaml_int(node)
        except ValueError:  # past Python's 4,300-digit limit for int()
            digits = sum(c.isdigit() for c in node.value)
            raise ConstructorError(None, None, f"an integer of {digits:,} digits is too long to read",
                                   node.start_mark) from None


Loader.add_constructor("tag:yaml.org,2002:int", Loader.construct_yaml_int)
Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)?(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_expansion(root: Node) -> None:
    """ComposerError when the document, aliases expanded, holds more than MAX_VALUES nodes, or when an
    alias refers to a value that contains it. Each node is sized once (memoized), without recursion."""
    size: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            open_.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in _children(node))
            if size[key] > MAX_VALUES:
                raise ComposerError(None, None, f"its aliases expand to more than {MAX_VALUES:,} values; "
                                    "tfcalc refuses such documents (a 'billion laughs')", node.start_mark)
            continue
        if key in size:
            continue
        if key in open_:
            raise ComposerError(None, None, "an alias refers to a value that contains it", node.start_mark)
        open_.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in size)


def _check_duplicates(node: MappingNode) -> None:
    seen: dict[tuple[str, str], int] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE:
            continue
        key = (key_node.tag, key_node.value)
        line = key_node.start_mark.line + 1
        if key in seen:
            raise ConstructorError(None, None, f"the key {shown(key_node.value)} is given twice (lines {seen[key]} "
                                   f"and {line}); give each field once", key_node.start_mark)
        seen[key] = line


def load(text: str) -> Any:
    """The YAML document in text; yaml.YAMLError (a ComposerError, ConstructorError, ...) when refused."""
    try:
        return yaml.load(text, Loader=Loader)
    except yaml.MarkedYAMLError as e:
        # PyYAML 6.0.4's scanner caps flow nesting itself (at 1,000, "exceeded maximum nesting depth") and,
        # scanning ahead of the composer, can stop before MAX_DEPTH is counted above. Past its cap the
        # document is past ours too, so the refusal reads the same on every PyYAML release.
        if "maximum nesting depth" not in (e.problem or ""):
            raise
        raise ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep", e.problem_mark) from None


def read_mapping(path) -> dict[str, Any]:
    """A YAML file of field: value pairs, read the guarded way every file a user names is: a regular file
    of bounded size (tfcalc.reading.read_text), then load() above. InputError, one line, otherwise: used
    for config files (tfcalc.presets) and device files (tfcalc.devices) alike."""
    text = reading.read_text(path, "YAML")
    try:
        data = load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(f"{shown_path(path)}: not valid YAML{where}: {problem}") from None
    if data is None:
        raise InputError(f"{shown_path(path)}: the file is empty; expected a mapping of field: value")
    if not isinstance(data, dict):
        raise InputError(f"{shown_path(path)}: expected a mapping of field: value, got a {type(data).__name__}")
    return data
