import sys
from pathlib import Path

here = Path(__file__).parent
sys.path[:0] = [str(here), str(here.parent), str(here.parent / "service"), str(here.parent / "gitops")]
