"""The pure core every layer speaks: no I/O, no state, no imports from the package but errors."""
