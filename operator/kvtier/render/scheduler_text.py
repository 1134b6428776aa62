"""Edit one plugin's parameters in an EndpointPickerConfig kept as YAML text (a ConfigMap key).

The text is the user's: kvtier changes only the values it owns and leaves every other byte
as it was (comments, key order, quoting, blank lines). Values are replaced where they stand;
a missing key is added on a line of its own beside its siblings (or inside the flow map); a
key kvtier added is removed with its line (or from the flow map). When the document's layout
leaves no such edit (a block scalar, a key after `- ` on a sequence item's line), the
whole text is written anew from the parsed config: key order is kept, comments and the
original quoting are lost, JSON stays JSON. Every result is parsed back and compared with
the intended config before it is used.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

import yaml

PARAMETERS = "parameters"


def load_config(text: str) -> Any:
    """The parsed document, or None when the text is not one YAML document."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


def with_parameters(config: Any, plugin: str, parameters: Mapping[str, Any] | None) -> Any:
    """`config` with the named plugin's parameters set (None: without a parameters map)."""
    out = copy.deepcopy(config)
    for item in out.get("plugins") or []:
        if isinstance(item, dict) and item.get("name") == plugin:
            if parameters is None:
                item.pop(PARAMETERS, None)
            else:
                item[PARAMETERS] = dict(parameters)
    return out


def edit_parameters(text: str, plugin: str, parameters: Mapping[str, Any] | None) -> str:
    """The text with the named plugin's parameters set to `parameters` (None: removed)."""
    config = load_config(text)
    expected = with_parameters(config, plugin, parameters)
    out: str | None = text
    for _ in range(2 * len(parameters or {}) + 8):  # one edit per step; each step converges
        step = _next_edit(out, plugin, parameters) if out is not None else None
        if step is None or step == out:
            break
        out = step
    if out is not None and load_config(out) == expected:
        return out
    return _dump(expected, _is_json(text))


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _dump(config: Any, as_json: bool) -> str:
    if as_json:
        return json.dumps(config, indent=2) + "\n"
    return yaml.safe_dump(config, sort_keys=False, default_flow_style=False)


def _entry(mapping: yaml.MappingNode, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    for k, v in mapping.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key:
            return k, v
    return None


def _plugin_node(root: yaml.Node, plugin: str) -> yaml.MappingNode | None:
    if not isinstance(root, yaml.MappingNode):
        return None
    found = _entry(root, "plugins")
    if found is None or not isinstance(found[1], yaml.SequenceNode):
        return None
    for item in found[1].value:
        if isinstance(item, yaml.MappingNode):
            name = _entry(item, "name")
            if name is not None and getattr(name[1], "value", None) == plugin:
                return item
    return None


def _next_edit(text: str, plugin: str, parameters: Mapping[str, Any] | None) -> str | None:
    """The text after one edit toward `parameters`; the text itself when nothing is left to
    edit; None when the layout allows no edit in place."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    node = _plugin_node(root, plugin) if root is not None else None
    if node is None:
        return None
    found = _entry(node, PARAMETERS)
    if parameters is None:
        return text if found is None else _remove(text, node, found)
    if found is None:
        return _add(text, node, PARAMETERS, dict(parameters))
    params = found[1]
    if not isinstance(params, yaml.MappingNode):
        return None
    current = yaml.safe_load(yaml.serialize(params)) or {}
    for key, value in parameters.items():
        entry = _entry(params, key)
        if entry is None:
            return _add(text, params, key, value)
        if current.get(key) != value or type(current.get(key)) is not type(value):
            return _replace(text, entry[1], value)
    for key in current:
        if key not in parameters:
            entry = _entry(params, key)
            return None if entry is None else _remove(text, params, entry)
    return text


def _scalar(value: Any) -> str:
    """A value as YAML flow text: JSON's spelling is valid YAML for numbers, booleans, strings
    and maps of them."""
    return json.dumps(value, separators=(", ", ": "))


def _replace(text: str, node: yaml.Node, value: Any) -> str | None:
    if not isinstance(node, yaml.ScalarNode) or node.style in ("|", ">"):
        return None
    return text[: node.start_mark.index] + _scalar(value) + text[node.end_mark.index :]


def _last_index(node: yaml.Node) -> int:
    """Where the node's last character ends (a block collection's end mark lies past it)."""
    if isinstance(node, yaml.MappingNode) and node.value and not node.flow_style:
        return _last_index(node.value[-1][1])
    if isinstance(node, yaml.SequenceNode) and node.value and not node.flow_style:
        return _last_index(node.value[-1])
    return int(node.end_mark.index)


def _line_end(text: str, index: int) -> int:
    end = text.find("\n", index)
    return len(text) if end < 0 else end


def _add(text: str, mapping: yaml.MappingNode, key: str, value: Any) -> str | None:
    if mapping.flow_style:
        close = mapping.end_mark.index - 1
        if close < 0 or text[close] != "}":
            return None
        sep = ", " if mapping.value else ""
        return f"{text[:close].rstrip()}{sep}{_scalar(key)}: {_scalar(value)}{text[close:]}"
    if not mapping.value:
        return None
    last = mapping.value[-1][1]
    if isinstance(last, yaml.ScalarNode) and last.style in ("|", ">"):
        return None
    indent = " " * mapping.value[0][0].start_mark.column
    if isinstance(value, Mapping):
        inner = indent + "  "
        lines = [f"{indent}{key}:", *(f"{inner}{k}: {_scalar(v)}" for k, v in value.items())]
    else:
        lines = [f"{indent}{key}: {_scalar(value)}"]
    at = _line_end(text, _last_index(last))
    return text[:at] + "\n" + "\n".join(lines) + text[at:]


def _remove(text: str, mapping: yaml.MappingNode, entry: tuple[yaml.Node, yaml.Node]) -> str | None:
    key, value = entry
    if mapping.flow_style:
        at = next(i for i, (k, _) in enumerate(mapping.value) if k is key)
        if at > 0:  # with the separator before it: `, key: value`
            start, end = _last_index(mapping.value[at - 1][1]), _last_index(value)
        elif len(mapping.value) > 1:  # the first: up to the next key
            start, end = key.start_mark.index, mapping.value[1][0].start_mark.index
        else:
            start, end = key.start_mark.index, _last_index(value)
        return text[:start] + text[end:]
    if len(mapping.value) < 2:
        return None  # the map would be left empty (null in block style)
    start = key.start_mark.index - key.start_mark.column
    if text[start : key.start_mark.index].strip():
        return None  # the key shares its line with something else (`- key: ...`)
    end = _line_end(text, _last_index(value))
    return text[:start] + text[min(end + 1, len(text)) :]
