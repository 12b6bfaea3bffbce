"""The operator's unit tests share `kube_fakes` (stand-ins for the Kubernetes API client)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the tests import `kube_fakes` (pytest importlib mode)
