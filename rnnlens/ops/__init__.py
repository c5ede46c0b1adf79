"""Pure tensor functions for recurrences; each fast path has a plain `*_ref` beside it."""
