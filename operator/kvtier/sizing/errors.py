"""The one error the sizing engine raises for input it cannot size."""


class SizingError(ValueError):
    """Bad or unsupported sizing input.

    `field` names the offending input (e.g. ``"tensorParallelSize"``, ``"config.json"``) so the
    operator can turn it into a condition and the CLI into one line.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
