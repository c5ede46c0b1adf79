"""`python -m benchmarks`: the whole suite (benchmarks/suite.py)."""
import sys

from .suite import main

sys.exit(main())
