def helper(x):
    assert x == 2, f"x was {x}"


def test_passes():
    assert 1 + 1 == 2


def test_fails():
    helper(3)


def test_raises():
    raise KeyError("missing-key")
