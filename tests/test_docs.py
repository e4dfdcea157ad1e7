"""Docstring examples are run as tests, so the documented usage stays true."""

import doctest

import sparse_react.env


def test_env_docstring_examples_run():
    result = doctest.testmod(sparse_react.env, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 4 and result.failed == 0
