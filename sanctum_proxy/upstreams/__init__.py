"""Everything that reaches an upstream model server."""
