"""Command line entry point."""


def main(argv: list[str] | None = None) -> int:
    return 0
