"""YAML for the matrix and gpus.yaml: the safe subset, and strict where PyYAML is silent. Torch-free.

- A key written twice in one mapping is refused (``DuplicateKey``, with both lines): PyYAML
  keeps the last value, so a study written twice under one name lost the first. Keys a merge
  (``<<``) brings in may be overridden, as YAML means.
- A document whose aliases expand beyond ``MAX_NODES`` values is refused (``TooBig``, with the
  key under which it grows and the limit): a 1.2 KB anchor bomb is cheap to load (aliases are
  shared) but not to validate (jsonschema walks and compares every expanded value).
- A document nested deeper than ``MAX_DEPTH`` levels is refused (``TooDeep``, with the key under
  which it goes deep): walking it (here, in jsonschema, in ``json.dumps``) recurses once a level,
  and 5,000 levels end in a RecursionError.
"""
from __future__ import annotations

import yaml

_BASE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, where built: the same rules, faster
MAX_NODES = 100_000   # values after alias expansion; the default matrix has a few thousand
MAX_DEPTH = 100      # levels of nesting; the default matrix has 6
MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKey(yaml.YAMLError):
    def __init__(self, key, line: int, first: int):
        super().__init__(f"duplicate key {key!r} at line {line} (first at line {first}): YAML would keep only "
                         "the last value")
        self.key, self.line, self.first = key, line, first


class TooBig(yaml.YAMLError):
    def __init__(self, where: str, nodes: int):
        super().__init__(f"expands to more than {MAX_NODES} values through anchors and aliases "
                         f"(at least {nodes}): refused, the limit is {MAX_NODES}")
        self.where = where


class TooDeep(TooBig):
    def __init__(self, where: str, depth: int):
        yaml.YAMLError.__init__(self, f"nested deeper than {MAX_DEPTH} levels (at least {depth}): refused, "
                                      f"the limit is {MAX_DEPTH}")
        self.where = where if len(where) <= 80 else where[:77] + "..."


class StrictLoader(_BASE):
    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _value in node.value:
                if key_node.tag == MERGE_TAG:
                    continue
                try:
                    key = self.construct_object(key_node, deep=True)
                    hash(key)
                except (TypeError, yaml.YAMLError):
                    continue   # the base constructor says what is wrong with such a key
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise DuplicateKey(key, line, seen[key])
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def load(text: str):
    """The document in ``text``: safe, no duplicate keys, bounded in depth and after alias expansion."""
    try:
        doc = yaml.load(text, Loader=StrictLoader)
    except RecursionError:
        raise TooDeep("", MAX_DEPTH) from None
    check_depth(doc)
    check_size(doc)
    return doc


def check_depth(doc) -> None:
    """Raise TooDeep naming the key under which ``doc`` nests past MAX_DEPTH levels (without recursing)."""
    level, depth = [("", doc)], 0
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            raise TooDeep(level[0][0], depth)
        nxt, seen = [], set()
        for where, node in level:
            items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
            for k, v in items:
                if isinstance(v, (dict, list)) and id(v) not in seen:   # a shared alias is walked once a level
                    seen.add(id(v))
                    nxt.append((f"{where}[{k}]" if isinstance(node, list) else f"{where}.{k}".lstrip("."), v))
        level = nxt


def check_size(doc) -> None:
    """Raise TooBig naming the key under which ``doc`` expands past MAX_NODES values."""
    memo: dict = {}

    def size(obj) -> int:
        if isinstance(obj, (dict, list)):
            if id(obj) not in memo:
                memo[id(obj)] = 0   # a cycle (not made by the safe loader) counts once
                kids = obj.values() if isinstance(obj, dict) else obj
                memo[id(obj)] = min(1 + sum(size(k) for k in kids), 10 * MAX_NODES)
            return memo[id(obj)]
        return 1

    total = size(doc)
    if total <= MAX_NODES:
        return
    path, node = [], doc
    while True:   # down into the child that alone is over the limit, while there is one
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        big = next(((k, v) for k, v in items if size(v) > MAX_NODES), None)
        if big is None:
            break
        path.append(str(big[0]) if isinstance(node, dict) else f"[{big[0]}]")
        node = big[1]
    raise TooBig(".".join(path).replace(".[", "["), total)
