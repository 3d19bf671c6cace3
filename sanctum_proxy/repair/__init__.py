"""The repair tiers and the round loop; pure, as the loop's sender is injected (map: docs/architecture.md)."""
