"""sibyl-pg tests (a package, so helpers import as ``tests.x``)."""
