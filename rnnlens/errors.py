"""One exception type for every problem a user can fix by changing their input.

The command line turns it into a one-line message and exit code 2; library users can
catch it. Anything else that escapes is a bug in rnnlens, not in the input.
"""


class RnnlensError(Exception):
    """A user-facing error: bad input, a missing or corrupt file, an invalid config."""


class InputError(RnnlensError, ValueError):
    """A tensor or value handed to a library function that does not fit its contract (a mask or
    start state of the wrong shape, a size that is not positive): a ValueError as well, for
    code that catches those."""
