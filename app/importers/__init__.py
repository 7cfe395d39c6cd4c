"""Importers: turn outside data into the NDJSON import records (rule: import-idempotent).

- ``app.importers.ndjson``: bulk import of import records into the database.
- ``app.importers.peps``: pure-Python conversion of the PEP corpus into import records (no
  database).
"""
