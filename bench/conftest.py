"""The fixtures of bench/'s tests that tests/ has too."""

from tests.roomy import roomy_tmp_path  # noqa: F401  (a fixture)
