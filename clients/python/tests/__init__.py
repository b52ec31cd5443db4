"""weir's Python client's tests: ``cd clients/python && python3 -m unittest``.

The test modules import their helpers (``harness``, ``proxy``) by their bare
names, so this folder goes on ``sys.path`` when they are loaded as a package
(``python3 -m unittest`` from ``clients/python``); ``python3 -m unittest
discover -s tests`` puts it there itself.
"""

import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
if _here not in sys.path:
    sys.path.insert(0, _here)
