"""A tiny config format: `key = value` lines, `#` comments, blank lines ignored."""

DEFAULTS = {"encoding": "utf-8", "max_width": "80", "verbose": "false"}


def parse_config(text):
    """Parse config text into a dict of strings, on top of DEFAULTS."""
    config = dict(DEFAULTS)
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if "=" not in line:
            raise ValueError(f"line {number}: expected 'key = value', got {line!r}")
        key, value = line.split("=", 1)
        config[key.strip()] = value.strip()
    return config


def load_config(path):
    """Read and parse a config file."""
    with open(path, encoding="utf-8") as handle:
        return parse_config(handle.read())
