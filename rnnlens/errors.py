"""One exception type for every problem a user can fix by changing their input.

The command line turns it into a one-line message and exit code 2; library users can
catch it. Anything else that escapes is a bug in rnnlens, not in the input.
"""


class RnnlensError(Exception):
    """A user-facing error: bad input, a missing or corrupt file, an invalid config."""
