"""The usage examples in the codec's docstrings run as written."""
import doctest

from ina.compression import codec


def test_docstring_examples_run():
    result = doctest.testmod(codec, raise_on_error=False, verbose=False)
    assert result.attempted > 0 and result.failed == 0
