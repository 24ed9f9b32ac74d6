import numpy as np
import pytest

from keras_transformer._checks import check_int, check_number

# Pure-Python argument checks: one_backend.
pytestmark = pytest.mark.one_backend


@pytest.mark.parametrize("value", [True, 1.0, "3", None, 0, -2])
def test_check_int_refuses_and_names_the_argument(value):
    with pytest.raises(ValueError, match=rf"`beam_size` must be an int >= 1\. Received: beam_size={value!r}"):
        check_int("beam_size", value, minimum=1)


def test_check_int_takes_numpy_integers_and_returns_python_ints():
    result = check_int("keep", np.int64(3), minimum=1)
    assert result == 3 and type(result) is int
    assert check_int("keep", None, allow_none=True) is None


@pytest.mark.parametrize("value", [False, "0.6", -0.1, None])
def test_check_number_refuses_and_names_the_argument(value):
    with pytest.raises(ValueError, match=rf"`alpha` must be a number >= 0\. Received: alpha={value!r}"):
        check_number("alpha", value, minimum=0)


def test_check_number_strict_bound():
    assert check_number("minutes", np.float32(0.5), minimum=0, strict=True) == 0.5
    with pytest.raises(ValueError, match=r"`minutes` must be a number > 0\. Received: minutes=0"):
        check_number("minutes", 0, minimum=0, strict=True)
