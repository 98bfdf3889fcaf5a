import math

from series import closed_form, sum_of_squares


def test_the_sum_matches_the_closed_form():
    n = 1000
    assert math.isclose(sum_of_squares(n).item(), closed_form(n), rel_tol=1e-12)


def test_each_increment_is_the_next_square():
    # telescoping: S(n+1) - S(n) = (n+1)**2, resolved only in double precision at this size
    n = 1_000_000
    increment = (sum_of_squares(n + 1) - sum_of_squares(n)).item()
    assert math.isclose(increment, (n + 1) ** 2, rel_tol=1e-9)
