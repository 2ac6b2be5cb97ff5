"""Where a tool list comes from: a JSON file, or a mapping ``{"tools": [...]}``, read into its entries."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from toolgrammar.errors import ToolSchemaError
from toolgrammar.schema.report import json_type_name


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def read_tool_file(path: str | os.PathLike[str]) -> list[Any]:
    file = Path(path)
    try:
        exists, is_dir = file.is_file(), file.is_dir()
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte
        exists, is_dir = False, False
    if not exists:
        what = "is a directory, not a file" if is_dir else "does not exist"
        hint = ""
        if isinstance(path, str) and path.lstrip()[:1] in ("[", "{"):
            hint = " (a str source is a path; for JSON text pass json.loads(text))"
        raise ToolSchemaError(f"tool file {str(file)!r} {what}{hint}")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ToolSchemaError(
            f"tool file {str(file)!r} is not UTF-8 text ({error.reason} at byte {error.start})"
        ) from None
    except OSError as error:
        raise ToolSchemaError(f"tool file {str(file)!r} cannot be read: {error.strerror or error}") from None
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as error:
        raise ToolSchemaError(f"tool file {file}:{error.lineno}:{error.colno}: not valid JSON: {error.msg}") from None
    except ValueError as error:  # NaN / Infinity
        raise ToolSchemaError(f"tool file {str(file)!r}: not valid JSON: {error}") from None
    except RecursionError:
        raise ToolSchemaError(f"tool file {str(file)!r}: JSON nested too deeply to read") from None
    if isinstance(data, list):
        return data
    if isinstance(data, dict) and "tools" in data:
        return unwrap_tools_mapping(data, where=f"tool file {str(file)!r}")
    raise ToolSchemaError(
        f"tool file {str(file)!r} holds a JSON {json_type_name(data)}; "
        'it must hold a list of tools or {"tools": [...]}'
    )


def unwrap_tools_mapping(data: Mapping[str, Any], *, where: str) -> Sequence[Any]:
    if "tools" not in data:
        return [data]  # one entry
    extra = sorted(str(k) for k in data if k != "tools")
    if extra:
        raise ToolSchemaError(f'{where}: unknown key(s) {", ".join(map(repr, extra))} beside "tools"; remove them')
    tools = data["tools"]
    if not isinstance(tools, list | tuple):
        raise ToolSchemaError(f'{where}: "tools" is a JSON {json_type_name(tools)}; it must be a list of tools')
    return tools


__all__ = ["read_tool_file", "unwrap_tools_mapping"]
