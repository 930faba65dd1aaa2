"""tfcalc: exact parameter, FLOP and memory counts for real PyTorch transformers."""

import warnings

__version__ = "0.1.0"

# torch prints a warning at import when NumPy is absent; tfcalc never uses NumPy, so it is only noise.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
