"""HTTP plumbing around the routes: who may call, how much, and how answers are written."""
