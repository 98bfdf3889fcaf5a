"""The tpx accelerator (placeholder until the backend lands)."""


def _autoload() -> None:
    """Entry point for PyTorch's device-backend autoload (group ``torch.backends``)."""
