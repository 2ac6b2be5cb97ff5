"""Command line: python -m textkit.cli slug|count|stats ARGS..."""

import sys

from .stats import mean, median
from .strings import slugify, word_count


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: textkit slug|count|stats ARGS...")
        return 2
    command, rest = args[0], args[1:]
    if command == "slug":
        print(slugify(" ".join(rest)))
    elif command == "count":
        print(word_count(" ".join(rest)))
    elif command == "stats":
        numbers = [float(x) for x in rest]
        print(f"mean={mean(numbers)} median={median(numbers)}")
    else:
        print(f"unknown command: {command}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
