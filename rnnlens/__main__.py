import os
import sys

from .cli import main

code = main()
if int(os.environ.get("WORLD_SIZE", "1")) > 1 and "RANK" in os.environ:
    # A torchrun worker, its process group already destroyed: leave without the interpreter's
    # teardown, in which torch's gloo objects now and then abort the process ("terminate
    # called without an active exception") after a run that succeeded.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
sys.exit(code)
