# fix: {"line": 8}
import torch


def err(t):

    # a form feed on the next line is whitespace to Python, not a line break
    err = (t.float() - 1).abs()
    return err
