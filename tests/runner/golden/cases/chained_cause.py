def load(path):
    try:
        return open(path).read()
    except FileNotFoundError as exc:
        raise RuntimeError(f"config {path} is missing") from exc


load("nope.yaml")
