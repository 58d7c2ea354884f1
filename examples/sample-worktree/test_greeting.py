"""Tests of the sample module; run with ``python3 -m unittest``."""

import unittest

from greeting import greet


class GreetTest(unittest.TestCase):
    def test_greets_by_name(self) -> None:
        """The greeting spells hello right and names the person."""
        self.assertEqual("Hello, Ada!", greet("Ada"))  # noqa: PT009 - plain unittest, no pytest


if __name__ == "__main__":
    unittest.main()
