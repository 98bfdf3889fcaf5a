"""forecast: a small multi-horizon time-series forecaster (lookback window -> next steps)."""

from .models import Forecaster
from .utils.device import get_device

__all__ = ["Forecaster", "get_device"]
__version__ = "0.3.1"
